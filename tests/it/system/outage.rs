//! A shard worker through throttling storms, internal errors, dropped
//! connections, added latency and a restart of the DynamoDB server: it
//! rides them out (counting them) and loses no record.

use crate::support::common::{create_stream, rebalancer};
use crate::support::consume::{check, produce, worker_with, Log};
use crate::support::faulty::Faulty;
use shardkeeper::consumer::WorkerConfig;
use shardkeeper::state::StateStore;
use shardkeeper_local::Faults;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const KEYS: u32 = 10;

/// Waits (bounded) until `count` distinct records are in the log.
async fn until_processed(log: &Log, count: usize) -> usize {
    let mut seen = 0;
    for _ in 0..600 {
        seen = log
            .lock()
            .unwrap()
            .iter()
            .map(|(_, k, n)| (k.clone(), *n))
            .collect::<BTreeSet<_>>()
            .len();
        if seen >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_rides_out_faults_and_a_dynamodb_restart_without_loss() {
    let seed = fastrand::u64(..);
    let mut f = Faulty::start(seed).await;
    let stream = create_stream(&f.direct, 2).await;
    // The worker goes through the proxies; the rebalancer and the producer
    // go straight to the servers. All on the real clock.
    let config = f.ctx.store(&stream).config().clone();
    let store = StateStore::new(f.ctx.aws.dynamodb.clone(), config.clone());
    let direct = StateStore::new(f.direct.dynamodb.clone(), config);
    let assigner = rebalancer(&f.direct, &direct);
    let stop = Arc::new(AtomicBool::new(false));
    let assigning = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // Fails while DynamoDB is down, like a scheduled invocation.
                let _ = assigner.tick().await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let log: Log = Arc::default();
    let config = WorkerConfig::default()
        .renew_every(Duration::from_millis(200))
        .min_poll_interval(Duration::from_millis(50))
        .idle_poll_interval(Duration::from_millis(50));
    let mut worker = worker_with(&store, &f.ctx.aws.kinesis, "w0", log.clone(), config);
    let running = {
        let stop = stop.clone();
        tokio::spawn(async move {
            worker
                .run_until(None, || stop.load(Ordering::Relaxed))
                .await
                .cloned()
        })
    };

    produce(&f.direct.kinesis, &stream, KEYS, 0..3).await;
    assert_eq!(until_processed(&log, 30).await, 30, "seed {seed}");

    // Everything at once, at high rates, on both services.
    f.set_faults(&Faults {
        throttle: 0.25,
        server_error: 0.1,
        drop: 0.1,
        // Lost responses wait for the writes to recognise them as
        // already done (not yet: see docs/RELIABILITY.md).
        lose_response: 0.0,
        delay: 0.3,
        latency: Duration::ZERO..=Duration::from_millis(50),
        slow: None,
    });
    produce(&f.direct.kinesis, &stream, KEYS, 3..6).await;
    assert_eq!(until_processed(&log, 60).await, 60, "seed {seed}");

    // A throttling storm on the table: every call refused for a while.
    f.set_faults(&Faults::none());
    f.dynamodb
        .set_faults(Faults {
            throttle: 1.0,
            ..Faults::none()
        })
        .unwrap();
    produce(&f.direct.kinesis, &stream, KEYS, 6..8).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    f.dynamodb.set_faults(Faults::none()).unwrap();

    // The table's server goes down for longer than the SDK's retries last
    // (3 attempts, backoff up to 1 s and 2 s), and comes back on its file.
    let kinesis = f.direct.kinesis.clone();
    let restart = f.restart_dynamodb(Duration::from_secs(5));
    let during = produce(&kinesis, &stream, KEYS, 8..10);
    tokio::join!(restart, during);
    assert_eq!(until_processed(&log, 100).await, 100, "seed {seed}");

    stop.store(true, Ordering::Relaxed);
    let report = running
        .await
        .unwrap()
        .expect("the worker rode the faults out");
    assigning.await.unwrap();
    let counts = f.counts();
    println!("seed {seed}: {report:?}; proxies: {counts:?}");
    assert!(counts.injected() > 0, "faults were injected");
    assert!(report.shards.transient_errors > 0, "the worker met them");
    if report.leases_lost == 0 {
        // Held throughout: every record once, in order per key.
        check(&log, KEYS, 10);
    }
}

/// One hung call costs no lease: a worker whose every GetRecords hangs
/// until its attempt timeout (14 s, longer than the 10 s term plus a
/// heartbeat interval) keeps its heartbeat going beside its loop, so the
/// rebalancer, with another consumer live to give the shard to, never sees
/// its session stale. The hang is on the worker's path alone; the other
/// consumer and the rebalancer go straight to the servers. Real time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_records_that_hangs_past_the_term_costs_no_lease() {
    use shardkeeper::state::{SdkTimeouts, ShardScope};
    use shardkeeper_local::SlowRequests;
    let f = Faulty::start(fastrand::u64(..)).await;
    let stream = create_stream(&f.direct, 2).await;
    let config = f
        .ctx
        .store(&stream)
        .config()
        .clone()
        .timeouts(SdkTimeouts::new(
            Duration::from_secs(3),
            Duration::from_secs(15),
        ));
    let store = StateStore::new(f.ctx.aws.dynamodb.clone(), config.clone());
    let direct = StateStore::new(f.direct.dynamodb.clone(), config);
    let assigner = rebalancer(&f.direct, &direct);
    let stop = Arc::new(AtomicBool::new(false));
    let assigning = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                assigner.tick().await.unwrap();
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let log: Log = Arc::default();
    let config = WorkerConfig::default()
        .min_poll_interval(Duration::from_millis(200))
        .idle_poll_interval(Duration::from_millis(200));
    let run = |mut worker: shardkeeper::consumer::ShardWorker<_>| {
        let stop = stop.clone();
        tokio::spawn(async move {
            worker
                .run_until(None, || stop.load(Ordering::Relaxed))
                .await
                .cloned()
        })
    };
    let hung = run(worker_with(
        &store,
        &f.ctx.aws.kinesis,
        "hung",
        log.clone(),
        config.clone(),
    ));
    let other = run(worker_with(
        &direct,
        &f.direct.kinesis,
        "other",
        log.clone(),
        config,
    ));
    // Each holds one shard.
    let hung_id = shardkeeper::state::ConsumerId::new("hung").unwrap();
    let mut held = Vec::new();
    for _ in 0..300 {
        held = direct.leases().owned_shards(&hung_id).await.unwrap();
        let others = direct
            .leases()
            .owned_shards(&shardkeeper::state::ConsumerId::new("other").unwrap())
            .await
            .unwrap();
        if held.len() == 1 && others.len() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(held.len(), 1, "the hung worker got its shard");
    // Its session takes the given lease up (moving the counter) at its
    // next tick.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let before = direct
        .shards()
        .get(&ShardScope::Group, &held[0].shard_id)
        .await
        .unwrap()
        .counter;

    // From now on every GetRecords of the hung worker waits 14 s.
    f.kinesis
        .set_faults(Faults {
            slow: Some(SlowRequests {
                operation: "GetRecords".into(),
                body_contains: Vec::new(),
                latency: Duration::from_secs(14)..=Duration::from_secs(14),
            }),
            ..Faults::none()
        })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let state = direct
        .shards()
        .get(&ShardScope::Group, &held[0].shard_id)
        .await
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    f.kinesis.set_faults(Faults::none()).unwrap();
    let report = hung.await.unwrap().expect("the hung worker ran on");
    other.await.unwrap().unwrap();
    assigning.await.unwrap();
    assert_eq!(
        (state.owner, state.counter),
        (Some(hung_id), before),
        "the lease stayed with the worker whose reads hung"
    );
    assert_eq!(report.leases_lost, 0, "{report:?}");
    assert!(f.kinesis.counts().slowed > 0, "the reads hung");
}
