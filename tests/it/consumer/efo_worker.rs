//! The shard worker reading with enhanced fan-out (SubscribeToShard) on the
//! in-process Kinesis server: group workers sharing a pool smaller than the
//! group, re-subscription when the server ends a subscription, a split
//! during consumption, and the standalone EFO mode.

use crate::support::common::{create_stream, ctx, reap_once, rebalancer, split_first, Ctx};
use crate::support::consume::{
    check, eager, produce, standalone_with, tick_and_step, worker_with, Log,
};
use shardkeeper::consumer::EfoPool;
use shardkeeper::consumer::WorkerConfig;
use shardkeeper::state::{ShardScope, TableOptions};
use shardkeeper_local::{unique_name, AwsClients, Endpoints, LocalOptions, LocalServers};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn efo(prefix: &str, size: usize) -> WorkerConfig {
    eager().enhanced_fan_out(Some(
        EfoPool::new(prefix, size).poll_interval(Duration::from_millis(20)),
    ))
}

/// A context on servers of its own whose Kinesis ends every subscription
/// after `lifetime` (AWS: 5 minutes), with a state table there.
async fn ctx_with_subscription_lifetime(lifetime: Duration) -> (LocalServers, Ctx) {
    let servers = LocalServers::start(LocalOptions {
        subscription_lifetime: lifetime,
        ..LocalOptions::default()
    })
    .unwrap();
    let mut ctx = ctx().await;
    ctx.aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    ctx.table = unique_name("sk-efo");
    (servers, ctx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn efo_workers_share_a_pool_smaller_than_the_group_and_lose_nothing_through_a_split() {
    let (_servers, ctx) = ctx_with_subscription_lifetime(Duration::from_millis(700)).await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 20, 0..5).await;
    let log: Log = Arc::default();
    let mut workers: Vec<_> = (0..3)
        .map(|i| {
            let name = format!("w{i}");
            worker_with(&store, &ctx.aws.kinesis, &name, log.clone(), efo("grp", 2))
        })
        .collect();
    let mut split = false;
    for round in 0..600 {
        tick_and_step(&rebalancer, &mut workers).await;
        ctx.clock.advance(Duration::from_millis(100));
        let seen = log.lock().unwrap().len();
        if !split && seen >= 50 {
            split_first(&ctx.aws, &stream).await;
            produce(&ctx.aws.kinesis, &stream, 20, 5..10).await;
            split = true;
        }
        if split && seen >= 200 && round % 20 == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(split, "the split happened during consumption");
    check(&log, 20, 10);

    let locked: Vec<_> = workers.iter().filter_map(|w| w.efo_lock()).collect();
    assert_eq!(locked.len(), 2, "two EFO consumers for three workers");
    let names: BTreeSet<_> = locked.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names.len(), 2, "never shared: {names:?}");
    let idle = workers.iter().find(|w| w.efo_lock().is_none()).unwrap();
    assert!(
        idle.shards().is_empty(),
        "the worker without EFO holds no lease"
    );
    assert_eq!(idle.report().shards.processed, 0, "{:?}", idle.report());
    let consumers = store.consumers().list().await.unwrap();
    let inactive: Vec<_> = consumers.iter().filter(|c| !c.active).collect();
    assert_eq!(inactive.len(), 1, "{consumers:?}");

    let total = |f: fn(&shardkeeper::consumer::WorkerReport) -> u64| -> u64 {
        workers.iter().map(|w| f(w.report())).sum()
    };
    assert_eq!(total(|r| r.shards.polls), 0, "read by subscription only");
    assert!(
        total(|r| r.shards.subscriptions) > 6,
        "subscriptions the server ended were renewed: {}",
        total(|r| r.shards.subscriptions)
    );
    assert_eq!(total(|r| r.shards_completed), 1, "the split parent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_efo_reader_carries_on_as_its_efo_consumer() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    produce(&ctx.aws.kinesis, &stream, 5, 0..4).await;
    let log: Log = Arc::default();
    let pool = || efo("solo", 1);
    let mut first = standalone_with(&store, &ctx.aws.kinesis, "s1", log.clone(), pool());
    let mut second = standalone_with(&store, &ctx.aws.kinesis, "s2", log.clone(), pool());
    for _ in 0..300 {
        first.step().await.unwrap();
        second.step().await.unwrap();
        if log.lock().unwrap().len() >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lock = first
        .efo_lock()
        .expect("the first locked the pool's one")
        .clone();
    assert!(second.efo_lock().is_none());
    assert!(
        second.shards().is_empty(),
        "without an EFO consumer it reads nothing"
    );
    let scope = ShardScope::Efo(lock.name.clone());
    let shards = store.shards().list(&scope).await.unwrap();
    assert_eq!(shards.len(), 2, "{shards:?}");
    assert!(shards.iter().all(|s| s.checkpoint.is_some()), "{shards:?}");

    // The first stops and frees its EFO consumer; the second takes it over
    // and carries on after the first's checkpoints.
    first.leave().await.unwrap();
    produce(&ctx.aws.kinesis, &stream, 5, 4..8).await;
    for _ in 0..300 {
        second.step().await.unwrap();
        if log.lock().unwrap().len() >= 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(second.efo_lock().map(|l| &l.name), Some(&lock.name));
    check(&log, 5, 8);
    let by_second = log
        .lock()
        .unwrap()
        .iter()
        .filter(|(c, _, _)| c == "s2")
        .count();
    assert_eq!(by_second, 20, "the second read only what came after");
    assert_eq!(second.report().shards.polls, 0, "{:?}", second.report());
}

/// An EFO consumer deregistered from Kinesis under the pool (by hand, or a
/// reaper racing a lock) is repaired: the worker holding it retires its pool
/// entry (nobody locks it again), locks another (growing the pool), and
/// carries on from its positions; the reaper then removes the entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_efo_consumer_gone_from_kinesis_is_retired_and_the_worker_carries_on_with_another() {
    let (_servers, ctx) = ctx_with_subscription_lifetime(Duration::from_millis(500)).await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 5, 0..2).await;
    let log: Log = Arc::default();
    let mut workers = vec![worker_with(
        &store,
        &ctx.aws.kinesis,
        "w0",
        log.clone(),
        efo("gone", 2),
    )];
    for _ in 0..200 {
        tick_and_step(&rebalancer, &mut workers).await;
        if log.lock().unwrap().len() >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = workers[0].efo_lock().expect("an EFO consumer").clone();
    // Deregistered under the pool.
    ctx.aws
        .kinesis
        .deregister_stream_consumer()
        .consumer_arn(&first.arn)
        .send()
        .await
        .unwrap();
    // Gone (AWS answers a consumer that is still DELETING as in use, then not found).
    for _ in 0..100 {
        let described = ctx
            .aws
            .kinesis
            .describe_stream_consumer()
            .consumer_arn(&first.arn)
            .send()
            .await;
        if described.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    produce(&ctx.aws.kinesis, &stream, 5, 2..4).await;
    for _ in 0..300 {
        tick_and_step(&rebalancer, &mut workers).await;
        if log.lock().unwrap().len() >= 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check(&log, 5, 4);
    let second = workers[0].efo_lock().expect("another EFO consumer").clone();
    assert_ne!(second.name, first.name);
    let pool = store.efo_consumers().list().await.unwrap();
    let old = pool.iter().find(|e| e.name == first.name).unwrap();
    assert!(old.retiring && old.used_by.is_none(), "{old:?}");

    // The reaper finishes the retirement.
    reap_once(&store, &ctx.aws.kinesis).await;
    let names = crate::support::common::pool_names(&store).await;
    assert_eq!(names, vec![second.name]);
}

/// A SubscribeToShard whose answer never comes (a connection that hangs)
/// gives up after a bound, as a transient failure the shard backs off from,
/// instead of holding the worker. The endpoint here accepts connections and
/// never answers, which no server shows on purpose.
#[tokio::test]
async fn a_subscription_that_is_never_answered_fails_transiently() {
    use shardkeeper::consumer::retrieval::{IteratorStart, KinesisReads, ReadError, SdkReads};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            open.push(conn); // read nothing, answer nothing
        }
    });
    let aws = AwsClients::connect(&Endpoints {
        dynamodb: Some(url.clone()),
        kinesis: Some(url),
        dummy_credentials: true,
    })
    .await;
    let reads = SdkReads::new(aws.kinesis.clone());
    let shard = shardkeeper::state::ShardId::new("shardId-000000000000").unwrap();
    let consumer = "arn:aws:kinesis:us-east-1:000000000000:stream/s/consumer/c:1";
    let err = match reads
        .subscribe(consumer, &shard, &IteratorStart::TrimHorizon)
        .await
    {
        Ok(_) => panic!("a subscription from an endpoint that never answers"),
        Err(e) => e,
    };
    assert!(
        matches!(&err, ReadError::Failed(e) if e.is_transient()),
        "{err}"
    );
    held.abort();
}

/// A subscription outlives the Kinesis client's attempt timeout (the
/// store's [`SdkTimeouts`](shardkeeper::state::SdkTimeouts), which the
/// worker's own client takes: `own_kinesis_client`): SubscribeToShard's
/// answer is a stream that stays open for minutes, so its call has none,
/// and records that arrive long after the timeout come on the same
/// subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_outlives_the_clients_attempt_timeout() {
    use shardkeeper::state::{SdkTimeouts, StateStore};
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let config = ctx
        .store(&stream)
        .config()
        .clone()
        .timeouts(SdkTimeouts::new(
            Duration::from_secs(2),
            Duration::from_millis(200),
        ));
    let store = StateStore::with_clock(
        ctx.aws.dynamodb.clone(),
        config,
        Arc::new(ctx.clock.clone()),
    );
    produce(&ctx.aws.kinesis, &stream, 1, 0..5).await;
    let log: Log = Arc::default();
    let mut worker = standalone_with(
        &store,
        &ctx.aws.kinesis,
        "s",
        log.clone(),
        efo("timeouts", 1),
    );
    for _ in 0..300 {
        worker.step().await.unwrap();
        if log.lock().unwrap().len() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(log.lock().unwrap().len(), 5);
    // Well past the attempt timeout on the open subscription, then more.
    for _ in 0..40 {
        worker.step().await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    produce(&ctx.aws.kinesis, &stream, 1, 5..10).await;
    for _ in 0..300 {
        worker.step().await.unwrap();
        if log.lock().unwrap().len() >= 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check(&log, 1, 10);
    let report = worker.report();
    assert_eq!(report.shards.subscriptions, 1, "{report:?}");
    assert_eq!(report.shards.transient_errors, 0, "{report:?}");
}
