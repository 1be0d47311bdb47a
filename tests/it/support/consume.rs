//! Consuming a produced stream in tests: a logging handler, worker set-ups,
//! a producer of numbered records per key, and the check that every record
//! came once and in order per key.

use aws_sdk_kinesis::primitives::Blob;
use shardkeeper::consumer::{ConsumerSession, StandaloneSession};
use shardkeeper::consumer::{ShardWorker, WorkerConfig};
use shardkeeper::processing::{ProcessingOptions, StreamRecord};
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// (consumer, partition key, record number) of every record handled.
pub type Log = Arc<Mutex<Vec<(String, String, u32)>>>;

/// A handler that logs (consumer, key, n) for every record.
pub fn logging(name: &str, log: Log) -> impl shardkeeper::processing::RecordHandler {
    let me = name.to_owned();
    move |record: StreamRecord| {
        let (log, me) = (log.clone(), me.clone());
        async move {
            let n: u32 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
            log.lock()
                .unwrap()
                .push((me, record.partition_key.to_string(), n));
            Ok::<(), std::io::Error>(())
        }
    }
}

/// Renew, poll and checkpoint at every step.
pub fn eager() -> WorkerConfig {
    WorkerConfig::default()
        .renew_every(Duration::ZERO)
        .min_poll_interval(Duration::ZERO)
        .idle_poll_interval(Duration::ZERO)
        .checkpoint_every(Duration::ZERO)
        .processing(ProcessingOptions::default())
}

/// A group worker `name` logging to `log`, with the eager configuration.
pub fn worker(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
    log: Log,
) -> ShardWorker<impl shardkeeper::processing::RecordHandler> {
    worker_with(store, kinesis, name, log, eager())
}

/// A group worker `name` logging to `log`.
pub fn worker_with(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
    log: Log,
    config: WorkerConfig,
) -> ShardWorker<impl shardkeeper::processing::RecordHandler> {
    worker_running(
        store,
        kinesis,
        name,
        logging(name, log),
        Duration::from_secs(10),
        config,
    )
}

/// A group worker `name` running `handler`, holding leases for `term`.
pub fn worker_running<H: shardkeeper::processing::RecordHandler>(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
    handler: H,
    term: Duration,
    config: WorkerConfig,
) -> ShardWorker<H> {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let session = ConsumerSession::new(store.clone(), info, term);
    ShardWorker::new(session, store.clone(), kinesis.clone(), handler, config)
}

/// A standalone worker `name` logging to `log`, with the eager configuration.
pub fn standalone(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
    log: Log,
) -> ShardWorker<impl shardkeeper::processing::RecordHandler> {
    standalone_with(store, kinesis, name, log, eager())
}

/// A standalone worker `name` logging to `log`.
pub fn standalone_with(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    name: &str,
    log: Log,
    config: WorkerConfig,
) -> ShardWorker<impl shardkeeper::processing::RecordHandler> {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let reader = StandaloneSession::new(store.clone(), kinesis.clone(), info);
    ShardWorker::standalone(
        reader,
        store.clone(),
        kinesis.clone(),
        logging(name, log),
        config,
    )
}

/// One rebalancer tick, then one step of every worker.
pub async fn tick_and_step<H: shardkeeper::processing::RecordHandler>(
    rebalancer: &shardkeeper::functions::Rebalancer,
    workers: &mut [ShardWorker<H>],
) {
    rebalancer.tick().await.unwrap();
    for w in workers {
        w.step().await.unwrap();
    }
}

/// Puts records `per_key` numbered for each of `keys` keys (`k0`..).
pub async fn produce(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    keys: u32,
    per_key: std::ops::Range<u32>,
) {
    for n in per_key {
        for k in 0..keys {
            kinesis
                .put_record()
                .stream_name(stream)
                .partition_key(format!("k{k}"))
                .data(Blob::new(n.to_string()))
                .send()
                .await
                .unwrap();
        }
    }
}

/// Every (key, n) processed, each once, per key in order.
pub fn check(log: &Log, keys: u32, per_key: u32) {
    let log = log.lock().unwrap();
    let mut by_key: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (_, key, n) in log.iter() {
        by_key.entry(key.as_str()).or_default().push(*n);
    }
    assert_eq!(by_key.len(), keys as usize, "every key seen");
    for (key, ns) in by_key {
        assert_eq!(
            ns,
            (0..per_key).collect::<Vec<_>>(),
            "{key}: every record once, in order"
        );
    }
}
