//! The polling shard worker with the rebalancer, on the in-process servers.

use crate::support::common::{create_stream, ctx, rebalancer, split_first};
use crate::support::consume::{
    check, produce, standalone, tick_and_step, worker, worker_running, Log,
};
use shardkeeper::consumer::WorkerConfig;
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::ConsumerId;
use shardkeeper::state::ShardScope;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_on_eight_shards_lose_nothing_when_one_is_killed() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 8).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 40, 0..5).await;
    let log: Log = Arc::default();
    let mut workers: Vec<_> = (0..4)
        .map(|i| worker(&store, &ctx.aws.kinesis, &format!("w{i}"), log.clone()))
        .collect();
    for round in 0..60 {
        if round == 4 {
            // w3 dies: no release, no more heartbeats or renewals.
            let dead = workers.pop().unwrap();
            assert!(!dead.shards().is_empty(), "w3 held shards when it died");
            produce(&ctx.aws.kinesis, &stream, 40, 5..10).await;
        }
        tick_and_step(&rebalancer, &mut workers).await;
        ctx.clock.advance(Duration::from_secs(1));
        if log.lock().unwrap().len() >= 400 && round > 4 {
            break;
        }
    }
    check(&log, 40, 10);
    let owners: BTreeSet<usize> = workers.iter().map(|w| w.shards().len()).collect();
    assert!(
        owners.iter().all(|n| (2..=3).contains(n)),
        "8 shards over 3 live workers: {owners:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_during_consumption_reads_children_after_the_parent() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 10, 0..3).await;
    let log: Log = Arc::default();
    let mut workers: Vec<_> = (0..2)
        .map(|i| worker(&store, &ctx.aws.kinesis, &format!("w{i}"), log.clone()))
        .collect();
    for _ in 0..3 {
        tick_and_step(&rebalancer, &mut workers).await;
    }
    split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 10, 3..6).await;
    for _ in 0..20 {
        tick_and_step(&rebalancer, &mut workers).await;
        ctx.clock.advance(Duration::from_secs(1));
        if log.lock().unwrap().len() >= 60 {
            break;
        }
    }
    check(&log, 10, 6);
    let completed: u64 = workers.iter().map(|w| w.report().shards_completed).sum();
    assert_eq!(completed, 1, "the parent was read to its end and completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_is_taken_stops_at_its_next_checkpoint() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 2, 0..2).await;
    let log: Log = Arc::default();
    let mut w = worker(&store, &ctx.aws.kinesis, "w0", log.clone());
    w.step().await.unwrap(); // registers
    rebalancer.tick().await.unwrap();
    w.step().await.unwrap(); // gains the shard and reads it
    let shard = w.shards()[0].clone();
    assert_eq!(log.lock().unwrap().len(), 4);
    // Another consumer takes the lease (a forced take).
    let state = store
        .shards()
        .get(&shardkeeper::state::ShardScope::Group, &shard)
        .await
        .unwrap();
    let thief = ConsumerId::new("thief").unwrap();
    store
        .leases()
        .take(
            &shard,
            &thief,
            &seen_as_stale(&store, &state).await,
            None,
            Duration::from_secs(10),
        )
        .await
        .unwrap()
        .unwrap();
    produce(&ctx.aws.kinesis, &stream, 2, 2..3).await;
    w.step().await.unwrap();
    assert!(w.shards().is_empty(), "the worker let go of the shard");
    assert_eq!(w.report().leases_lost, 1);
    // Its checkpoint did not land: the thief's stored checkpoint is where w0 last wrote under its lease.
    let after = store
        .shards()
        .get(&shardkeeper::state::ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(after.owner, Some(thief));
    assert_eq!(after.checkpoint, state.checkpoint);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_iterator_is_refreshed_at_the_checkpoint_without_loss() {
    let servers = shardkeeper_local::LocalServers::start(shardkeeper_local::LocalOptions {
        iterator_ttl: Duration::from_secs(1),
        ..shardkeeper_local::LocalOptions::default()
    })
    .unwrap();
    let aws =
        shardkeeper_local::AwsClients::connect(&shardkeeper_local::Endpoints::local(&servers))
            .await;
    let mut ctx = ctx().await;
    ctx.aws = aws;
    let table = shardkeeper_local::unique_name("sk-iter");
    ctx.table = table.clone();
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    store
        .table()
        .ensure(&shardkeeper::state::TableOptions::default())
        .await
        .unwrap();
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 3, 0..2).await;
    let log: Log = Arc::default();
    let mut w = worker(&store, &ctx.aws.kinesis, "w0", log.clone());
    w.step().await.unwrap();
    rebalancer.tick().await.unwrap();
    w.step().await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 6);
    // The iterator the worker holds expires; records arrive meanwhile.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    produce(&ctx.aws.kinesis, &stream, 3, 2..4).await;
    for _ in 0..4 {
        w.step().await.unwrap();
    }
    assert!(
        w.report().shards.iterators_refreshed >= 1,
        "{:?}",
        w.report()
    );
    check(&log, 3, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_worker_function_consumes_until_its_deadline_and_releases() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    produce(&ctx.aws.kinesis, &stream, 4, 0..3).await;
    let log: Log = Arc::default();
    let sink = log.clone();
    // The invocation each handler call ran in, as the handler reads it.
    let contexts: Arc<std::sync::Mutex<Vec<Option<String>>>> = Arc::default();
    let seen_in = contexts.clone();
    let function = shardkeeper::functions::WorkerFunction::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        move || {
            let sink = sink.clone();
            let seen_in = seen_in.clone();
            move |record: StreamRecord| {
                let sink = sink.clone();
                let seen_in = seen_in.clone();
                async move {
                    let context = shardkeeper::processing::RecordContext::current();
                    seen_in
                        .lock()
                        .unwrap()
                        .push(context.map(|c| c.request_id.to_string()));
                    let n: u32 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
                    sink.lock().unwrap().push((
                        "fn".to_owned(),
                        record.partition_key.to_string(),
                        n,
                    ));
                    Ok::<(), std::io::Error>(())
                }
            }
        },
    )
    .lease_term(Duration::from_secs(10))
    .config(
        WorkerConfig::default()
            .renew_every(Duration::from_millis(50))
            .min_poll_interval(Duration::ZERO)
            .idle_poll_interval(Duration::from_millis(20)),
    )
    .margin(Duration::from_millis(300))
    .drain(Duration::ZERO)
    .emit_metrics(false)
    .observer(None);
    // The rebalancer ticks until every record was handled, then stops, so
    // the state seen at the end is the worker's own leave.
    let rebalancer = rebalancer(&ctx.aws, &store);
    let seen = log.clone();
    let ticking = tokio::spawn(async move {
        for _ in 0..200 {
            if seen.lock().unwrap().len() >= 12 {
                break;
            }
            rebalancer.tick().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let event: serde_json::Value =
        serde_json::from_str(include_str!("../../../events/scheduled.json")).unwrap();
    let mut context = crate::support::common::lambda_context(Duration::from_secs(4));
    context.request_id = "5f1c2e3a-8b9d-4e6f-a1b2-c3d4e5f6a7b8".to_owned();
    let report = function
        .handle(lambda_runtime::LambdaEvent::new(event, context))
        .await
        .unwrap();
    ticking.await.unwrap();
    assert_eq!(report.shards.processed, 12, "{report:?}");
    check(&log, 4, 3);
    // Every handler call ran in the invocation's context.
    let request = Some("5f1c2e3a-8b9d-4e6f-a1b2-c3d4e5f6a7b8".to_owned());
    assert_eq!(*contexts.lock().unwrap(), vec![request; 12]);
    // At the deadline the leases were released, checkpointed, and the
    // invocation's consumer deregistered.
    assert!(store.consumers().list().await.unwrap().is_empty());
    let shards = store
        .shards()
        .list(&shardkeeper::state::ShardScope::Group)
        .await
        .unwrap();
    assert!(
        shards
            .iter()
            .all(|s| s.owner.is_none() && s.checkpoint.is_some()),
        "{shards:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_worker_reads_every_shard_with_its_own_checkpoints_and_no_lease() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 6, 0..3).await;
    let (group_log, solo_log): (Log, Log) = (Arc::default(), Arc::default());
    let mut member = worker(&store, &ctx.aws.kinesis, "member", group_log.clone());
    let mut solo = standalone(&store, &ctx.aws.kinesis, "solo", solo_log.clone());
    for _ in 0..4 {
        tick_and_step(&rebalancer, std::slice::from_mut(&mut member)).await;
        solo.step().await.unwrap();
    }
    // A split mid-way: the standalone worker too reads the children only
    // after the parent, in its own scope.
    split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 6, 3..5).await;
    for _ in 0..8 {
        tick_and_step(&rebalancer, std::slice::from_mut(&mut member)).await;
        solo.step().await.unwrap();
    }
    check(&group_log, 6, 5);
    check(&solo_log, 6, 5);

    // The rebalancer gave it nothing: it is registered standalone.
    let tick = rebalancer.tick().await.unwrap();
    assert_eq!(tick.live_consumers, 1, "{tick:?}");
    let solo_id = ConsumerId::new("solo").unwrap();
    assert!(store
        .leases()
        .owned_shards(&solo_id)
        .await
        .unwrap()
        .is_empty());
    // Its checkpoints are its own: the parent depleted, the rest checkpointed.
    let own = store
        .shards()
        .list(&ShardScope::Consumer(solo_id))
        .await
        .unwrap();
    assert_eq!(own.len(), 4, "{own:?}");
    assert_eq!(own.iter().filter(|s| s.depleted).count(), 1, "{own:?}");
    assert!(own.iter().all(|s| s.checkpoint.is_some()), "{own:?}");
    assert_eq!(solo.report().shards_completed, 1);

    // Restarted under the same id, it resumes after its checkpoints.
    let mut again = standalone(&store, &ctx.aws.kinesis, "solo", solo_log.clone());
    for _ in 0..3 {
        again.step().await.unwrap();
    }
    assert_eq!(solo_log.lock().unwrap().len(), 30, "nothing read twice");
    // (It re-reads each open shard from its checkpointed record, which the
    // checkpoint covers, so that a KPL aggregate can resume inside itself.)
    assert_eq!(again.report().shards.processed, 0, "{:?}", again.report());
    assert_eq!(
        again.report().shards.duplicates_skipped,
        3,
        "{:?}",
        again.report()
    );
}

/// A handler that notes every lifecycle hook the worker calls.
struct Hooked(Arc<std::sync::Mutex<Vec<String>>>);

impl Hooked {
    fn note(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
}

impl shardkeeper::processing::RecordHandler for Hooked {
    async fn handle(&self, _: StreamRecord) -> Result<(), shardkeeper::processing::HandlerError> {
        Ok(())
    }

    async fn shard_gained(
        &self,
        shard: &shardkeeper::state::ShardId,
        position: Option<&shardkeeper::state::Checkpoint>,
    ) {
        self.note(format!("gained {shard} at {}", position.is_some()));
    }

    async fn lease_lost(&self, shard: &shardkeeper::state::ShardId) {
        self.note(format!("lost {shard}"));
    }

    async fn shard_ended(&self, shard: &shardkeeper::state::ShardId) {
        self.note(format!("ended {shard}"));
    }

    async fn shutdown_requested(&self) {
        self.note("shutdown".to_owned());
    }
}

/// The lifecycle hooks (KCL's `initialize`, `shardEnded`, `leaseLost`,
/// `shutdownRequested`) are called as the worker gains a shard, reads it to
/// its end, has a lease taken, and stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lifecycle_hooks_follow_gains_ends_losses_and_the_stop() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&ctx.aws.kinesis, &stream, 2, 0..2).await;
    let notes = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut workers = vec![worker_running(
        &store,
        &ctx.aws.kinesis,
        "w0",
        Hooked(notes.clone()),
        Duration::from_secs(10),
        crate::support::consume::eager(),
    )];
    for _ in 0..2 {
        tick_and_step(&rebalancer, &mut workers).await;
    }
    let parent = workers[0].shards()[0].clone();
    split_first(&ctx.aws, &stream).await;
    for _ in 0..20 {
        tick_and_step(&rebalancer, &mut workers).await;
        ctx.clock.advance(Duration::from_secs(1));
        if workers[0].shards().len() == 2 {
            break;
        }
    }
    let child = workers[0].shards()[0].clone();
    let state = store
        .shards()
        .get(&ShardScope::Group, &child)
        .await
        .unwrap();
    let thief = ConsumerId::new("thief").unwrap();
    store
        .leases()
        .take(
            &child,
            &thief,
            &seen_as_stale(&store, &state).await,
            None,
            Duration::from_secs(10),
        )
        .await
        .unwrap()
        .unwrap();
    workers[0].step().await.unwrap();
    workers[0].run_until(None, || true).await.unwrap();

    let notes = notes.lock().unwrap().clone();
    let at = |what: &str| {
        notes
            .iter()
            .position(|n| n == what)
            .unwrap_or_else(|| panic!("no {what:?} in {notes:?}"))
    };
    assert_eq!(at(&format!("gained {parent} at false")), 0, "{notes:?}");
    let ended = at(&format!("ended {parent}"));
    let gained_child = at(&format!("gained {child} at true"));
    let lost = at(&format!("lost {child}"));
    assert!(ended < gained_child && gained_child < lost, "{notes:?}");
    assert_eq!(notes.last().unwrap(), "shutdown", "{notes:?}");
}

/// A handler slower than the lease term never outlives the lease: the batch
/// is cut before the lease's local expiry (its session's last heartbeat's
/// send time plus the term, on this process's clock), checkpointed, and
/// carried on after the next heartbeat, so a rebalancer waiting for the
/// session to go stale (real time, real clock) never moves the lease, and
/// every record runs once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_handler_never_outlives_the_lease() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let config =
        shardkeeper::state::StoreConfig::new(&shardkeeper_local::unique_name("g"), &stream)
            .unwrap()
            .table(&ctx.table)
            .unwrap()
            .buckets(crate::support::common::test_buckets());
    // The wall clock, as in production: leases expire in real time.
    let store = shardkeeper::StateStore::new(ctx.aws.dynamodb.clone(), config);
    let term = Duration::from_secs(1);
    let mut rebalancer = rebalancer(&ctx.aws, &store);
    rebalancer.config.lease_term = term;
    produce(&ctx.aws.kinesis, &stream, 1, 0..40).await;
    let log: Log = Arc::default();
    let slow = {
        let log = log.clone();
        move |record: StreamRecord| {
            let log = log.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let n: u32 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
                log.lock()
                    .unwrap()
                    .push(("w0".to_owned(), record.partition_key.to_string(), n));
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let mut w = worker_running(
        &store,
        &ctx.aws.kinesis,
        "w0",
        slow,
        term,
        crate::support::consume::eager()
            .renew_every(Duration::from_millis(300))
            .expiry_margin(Duration::from_millis(300)),
    );
    w.step().await.unwrap(); // registers
    rebalancer.tick().await.unwrap();
    while w.shards().is_empty() {
        w.step().await.unwrap(); // gains the shard at its next renewal
    }
    let shard = w.shards()[0].clone();

    // A rebalancer ticking every 20 ms beside a live thief consumer takes
    // the lease the moment it sees the holder's session a term old.
    let stolen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let thief = {
        let (store, shard, stolen, done) =
            (store.clone(), shard.clone(), stolen.clone(), done.clone());
        let mut rebalancer = crate::support::common::rebalancer(&ctx.aws, &store);
        rebalancer.config.lease_term = term;
        tokio::spawn(async move {
            let me = ConsumerId::new("thief").unwrap();
            let info = shardkeeper::state::ConsumerInfo::for_this_process(me.clone(), store.now());
            let mut session =
                shardkeeper::consumer::ConsumerSession::new(store.clone(), info, term);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                session.tick(|_| None).await.unwrap();
                rebalancer.tick().await.unwrap();
                if store.leases().get_owner(&shard).await.unwrap().as_ref()
                    != Some(&ConsumerId::new("w0").unwrap())
                {
                    stolen.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let started = std::time::Instant::now();
    while log.lock().unwrap().len() < 40 && started.elapsed() < Duration::from_secs(20) {
        w.step().await.unwrap();
        if stolen.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    thief.await.unwrap();
    assert!(
        !stolen.load(std::sync::atomic::Ordering::SeqCst),
        "the lease expired while the slow handler ran"
    );
    assert_eq!(w.report().leases_lost, 0);
    check(&log, 1, 40);
    assert!(
        w.report().shards.checkpoints > 1,
        "the batch was cut and checkpointed in slices: {:?}",
        w.report()
    );
}

/// With the LATEST initial position, a parent read to its end with no
/// progress leaves its children no checkpoint: they start at their first
/// record (KCL starts child leases at TRIM_HORIZON), so the records written
/// to them before their iterators open are read, not skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_of_a_parent_without_progress_start_at_their_first_record() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let config = crate::support::consume::eager()
        .initial_position(shardkeeper::pipeline::InitialPosition::Latest);
    let mut workers = vec![crate::support::consume::worker_with(
        &store,
        &ctx.aws.kinesis,
        "w0",
        log.clone(),
        config,
    )];
    for _ in 0..3 {
        tick_and_step(&rebalancer, &mut workers).await;
    }
    split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 10, 0..3).await;
    for _ in 0..30 {
        tick_and_step(&rebalancer, &mut workers).await;
        ctx.clock.advance(Duration::from_secs(1));
        if log.lock().unwrap().len() >= 30 {
            break;
        }
    }
    check(&log, 10, 3);
}

/// A shard started at LATEST is pinned to the first record it reads: a
/// batch that fails before any progress is read again from that record, not
/// from LATEST again (which would skip it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_first_batch_after_latest_is_read_again_not_skipped() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let handler = {
        let (log, failed_once) = (log.clone(), failed_once.clone());
        move |record: StreamRecord| {
            let (log, failed_once) = (log.clone(), failed_once.clone());
            async move {
                if !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return Err(std::io::Error::other("not yet"));
                }
                let n: u32 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
                log.lock()
                    .unwrap()
                    .push(("w0".to_owned(), record.partition_key.to_string(), n));
                Ok(())
            }
        }
    };
    let mut workers = vec![worker_running(
        &store,
        &ctx.aws.kinesis,
        "w0",
        handler,
        Duration::from_secs(10),
        crate::support::consume::eager()
            .initial_position(shardkeeper::pipeline::InitialPosition::Latest),
    )];
    for _ in 0..3 {
        tick_and_step(&rebalancer, &mut workers).await; // holds the shard, reads LATEST: nothing
    }
    produce(&ctx.aws.kinesis, &stream, 2, 0..3).await;
    for _ in 0..10 {
        tick_and_step(&rebalancer, &mut workers).await;
        if log.lock().unwrap().len() >= 6 {
            break;
        }
    }
    assert!(failed_once.load(std::sync::atomic::Ordering::SeqCst));
    check(&log, 2, 3);
}

/// A take of the lease exactly as `state` shows it, on its owner's session
/// as it is now (a thief that judged the session stale).
async fn seen_as_stale(
    store: &shardkeeper::StateStore,
    state: &shardkeeper::state::ShardState,
) -> shardkeeper::state::TakeFrom {
    let owner = state.owner.as_ref().expect("an owned lease");
    let session = match store.consumers().get(owner).await.unwrap() {
        Some(consumer) => consumer.session(),
        None => shardkeeper::state::SessionSeen::Unregistered {
            consumer: owner.clone(),
        },
    };
    shardkeeper::state::TakeFrom::Stale {
        counter: state.counter,
        expires: state.expires,
        session: Some(session),
    }
}

/// A batch broken off by a failed state call (the table failing while a
/// record's failed attempt is counted) keeps what it processed: the next
/// read carries on after the last record done, not from the batch's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_broken_off_by_a_failed_state_call_is_not_read_again_from_its_start() {
    let faulty = crate::support::faulty::Faulty::start(5).await;
    let ctx = &faulty.ctx;
    let stream = create_stream(&faulty.direct, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    produce(&faulty.direct.kinesis, &stream, 1, 0..10).await;
    let log: Log = Arc::default();
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let failing = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (log, failed_once, failing) = (log.clone(), failed_once.clone(), failing.clone());
        move |record: StreamRecord| {
            let (log, failed_once, failing) = (log.clone(), failed_once.clone(), failing.clone());
            async move {
                let n: u32 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
                if n == 5 && !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    // Meanwhile the table starts failing every request.
                    failing.notify_one();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return Err(std::io::Error::other("not yet"));
                }
                log.lock()
                    .unwrap()
                    .push(("w0".to_owned(), record.partition_key.to_string(), n));
                Ok(())
            }
        }
    };
    let mut w = worker_running(
        &store,
        &ctx.aws.kinesis,
        "w0",
        handler,
        Duration::from_secs(30),
        crate::support::consume::eager(),
    );
    w.step().await.unwrap(); // registers
    rebalancer.tick().await.unwrap();
    // Gains the shard and reads it; record 5 fails while the table fails.
    let broken = tokio::join!(w.step(), async {
        failing.notified().await;
        faulty
            .dynamodb
            .set_faults(crate::support::faulty::every_request_fails())
            .unwrap();
    })
    .0;
    assert!(broken.is_err(), "the batch broke off: {broken:?}");
    assert_eq!(log.lock().unwrap().len(), 5, "0 to 4 were processed");
    faulty
        .dynamodb
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    for _ in 0..5 {
        w.step().await.unwrap();
    }
    check(&log, 1, 10);
}

/// A shard started at LATEST whose first iterator is lost before anything
/// came (here a failed read drops it) opens its next iterator at a time
/// before the first one, not at a new LATEST: the records written in
/// between are read, none skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latest_start_whose_first_iterator_is_lost_skips_nothing_written_since() {
    let faulty = crate::support::faulty::Faulty::start(9).await;
    let ctx = &faulty.ctx;
    let stream = create_stream(&faulty.direct, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let mut workers = vec![crate::support::consume::worker_with(
        &store,
        &ctx.aws.kinesis,
        "w0",
        log.clone(),
        crate::support::consume::eager()
            .initial_position(shardkeeper::pipeline::InitialPosition::Latest),
    )];
    lose_the_first_iterator_then_read(&faulty, &rebalancer, &mut workers, &stream, &log).await;
}

/// A shard reset to LATEST by an operator (a stored `LATEST`) is pinned as
/// an initial LATEST start is: when its first iterator is lost before
/// anything came, the next one opens at a time before the first, not at a
/// new LATEST, and the records written in between are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_latest_whose_first_iterator_is_lost_skips_nothing_written_since() {
    let faulty = crate::support::faulty::Faulty::start(9).await;
    let ctx = &faulty.ctx;
    let stream = create_stream(&faulty.direct, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    rebalancer.tick().await.unwrap();
    let shard = store
        .shards()
        .list(&shardkeeper::state::ShardScope::Group)
        .await
        .unwrap()
        .remove(0);
    assert!(store
        .checkpoints()
        .reset(
            &shardkeeper::state::ShardScope::Group,
            &shard,
            &shardkeeper::state::Checkpoint::Latest,
            false
        )
        .await
        .unwrap());
    let log: Log = Arc::default();
    let mut workers = vec![crate::support::consume::worker_with(
        &store,
        &ctx.aws.kinesis,
        "w0",
        log.clone(),
        crate::support::consume::eager(),
    )];
    lose_the_first_iterator_then_read(&faulty, &rebalancer, &mut workers, &stream, &log).await;
}

/// A LATEST start's holder crashes before any record came: its successor
/// starts where the first one's iterator opened (the pin is stored as soon
/// as it is made), not at a new LATEST that would skip the records written
/// in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latest_start_whose_holder_crashes_before_any_record_skips_nothing() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let latest = || {
        crate::support::consume::eager()
            .initial_position(shardkeeper::pipeline::InitialPosition::Latest)
    };
    let mut first = vec![crate::support::consume::worker_with(
        &store,
        &ctx.aws.kinesis,
        "w0",
        log.clone(),
        latest(),
    )];
    for _ in 0..3 {
        tick_and_step(&rebalancer, &mut first).await; // holds the shard, reads LATEST: nothing
    }
    assert_eq!(first[0].shards().len(), 1);
    // The pin is a time on the store's clock (here the test's, standing
    // still), the margin before the first iterator opened.
    let pinned = store
        .shards()
        .list(&shardkeeper::state::ShardScope::Group)
        .await
        .unwrap()
        .remove(0)
        .checkpoint;
    assert_eq!(
        pinned,
        Some(shardkeeper::state::Checkpoint::AtTimestamp(
            ctx.clock_now() - 30_000
        ))
    );
    drop(first); // crashed: no release, no checkpoint of its own
    produce(&ctx.aws.kinesis, &stream, 2, 0..3).await;
    let mut second = vec![crate::support::consume::worker_with(
        &store,
        &ctx.aws.kinesis,
        "w1",
        log.clone(),
        latest(),
    )];
    for _ in 0..20 {
        // The rebalancer sees w0's lease and heartbeat go unrenewed.
        ctx.clock.advance(Duration::from_secs(3));
        tick_and_step(&rebalancer, &mut second).await;
        if log.lock().unwrap().len() >= 6 {
            break;
        }
    }
    check(&log, 2, 3);
}

/// Records `0..n` of one key, stepping `w` until it has processed them all.
async fn process_all<H: shardkeeper::processing::RecordHandler>(
    w: &mut shardkeeper::consumer::ShardWorker<H>,
    log: &Log,
    n: usize,
) {
    while log.lock().unwrap().len() < n {
        w.step().await.unwrap();
    }
}

/// A shard's checkpoint is written at most once every `checkpoint_every`
/// while records come (one that comes sooner waits), the one that waited
/// once that time has passed, and where the shard stands at a stop. So a
/// successor after a crash past that time, or after a stop, runs nothing
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_paced_and_the_deferred_one_is_written_when_due_and_at_a_stop() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let every = Duration::from_secs(1);
    let config = crate::support::consume::eager().checkpoint_every(every);
    let worker = |name: &str| {
        crate::support::consume::worker_with(
            &store,
            &ctx.aws.kinesis,
            name,
            log.clone(),
            config.clone(),
        )
    };
    let mut w0 = vec![worker("w0")];
    while w0[0].shards().is_empty() {
        tick_and_step(&rebalancer, &mut w0).await;
    }
    // Records keep coming for two `every`s, two at a time.
    let started = std::time::Instant::now();
    let mut n = 0;
    while started.elapsed() < 2 * every {
        produce(&ctx.aws.kinesis, &stream, 1, n..n + 2).await;
        n += 2;
        process_all(&mut w0[0], &log, n as usize).await;
    }
    let elapsed = started.elapsed();
    let written = w0[0].report().shards.checkpoints;
    let batches = n / 2;
    assert!(
        written as f64 <= elapsed.as_secs_f64() / every.as_secs_f64() + 2.0
            && written < batches as u64,
        "{written} checkpoints in {elapsed:?} for {batches} batches"
    );
    // The last one waited; it is written once `every` has passed. Then the
    // worker crashes: its successor runs nothing again.
    tokio::time::sleep(every).await;
    w0[0].step().await.unwrap();
    drop(w0);
    let mut w1 = vec![worker("w1")];
    while w1[0].shards().is_empty() {
        ctx.clock.advance(Duration::from_secs(3));
        tick_and_step(&rebalancer, &mut w1).await;
    }
    for _ in 0..3 {
        w1[0].step().await.unwrap();
    }
    assert_eq!(log.lock().unwrap().len(), n as usize, "nothing ran twice");
    // Two batches within `every`: the second waits; the stop writes it.
    produce(&ctx.aws.kinesis, &stream, 1, n..n + 2).await;
    process_all(&mut w1[0], &log, n as usize + 2).await;
    produce(&ctx.aws.kinesis, &stream, 1, n + 2..n + 4).await;
    process_all(&mut w1[0], &log, n as usize + 4).await;
    w1[0].leave().await.unwrap();
    let mut w2 = vec![worker("w2")];
    while w2[0].shards().is_empty() {
        tick_and_step(&rebalancer, &mut w2).await;
    }
    for _ in 0..3 {
        w2[0].step().await.unwrap();
    }
    check(&log, 1, n + 4);
}

/// The worker takes the shard and reads it at LATEST (nothing); then 3
/// records of 2 keys are written and its next read fails (the iterator is
/// lost); then it reads again: every record written since must come.
async fn lose_the_first_iterator_then_read<H: shardkeeper::processing::RecordHandler>(
    faulty: &crate::support::faulty::Faulty,
    rebalancer: &shardkeeper::functions::Rebalancer,
    workers: &mut [shardkeeper::consumer::ShardWorker<H>],
    stream: &str,
    log: &Log,
) {
    for _ in 0..3 {
        tick_and_step(rebalancer, workers).await; // holds the shard, reads LATEST: nothing
    }
    assert_eq!(workers[0].shards().len(), 1);
    produce(&faulty.direct.kinesis, stream, 2, 0..3).await;
    faulty
        .kinesis
        .set_faults(crate::support::faulty::every_request_fails())
        .unwrap();
    workers[0].step().await.unwrap();
    faulty
        .kinesis
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    assert!(faulty.kinesis.counts().errors_500 > 0);
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(100)).await; // the shard's back-off
        workers[0].step().await.unwrap();
        if log.lock().unwrap().len() >= 6 {
            break;
        }
    }
    check(log, 2, 3);
}

/// A shard gained when the read of the group's end (a bounded group's, on
/// the stream item) fails is opened at the next step: the worker holds no
/// lease it does not read. The stream item is made unreadable for one step
/// (before, the shard left the gained set before that read, and the worker
/// held its lease, heartbeat after heartbeat, without ever reading it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_gained_when_the_groups_end_cannot_be_read_is_opened_at_the_next_step() {
    use aws_sdk_dynamodb::types::AttributeValue;
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    crate::support::common::start_group(&ctx, &store).await;
    let rebalancer = rebalancer(&ctx.aws, &store);
    let log: Log = Arc::default();
    let mut w = worker(&store, &ctx.aws.kinesis, "w", log.clone());
    rebalancer.tick().await.unwrap();
    w.step().await.unwrap();
    rebalancer.tick().await.unwrap();
    assert!(w.shards().is_empty());

    // The stream item's end cannot be read for one step.
    let set_end = |value: Option<&str>| {
        let mut req = ctx
            .aws
            .dynamodb
            .update_item()
            .table_name(&ctx.table)
            .key(
                "pk",
                AttributeValue::S(store.layout().partition_key().to_owned()),
            )
            .key("sk", AttributeValue::S("STREAM".into()))
            .expression_attribute_names("#end", "group_end");
        req = match value {
            Some(v) => req
                .update_expression("SET #end = :end")
                .expression_attribute_values(":end", AttributeValue::S(v.into())),
            None => req.update_expression("REMOVE #end"),
        };
        req.send()
    };
    set_end(Some("not a checkpoint")).await.unwrap();
    assert!(w.step().await.is_err(), "the group's end could not be read");
    set_end(None).await.unwrap();
    w.step().await.unwrap();
    assert_eq!(w.shards().len(), 1, "the shard gained is read");
}
