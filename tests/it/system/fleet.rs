//! A fleet of short-lived shard workers kept by the rebalancer, run the way
//! Lambda runs the shard-worker function: each start is an invocation of its
//! handler with a deadline. The rebalancer starts a worker's replacement
//! before the worker drains, so each worker hands its shards to a worker
//! already running (a claim it honours at a renewal), not to one yet to
//! start, and nothing is left for the end of its run.

use crate::support::common::{create_stream, ctx, lambda_context};
use crate::support::consume::produce;
use shardkeeper::consumer::{EfoPool, WorkerConfig, WorkerReport};
use shardkeeper::functions::{Fleet, Rebalancer, TaskStarter, WorkerFunction};
use shardkeeper::group::{FleetConfig, RebalanceConfig};
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{StateStore, StoreConfig};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each invocation's deadline: short, so a test sees several generations.
const LIFETIME: Duration = Duration::from_secs(10);
const DRAIN: Duration = Duration::from_secs(3);
const TERM: Duration = Duration::from_secs(2);

type Ended = Arc<Mutex<Vec<(Instant, WorkerReport)>>>;

/// What one fleet run did.
struct FleetRun {
    /// Each invocation's end and report.
    ended: Vec<(Instant, WorkerReport)>,
    /// When the rebalancer last could start a worker.
    last_start: Instant,
    /// Sequence numbers the handlers processed.
    seen: BTreeSet<String>,
}

/// Runs a fleet of workers with `config` on `stream` for `run_for` while
/// records are put, the way Lambda runs it: each start is one invocation
/// of the worker function's handler with a [`LIFETIME`] deadline. Then the
/// rebalancer stops starting workers and the run waits for every
/// invocation to end.
async fn run_fleet(
    ctx: &crate::support::common::Ctx,
    stream: &str,
    config: WorkerConfig,
    fleet: FleetConfig,
    run_for: Duration,
) -> FleetRun {
    // The wall clock, as in production: leases and deadlines in real time.
    let store = StateStore::new(
        ctx.aws.dynamodb.clone(),
        StoreConfig::new(&shardkeeper_local::unique_name("fleet"), stream)
            .unwrap()
            .table(&ctx.table)
            .unwrap()
            .buckets(crate::support::common::test_buckets()),
    );
    let seen: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let sink = seen.clone();
    let function = Arc::new(
        WorkerFunction::new(store.clone(), ctx.aws.kinesis.clone(), move || {
            let sink = sink.clone();
            move |record: StreamRecord| {
                let sink = sink.clone();
                async move {
                    sink.lock()
                        .unwrap()
                        .insert(record.sequence_number.to_string());
                    Ok::<(), std::io::Error>(())
                }
            }
        })
        .lease_term(TERM)
        .config(config)
        .margin(Duration::from_millis(200))
        .drain(DRAIN)
        .emit_metrics(false)
        .observer(None),
    );
    // The Lambda service: each start is one invocation with its deadline.
    let ended: Ended = Arc::default();
    let invocations = Arc::new(AtomicU64::new(0));
    let starter = {
        let (function, ended, invocations) = (function.clone(), ended.clone(), invocations.clone());
        TaskStarter::new(move || {
            let (function, ended) = (function.clone(), ended.clone());
            let n = invocations.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut context = lambda_context(LIFETIME);
                context.request_id = format!("invocation-{n}");
                let event = lambda_runtime::LambdaEvent::new(serde_json::json!({}), context);
                let report = function
                    .handle(event)
                    .await
                    .expect("the invocation ends cleanly");
                ended.lock().unwrap().push((Instant::now(), report));
            }
        })
    };
    let rebalancer = Rebalancer {
        store: store.clone(),
        kinesis: ctx.aws.kinesis.clone(),
        config: RebalanceConfig::default()
            .lease_term(TERM)
            .heartbeat_timeout(TERM)
            .max_moves_per_tick(None),
        emit_metrics: false,
        sightings: Default::default(),
        fleet: Some(Fleet::new(fleet, Arc::new(starter))),
    };

    // Records all along, while the fleet goes through several generations.
    let stop = Arc::new(AtomicBool::new(false));
    let producing = {
        let (kinesis, stream, stop) = (ctx.aws.kinesis.clone(), stream.to_owned(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                produce(&kinesis, &stream, 8, n..n + 1).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let run_until = Instant::now() + run_for;
    while Instant::now() < run_until {
        rebalancer.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let last_start = Instant::now();
    stop.store(true, Ordering::SeqCst);
    producing.await.unwrap();
    // No more starts: the running workers end at their deadlines; a
    // rebalancer keeps ticking so the last ones still hand over among
    // themselves, and reads what was produced.
    let fleet_off = Rebalancer {
        fleet: None,
        ..rebalancer.clone()
    };
    while ended.lock().unwrap().len() < invocations.load(Ordering::SeqCst) as usize {
        fleet_off.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let ended = ended.lock().unwrap().clone();
    let seen = seen.lock().unwrap().clone();
    FleetRun {
        ended,
        last_start,
        seen,
    }
}

/// Every record of `stream` was processed.
async fn every_record_processed(
    ctx: &crate::support::common::Ctx,
    stream: &str,
    seen: &BTreeSet<String>,
) {
    let all = crate::support::common::list_shards(&ctx.aws, stream).await;
    assert_eq!(all.len(), 4);
    let mut expected = 0;
    for shard in &all {
        let out = ctx
            .aws
            .kinesis
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap();
        let records = ctx
            .aws
            .kinesis
            .get_records()
            .shard_iterator(out.shard_iterator().unwrap())
            .limit(10_000)
            .send()
            .await
            .unwrap();
        for r in records.records() {
            expected += 1;
            assert!(
                seen.contains(r.sequence_number()),
                "record {} of {} never processed",
                r.sequence_number(),
                shard.shard_id()
            );
        }
    }
    assert_eq!(seen.len(), expected);
}

fn quick() -> WorkerConfig {
    WorkerConfig::default()
        .renew_every(Duration::from_millis(300))
        .min_poll_interval(Duration::ZERO)
        .idle_poll_interval(Duration::from_millis(50))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_short_lived_workers_hands_every_shard_to_a_running_worker() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let fleet = FleetConfig::default()
        .min_workers(2)
        .shards_per_worker(2)
        .lead(DRAIN + Duration::from_secs(2))
        .start_timeout(Duration::from_secs(3))
        .heartbeat_timeout(TERM);
    let run = run_fleet(&ctx, &stream, quick(), fleet, LIFETIME * 3).await;
    assert!(
        run.ended.len() >= 6,
        "several generations: {} invocations",
        run.ended.len()
    );
    // Every worker that ended while a later one had been started held
    // nothing at its end: it had handed each shard to a running worker.
    let mut handed = 0;
    for (at, report) in &run.ended {
        if *at < run.last_start {
            assert_eq!(report.held_at_stop, 0, "{report:?}");
            assert_eq!(report.leases_lost, 0, "{report:?}");
            handed += report.handed_off;
        }
    }
    assert!(
        handed >= 4,
        "shards moved between generations by hand-off: {handed}"
    );
    // Nothing was skipped: every record put was processed.
    every_record_processed(&ctx, &stream, &run.seen).await;
}

/// On enhanced fan-out each worker reads through one consumer of a pool of
/// two, while the group's shards want four workers. Workers that wait for a
/// consumer count as running, so the fleet stays bounded by the pool: a
/// couple of workers per generation, not a start at every tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_on_enhanced_fan_out_stays_within_its_pool() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let pool = 2;
    let config = quick().enhanced_fan_out(Some(
        EfoPool::new(&shardkeeper_local::unique_name("fleet"), pool)
            .poll_interval(Duration::from_millis(50)),
    ));
    let fleet = FleetConfig::default()
        .min_workers(1)
        .shards_per_worker(1)
        .lead(DRAIN + Duration::from_secs(2))
        .start_timeout(Duration::from_secs(3))
        .heartbeat_timeout(TERM)
        .efo_pool_size(Some(pool));
    let run_for = LIFETIME * 3;
    let run = run_fleet(&ctx, &stream, config, fleet, run_for).await;
    // A worker is replaced once less than the lead is left of its run: a
    // generation of `pool` workers every lifetime less the lead, plus the
    // first one and the one running at the end.
    let every = LIFETIME - (DRAIN + Duration::from_secs(2));
    let generations = (run_for.as_secs() / every.as_secs()) as usize + 2;
    assert!(
        run.ended.len() <= pool * generations,
        "{} invocations: the fleet outgrew its pool of {pool}",
        run.ended.len()
    );
    every_record_processed(&ctx, &stream, &run.seen).await;
}
