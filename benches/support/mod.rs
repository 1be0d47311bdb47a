//! The set-up every benchmark of the servers shares: the runtime they run
//! on (two worker threads, as the machines the numbers in
//! docs/BENCHMARKS.md come from have two cores) and a state table of
//! their own; and the events the handler benchmarks generate.

pub mod events;

use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{unique_name, AwsClients};

/// The runtime a benchmark runs on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// A new state table named after `prefix`, created and active.
pub async fn state_table(aws: &AwsClients, prefix: &str) -> String {
    let table = unique_name(prefix);
    StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new("setup", "setup")
            .expect("a config")
            .table(&table)
            .expect("a table name"),
    )
    .table()
    .ensure(&TableOptions::default())
    .await
    .expect("the state table");
    table
}

/// Waits until `stream` is ACTIVE (the server creates it in the background).
pub async fn active(aws: &AwsClients, stream: &str) {
    loop {
        let summary = aws
            .kinesis
            .describe_stream_summary()
            .stream_name(stream)
            .send()
            .await;
        let status = summary
            .ok()
            .and_then(|s| s.stream_description_summary.map(|d| d.stream_status));
        if status == Some(aws_sdk_kinesis::types::StreamStatus::Active) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A worker `name` on a fresh state table for `stream`, once it holds
/// `shards` of its shards (the rebalancer ticks until then; the worker
/// learns of each lease at its next heartbeat).
pub async fn holding_worker<H: shardkeeper::processing::RecordHandler>(
    aws: &AwsClients,
    stream: &str,
    name: &str,
    handler: H,
    config: shardkeeper::consumer::WorkerConfig,
    shards: usize,
) -> shardkeeper::ShardWorker<H> {
    use shardkeeper::consumer::ConsumerSession;
    use shardkeeper::state::{ConsumerId, ConsumerInfo};
    let table = state_table(aws, "bench").await;
    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new("bench", stream)
            .expect("a config")
            .table(&table)
            .expect("a table name"),
    );
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).expect("an id"), store.now());
    let session = ConsumerSession::new(store.clone(), info, std::time::Duration::from_secs(10));
    let mut worker =
        shardkeeper::ShardWorker::new(session, store.clone(), aws.kinesis.clone(), handler, config);
    let rebalancer = shardkeeper::functions::Rebalancer::new(
        store.clone(),
        aws.kinesis.clone(),
        shardkeeper::group::RebalanceConfig::default(),
    );
    worker.step().await.expect("a step");
    while worker.shards().len() < shards {
        rebalancer.tick().await.expect("a tick");
        worker.step().await.expect("a step");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    worker
}
