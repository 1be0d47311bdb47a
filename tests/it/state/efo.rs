//! The enhanced fan-out pool: locking races, release, idle deregistration on the Kinesis server.

use crate::support::common::{
    create_stream, ctx, pool_names, reap_once, register_pool, stream_arn,
};
use shardkeeper::state::{
    Checkpoint, CheckpointOutcome, ConsumerId, ConsumerInfo, EfoName, ShardId, ShardScope,
};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_racing_for_enhanced_consumers_never_share_one() {
    let ctx = ctx().await;
    let store = ctx.store("efo-race");
    let pool = 5;
    for i in 0..pool {
        let name = EfoName::new(format!("efo-{i}")).unwrap();
        assert!(store
            .efo_consumers()
            .register(&name, &format!("arn:efo:{i}"))
            .await
            .unwrap());
        assert!(
            !store
                .efo_consumers()
                .register(&name, "arn:other")
                .await
                .unwrap(),
            "registered once"
        );
    }
    let consumers = 12;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..consumers {
        let store = store.clone();
        let now = ctx.clock_now();
        tasks.spawn(async move {
            let id = ConsumerId::new(format!("c{i}")).unwrap();
            store
                .consumers()
                .heartbeat(&ConsumerInfo::for_this_process(id.clone(), now))
                .await
                .unwrap();
            (
                id.clone(),
                store.efo_consumers().get_or_lock(&id).await.unwrap(),
            )
        });
    }
    let results = tasks.join_all().await;
    let locks: Vec<_> = results.iter().filter_map(|(_, l)| l.clone()).collect();
    assert_eq!(locks.len(), pool, "every free consumer gets taken, no more");
    let names: BTreeSet<_> = locks.iter().map(|l| l.name.clone()).collect();
    assert_eq!(
        names.len(),
        pool,
        "no enhanced consumer is shared: {locks:?}"
    );
    for (id, lock) in &results {
        let state = store.consumers().get(id).await.unwrap().unwrap();
        assert_eq!(
            state.active,
            lock.is_some(),
            "{id}: inactive iff it has no EFO consumer"
        );
    }
    // Asking again returns the same lock; releasing frees it for a waiting consumer.
    let (holder, lock) = results.iter().find(|(_, l)| l.is_some()).unwrap();
    assert_eq!(
        store
            .efo_consumers()
            .get_or_lock(holder)
            .await
            .unwrap()
            .as_ref(),
        lock.as_ref()
    );
    let lock = lock.clone().unwrap();
    assert!(store.efo_consumers().release(&lock).await.unwrap());
    assert!(
        store.efo_consumers().release(&lock).await.unwrap(),
        "a release applied again (a retry) reports the release"
    );
    let (waiter, _) = results.iter().find(|(_, l)| l.is_none()).unwrap();
    let got = store
        .efo_consumers()
        .get_or_lock(waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.name, lock.name);
    assert!(
        !store.efo_consumers().release(&lock).await.unwrap(),
        "a stale lock can't release another consumer's"
    );
    assert!(store.consumers().get(waiter).await.unwrap().unwrap().active);
}

#[tokio::test]
async fn standalone_efo_checkpoints_are_fenced_by_the_lock() {
    let ctx = ctx().await;
    let store = ctx.store("efo-fence");
    let name = EfoName::new("efo-x").unwrap();
    store
        .efo_consumers()
        .register(&name, "arn:efo:x")
        .await
        .unwrap();
    let a = ConsumerId::new("a").unwrap();
    let lock = store
        .efo_consumers()
        .get_or_lock(&a)
        .await
        .unwrap()
        .unwrap();
    let shard = ShardId::new("shardId-000000000001").unwrap();
    let cp = Checkpoint::after("12").unwrap();
    assert_eq!(
        store
            .checkpoints()
            .save_efo(&lock, &shard, &cp, None)
            .await
            .unwrap(),
        CheckpointOutcome::Stored
    );
    assert!(matches!(
        store
            .checkpoints()
            .save_efo(&lock, &shard, &Checkpoint::after("11").unwrap(), None)
            .await
            .unwrap(),
        CheckpointOutcome::Stale { .. }
    ));
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Efo(name.clone()), &shard)
            .await
            .unwrap(),
        cp
    );
    store.efo_consumers().release(&lock).await.unwrap();
    let b = ConsumerId::new("b").unwrap();
    store
        .efo_consumers()
        .get_or_lock(&b)
        .await
        .unwrap()
        .unwrap();
    let err = store
        .checkpoints()
        .save_efo(&lock, &shard, &Checkpoint::after("13").unwrap(), None)
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Efo(name), &shard)
            .await
            .unwrap(),
        cp
    );
}

#[tokio::test]
async fn idle_enhanced_consumers_are_deregistered_keeping_one() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let stream_arn = stream_arn(&ctx.aws, &stream).await;
    let store = ctx.store(&stream);
    register_pool(
        &ctx.aws,
        &store,
        &stream_arn,
        (0..4).map(|i| format!("pool-{i}")),
    )
    .await;
    let busy = ConsumerId::new("busy").unwrap();
    let held = store
        .efo_consumers()
        .get_or_lock(&busy)
        .await
        .unwrap()
        .unwrap();

    // Not idle long enough yet: nothing goes.
    ctx.clock.advance(Duration::from_secs(60));
    let none = store
        .efo_consumers()
        .deregister_idle(&ctx.aws.kinesis, Duration::from_secs(600))
        .await
        .unwrap();
    assert!(none.is_empty());
    ctx.clock.advance(Duration::from_secs(600));
    let gone = store
        .efo_consumers()
        .deregister_idle(&ctx.aws.kinesis, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(
        gone.len(),
        3,
        "every idle one goes while one is in use: {gone:?}"
    );
    let remaining = store.efo_consumers().list().await.unwrap();
    assert_eq!(remaining.len(), 1);
    assert_eq!(remaining[0].name, held.name);
    let on_kinesis = kinesis_consumers(&ctx.aws, &stream_arn).await;
    assert_eq!(on_kinesis, BTreeSet::from([held.name.to_string()]));

    // With none in use, the last idle one is kept.
    store.efo_consumers().release(&held).await.unwrap();
    ctx.clock.advance(Duration::from_secs(3600));
    let last = store
        .efo_consumers()
        .deregister_idle(&ctx.aws.kinesis, Duration::from_secs(600))
        .await
        .unwrap();
    assert!(last.is_empty(), "the pool keeps at least one: {last:?}");
    assert_eq!(store.efo_consumers().list().await.unwrap().len(), 1);
}

#[tokio::test]
async fn deregistering_an_enhanced_consumer_removes_it_from_the_pool() {
    let ctx = ctx().await;
    let store = ctx.store("efo-deregister");
    let name = EfoName::new("gone").unwrap();
    store
        .efo_consumers()
        .register(&name, "arn:efo:gone")
        .await
        .unwrap();
    assert_eq!(store.efo_consumers().list().await.unwrap().len(), 1);
    assert!(store.efo_consumers().deregister(&name).await.unwrap());
    assert!(!store.efo_consumers().deregister(&name).await.unwrap());
    assert!(store.efo_consumers().list().await.unwrap().is_empty());
    let err = store.efo_consumers().register(&name, "").await.unwrap_err();
    assert!(
        matches!(err, shardkeeper::state::StateError::Validation { .. }),
        "{err}"
    );
}

fn test_pool(prefix: &str, size: usize) -> shardkeeper::consumer::EfoPool {
    shardkeeper::consumer::EfoPool::new(prefix, size).poll_interval(Duration::from_millis(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_grows_on_demand_to_its_size_and_never_past_it_when_racing() {
    use shardkeeper::consumer::lock_or_grow;
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let store = ctx.store(&stream);
    let pool = test_pool("grp", 3);
    let ids: Vec<ConsumerId> = (0..6)
        .map(|i| ConsumerId::new(format!("c{i}")).unwrap())
        .collect();
    for id in &ids {
        store
            .consumers()
            .heartbeat(&ConsumerInfo::for_this_process(id.clone(), store.now()))
            .await
            .unwrap();
    }
    let racers: Vec<_> = ids
        .iter()
        .map(|id| {
            let (store, kinesis, pool, id) = (
                store.clone(),
                ctx.aws.kinesis.clone(),
                pool.clone(),
                id.clone(),
            );
            tokio::spawn(async move {
                let lock = lock_or_grow(&store, &kinesis, &id, &pool).await.unwrap();
                (id, lock)
            })
        })
        .collect();
    let mut locked = BTreeSet::new();
    let mut waiting = Vec::new();
    for r in racers {
        let (id, lock) = r.await.unwrap();
        match lock {
            Some(lock) => assert!(locked.insert(lock.name.to_string()), "shared: {lock:?}"),
            None => waiting.push(id),
        }
    }
    assert_eq!(
        locked,
        BTreeSet::from([
            "grp-00".to_owned(),
            "grp-01".to_owned(),
            "grp-02".to_owned()
        ])
    );
    let on_kinesis = ctx
        .aws
        .kinesis
        .list_stream_consumers()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(on_kinesis.consumers().len(), 3, "registered once each");
    assert_eq!(waiting.len(), 3);
    for id in &waiting {
        let state = store.consumers().get(id).await.unwrap().unwrap();
        assert!(!state.active, "{id} waits inactive, so it gets no leases");
    }

    // A released lock goes to a waiting consumer; nothing new is registered.
    let holder = ids.iter().find(|id| !waiting.contains(id)).unwrap();
    let held = store
        .efo_consumers()
        .get_or_lock(holder)
        .await
        .unwrap()
        .unwrap();
    assert!(store.efo_consumers().release(&held).await.unwrap());
    let next = lock_or_grow(&store, &ctx.aws.kinesis, &waiting[0], &pool)
        .await
        .unwrap()
        .expect("the freed consumer");
    assert_eq!(next.name, held.name);
    assert!(
        store
            .consumers()
            .get(&waiting[0])
            .await
            .unwrap()
            .unwrap()
            .active
    );
    let on_kinesis = ctx
        .aws
        .kinesis
        .list_stream_consumers()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    assert_eq!(on_kinesis.consumers().len(), 3);
}

#[tokio::test]
async fn a_pool_outside_the_kinesis_limits_is_a_validation_error() {
    use shardkeeper::consumer::lock_or_grow;
    let ctx = ctx().await;
    let store = ctx.store("efo-limits");
    let me = ConsumerId::new("c0").unwrap();
    for pool in [
        test_pool("grp", 0),
        test_pool("grp", 21),
        test_pool("a:b", 2),
    ] {
        let err = lock_or_grow(&store, &ctx.aws.kinesis, &me, &pool)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                shardkeeper::Error::State(shardkeeper::state::StateError::Validation { .. })
            ),
            "{pool:?}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_cut_short_after_the_mark_is_finished_and_the_consumer_never_lent_again() {
    let faulty = crate::support::faulty::Faulty::start(11).await;
    let ctx = &faulty.ctx;
    let stream = create_stream(&faulty.direct, 1).await;
    let stream_arn = stream_arn(&faulty.direct, &stream).await;
    let store = ctx.store(&stream);
    let pool = register_pool(
        &faulty.direct,
        &store,
        &stream_arn,
        (0..2).map(|i| format!("pool-{i}")),
    )
    .await;
    let (name, arn) = &pool[0];
    // Kinesis fails every request: the retirement is marked, then cut short.
    faulty
        .kinesis
        .set_faults(crate::support::faulty::every_request_fails())
        .unwrap();
    let cut = store
        .efo_consumers()
        .remove_idle(&ctx.aws.kinesis, name, arn, 0)
        .await;
    assert!(cut.is_err(), "{cut:?}");
    let seen = store.efo_consumers().list().await.unwrap();
    assert!(seen[0].retiring && !seen[1].retiring, "{seen:?}");
    // A retiring consumer is lent to nobody: the other one is locked.
    let lock = store
        .efo_consumers()
        .get_or_lock(&ConsumerId::new("c").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.name, pool[1].0);
    assert!(store
        .efo_consumers()
        .lock(&seen[0], &ConsumerId::new("d").unwrap())
        .await
        .unwrap()
        .is_none());

    // The reaper plans the rest of the retirement and finishes it.
    faulty
        .kinesis
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    let report = reap_once(&store, &ctx.aws.kinesis).await;
    assert_eq!(report.efo_deregistered, vec![name.clone()]);
    let left = pool_names(&store).await;
    assert_eq!(left, vec![pool[1].0.clone()]);
    let on_kinesis = kinesis_consumers(&faulty.direct, &stream_arn).await;
    assert_eq!(on_kinesis, BTreeSet::from([pool[1].0.to_string()]));
}

#[tokio::test]
async fn a_standalone_efo_reader_that_lost_its_lock_never_marks_a_shard_done() {
    let ctx = ctx().await;
    let store = ctx.store("efo-deplete-fence");
    let name = EfoName::new("efo-d").unwrap();
    store
        .efo_consumers()
        .register(&name, "arn:efo:d")
        .await
        .unwrap();
    let a = ConsumerId::new("a").unwrap();
    let lock = store
        .efo_consumers()
        .get_or_lock(&a)
        .await
        .unwrap()
        .unwrap();
    let info = ConsumerInfo::for_this_process(a.clone(), store.now());
    let mut reader =
        shardkeeper::consumer::StandaloneSession::new(store.clone(), ctx.aws.kinesis.clone(), info);
    reader.set_efo_lock(Some(lock.clone()));
    let shard = ShardId::new("shardId-000000000001").unwrap();
    let cp = Checkpoint::after("12").unwrap();
    store
        .checkpoints()
        .save_efo(&lock, &shard, &cp, None)
        .await
        .unwrap();
    // The lock goes to another reader.
    store.efo_consumers().release(&lock).await.unwrap();
    store
        .efo_consumers()
        .get_or_lock(&ConsumerId::new("b").unwrap())
        .await
        .unwrap()
        .unwrap();
    let err = reader.complete_shard(&shard, &[]).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let state = store
        .shards()
        .get(&ShardScope::Efo(name), &shard)
        .await
        .unwrap();
    assert!(!state.depleted);
    assert_eq!(state.checkpoint, Some(cp));
}

/// The stream's enhanced fan-out consumers on Kinesis (not being deleted).
async fn kinesis_consumers(
    aws: &shardkeeper_local::AwsClients,
    stream_arn: &str,
) -> BTreeSet<String> {
    let listed = aws
        .kinesis
        .list_stream_consumers()
        .stream_arn(stream_arn)
        .send()
        .await
        .unwrap();
    listed
        .consumers()
        .iter()
        .filter(|c| c.consumer_status().as_str() != "DELETING")
        .map(|c| c.consumer_name().to_owned())
        .collect()
}

/// The pool's items are writable by every function of the group, and a
/// deregistration cannot be undone: an item whose ARN is another stream's
/// consumer, or another consumer of this stream, is refused with a typed
/// error before anything is written or deregistered, and the reaper keeps
/// such an item (and says so) instead of failing its tick.
#[tokio::test]
async fn an_arn_that_is_not_this_pools_consumer_on_this_stream_is_never_deregistered() {
    let ctx = ctx().await;
    let ours = create_stream(&ctx.aws, 1).await;
    let theirs = create_stream(&ctx.aws, 1).await;
    let ours_arn = stream_arn(&ctx.aws, &ours).await;
    let theirs_arn = stream_arn(&ctx.aws, &theirs).await;
    let store = ctx.store(&ours);
    let foreign =
        crate::support::common::active_efo_consumer(&ctx.aws, &theirs_arn, "pool-0").await;
    let other = crate::support::common::active_efo_consumer(&ctx.aws, &ours_arn, "not-pool").await;
    let cases = [
        ("pool-0", foreign.clone()),
        ("pool-1", other.clone()),
        ("pool-2", format!("{ours_arn}/consumer/pool-2")),
        ("pool-3", "arn:aws:iam::123456789012:role/x".to_owned()),
    ];
    for (name, arn) in &cases {
        let name = EfoName::new(*name).unwrap();
        store.efo_consumers().register(&name, arn).await.unwrap();
        let refused = store
            .efo_consumers()
            .remove_idle(&ctx.aws.kinesis, &name, arn, 0)
            .await
            .unwrap_err();
        assert!(
            matches!(refused, shardkeeper::state::StateError::Validation { .. }),
            "{arn}: {refused}"
        );
        assert!(
            refused.to_string().contains("not deregistered"),
            "{refused}"
        );
    }
    // Nothing was marked, and both consumers still exist on Kinesis.
    let seen = store.efo_consumers().list().await.unwrap();
    assert!(seen.iter().all(|e| !e.retiring), "{seen:?}");
    for arn in [&foreign, &other] {
        ctx.aws
            .kinesis
            .describe_stream_consumer()
            .consumer_arn(arn)
            .send()
            .await
            .expect("still registered");
    }
    // The reaper's executor, given their retirement, keeps them and
    // finishes its pass.
    let plan: Vec<_> = seen
        .iter()
        .map(|e| shardkeeper::group::Action::DeregisterEfo {
            name: e.name.clone(),
            arn: e.arn.clone(),
            lock_counter: e.lock_counter,
        })
        .collect();
    let report = shardkeeper::group::execute(&store, Some(&ctx.aws.kinesis), &plan, Duration::ZERO)
        .await
        .unwrap();
    assert!(report.efo_deregistered.is_empty(), "{report:?}");
    assert_eq!(pool_names(&store).await.len(), cases.len());
}
