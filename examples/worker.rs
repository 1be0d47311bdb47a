//! The shard worker as a long-running process (instead of a scheduled Lambda
//! function): the same library code, bounded by Ctrl-C instead of a deadline.
//!
//! Against AWS (standard credential chain), configured like the functions:
//!
//! ```sh
//! SHARDKEEPER_GROUP=orders-app SHARDKEEPER_STREAM=orders cargo run --example worker
//! ```
//!
//! (`SHARDKEEPER_EFO_POOL_SIZE=2` reads with enhanced fan-out.) Or on the
//! embedded servers, with a stream, a producer and a rebalancer of its own,
//! for ten seconds: `cargo run --example worker -- --local` (add `--efo` to
//! read with an enhanced fan-out consumer).

use aws_sdk_kinesis::primitives::Blob;
use shardkeeper::config::ScheduledConfig;
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::consumer::EfoPool;
use shardkeeper::consumer::{ShardWorker, WorkerConfig};
use shardkeeper::functions::Rebalancer;
use shardkeeper::group::RebalanceConfig;
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), Error> {
    shardkeeper::functions::init_tracing();
    let local = std::env::args().any(|a| a == "--local");
    let efo = std::env::args().any(|a| a == "--efo");
    let _servers;
    let (dynamodb, kinesis, config, worker_config) = if local {
        let servers = LocalServers::start(LocalOptions::default())?;
        let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
        _servers = servers;
        aws.kinesis
            .create_stream()
            .stream_name("orders")
            .shard_count(4)
            .send()
            .await?;
        (
            aws.dynamodb,
            aws.kinesis,
            StoreConfig::new("orders-app", "orders")?,
            WorkerConfig::default()
                .renew_every(Duration::from_secs(1))
                .enhanced_fan_out(efo.then(|| EfoPool::new("orders-app", 1))),
        )
    } else {
        let config = ScheduledConfig::from_env()?;
        let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
        (
            aws_sdk_dynamodb::Client::new(&aws),
            aws_sdk_kinesis::Client::new(&aws),
            config.store.clone(),
            config.worker_config(),
        )
    };
    let store = StateStore::new(dynamodb, config);
    store.table().ensure(&TableOptions::default()).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        flag.store(true, Ordering::SeqCst);
    });
    if local {
        let (kinesis, store, flag) = (kinesis.clone(), store.clone(), stop.clone());
        tokio::spawn(async move {
            let rebalancer = Rebalancer {
                store,
                kinesis: kinesis.clone(),
                config: RebalanceConfig::default(),
                emit_metrics: false,
                sightings: Default::default(),
                fleet: None,
            };
            let started = Instant::now();
            for i in 0u64.. {
                if flag.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(10) {
                    flag.store(true, Ordering::SeqCst);
                    return;
                }
                let _ = kinesis
                    .put_record()
                    .stream_name("orders")
                    .partition_key(format!("customer-{}", i % 17))
                    .data(Blob::new(format!("{{\"order\":{i}}}")))
                    .send()
                    .await;
                if i % 20 == 0 {
                    if let Err(e) = rebalancer.tick().await {
                        eprintln!("rebalancer: {e}");
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        });
    }

    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    let id = ConsumerId::new(format!(
        "{}-{}",
        host.replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        std::process::id()
    ))?;
    let session = ConsumerSession::new(
        store.clone(),
        ConsumerInfo::for_this_process(id.clone(), store.now()),
        Duration::from_secs(10),
    );
    let seen = Arc::new(AtomicU64::new(0));
    let counter = seen.clone();
    let handler = move |record: StreamRecord| {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(shard = %record.shard_id, sequence = %record.sequence_number, "record");
            Ok::<(), std::io::Error>(())
        }
    };
    let mut worker = ShardWorker::new(session, store, kinesis, handler, worker_config);
    println!("worker {id} running; Ctrl-C stops it (checkpoints, then releases its leases)");
    let report = worker
        .run_until(None, || stop.load(Ordering::SeqCst))
        .await?;
    println!(
        "stopped: {} records processed, {} checkpoints, {} polls, {} subscriptions",
        seen.load(Ordering::Relaxed),
        report.shards.checkpoints,
        report.shards.polls,
        report.shards.subscriptions
    );
    Ok(())
}
