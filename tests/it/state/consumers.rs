//! Consumers: register-or-heartbeat in one call, the active flag, clearing the dead.

use crate::support::common::{ctx, seed_shards};
use shardkeeper::state::{ConsumerId, ConsumerInfo, EfoName, Heartbeat};
use std::time::Duration;

fn info(id: &str, started: i64) -> ConsumerInfo {
    ConsumerInfo::for_this_process(ConsumerId::new(id).unwrap(), started)
}

#[tokio::test]
async fn heartbeat_registers_once_then_refreshes_in_one_request() {
    let ctx = ctx().await;
    let store = ctx.store("consumers");
    let me = info("host-1:42", ctx.clock_now());
    let before = ctx.aws.dynamodb_requests.snapshot();
    assert!(store.consumers().heartbeat(&me).await.unwrap().registered);
    assert_eq!(
        ctx.aws.dynamodb_requests.since(&before)["UpdateItem"].requests,
        1
    );
    ctx.clock.advance(Duration::from_secs(5));
    let beat = store.consumers().heartbeat(&me).await.unwrap();
    assert_eq!(
        beat,
        Heartbeat {
            registered: false,
            assignments: 0,
            named: 0,
            given: Default::default(),
            incarnation: beat.incarnation.clone(),
            revoked: Default::default(),
            claimed: Default::default(),
            took_over: false,
        }
    );
    assert!(store
        .consumers()
        .notify_assigned(&me.id, &[])
        .await
        .unwrap());
    assert_eq!(
        store.consumers().heartbeat(&me).await.unwrap().assignments,
        1
    );
    assert!(!store
        .consumers()
        .notify_assigned(&ConsumerId::new("nobody").unwrap(), &[])
        .await
        .unwrap());
    let state = store.consumers().get(&me.id).await.unwrap().unwrap();
    assert_eq!(state.heartbeat, ctx.clock_now());
    assert_eq!(state.info.pid, std::process::id());
    assert!(state.active && !state.info.standalone);

    assert!(store.consumers().set_active(&me.id, false).await.unwrap());
    store.consumers().heartbeat(&me).await.unwrap();
    assert!(
        !store.consumers().get(&me.id).await.unwrap().unwrap().active,
        "heartbeat keeps the flag"
    );
    assert!(!store
        .consumers()
        .set_active(&ConsumerId::new("ghost").unwrap(), true)
        .await
        .unwrap());
    assert!(store
        .consumers()
        .get(&ConsumerId::new("ghost").unwrap())
        .await
        .unwrap()
        .is_none());
    assert_eq!(store.consumers().list().await.unwrap().len(), 1);
}

#[tokio::test]
async fn clearing_old_consumers_releases_their_leases_and_efo_locks() {
    let ctx = ctx().await;
    let store = ctx.store("reap");
    let term = Duration::from_secs(300);
    let shards = seed_shards(&store, 4).await;
    let (dead, alive) = (info("dead", 0), info("alive", 0));
    store.consumers().heartbeat(&dead).await.unwrap();
    store.consumers().heartbeat(&alive).await.unwrap();
    // The dead consumer's leases on shards 0 and 1 run out before the
    // clean-up, the one on shard 2 does not: it may still be in use, and
    // stays.
    for (i, shard) in shards.iter().enumerate() {
        let owner = if i < 3 { &dead.id } else { &alive.id };
        let term = if i < 2 { Duration::from_secs(30) } else { term };
        store
            .leases()
            .acquire(shard, owner, term)
            .await
            .unwrap()
            .unwrap();
    }
    for name in ["efo-a", "efo-b", "efo-c"] {
        let name = EfoName::new(name).unwrap();
        store
            .efo_consumers()
            .register(
                &name,
                &format!("arn:aws:kinesis:us-east-1:0:stream/s/consumer/{name}:1"),
            )
            .await
            .unwrap();
    }
    let dead_lock = store
        .efo_consumers()
        .get_or_lock(&dead.id)
        .await
        .unwrap()
        .unwrap();
    let alive_lock = store
        .efo_consumers()
        .get_or_lock(&alive.id)
        .await
        .unwrap()
        .unwrap();
    let ghost_lock = store
        .efo_consumers()
        .get_or_lock(&ConsumerId::new("ghost").unwrap())
        .await
        .unwrap()
        .unwrap();

    ctx.clock.advance(Duration::from_secs(30));
    store.consumers().heartbeat(&alive).await.unwrap();
    ctx.clock.advance(Duration::from_secs(15));
    let report = store
        .consumers()
        .clear_old(Duration::from_secs(40))
        .await
        .unwrap();
    assert_eq!(report.removed, vec![dead.id.clone()]);
    assert_eq!(report.leases_released, shards[..2].to_vec());
    let mut released = report.efo_released.clone();
    released.sort();
    let mut expected = vec![dead_lock.name.clone(), ghost_lock.name.clone()];
    expected.sort();
    assert_eq!(
        released, expected,
        "the dead consumer's and an unknown holder's locks"
    );

    let consumers = store.consumers().list().await.unwrap();
    assert_eq!(consumers.len(), 1);
    for shard in &shards[..2] {
        assert_eq!(store.leases().get_owner(shard).await.unwrap(), None);
    }
    assert_eq!(
        store.leases().get_owner(&shards[2]).await.unwrap(),
        Some(dead.id.clone())
    );
    assert_eq!(
        store.leases().get_owner(&shards[3]).await.unwrap(),
        Some(alive.id.clone())
    );
    let pool = store.efo_consumers().list().await.unwrap();
    let held: Vec<_> = pool.iter().filter(|e| e.used_by.is_some()).collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].name, alive_lock.name);
    // Running it again changes nothing.
    let again = store
        .consumers()
        .clear_old(Duration::from_secs(40))
        .await
        .unwrap();
    assert!(
        again.removed.is_empty()
            && again.leases_released.is_empty()
            && again.efo_released.is_empty()
    );
    // A cleared consumer that comes back registers anew.
    assert!(store.consumers().heartbeat(&dead).await.unwrap().registered);
}

#[tokio::test]
async fn a_consumer_that_heartbeats_after_the_snapshot_is_not_removed() {
    let ctx = ctx().await;
    let store = ctx.store("late-beat");
    let me = info("slow", 0);
    store.consumers().heartbeat(&me).await.unwrap();
    let seen = store.consumers().get(&me.id).await.unwrap().unwrap();
    ctx.clock.advance(Duration::from_secs(1));
    store.consumers().heartbeat(&me).await.unwrap();
    assert!(!store.consumers().remove_if_unchanged(&seen).await.unwrap());
    assert!(store.consumers().get(&me.id).await.unwrap().is_some());
}

/// A draining consumer stays inactive: its heartbeats say so, one that
/// registers it again after a reap too, and locking an enhanced fan-out
/// consumer (which marks a consumer active) does not make it active again.
#[tokio::test]
async fn a_draining_consumer_is_never_made_active_again() {
    let ctx = ctx().await;
    let store = ctx.store("draining");
    let mut me = info("ending", ctx.clock_now());
    store.consumers().heartbeat(&me).await.unwrap();
    me.draining = true;
    store.consumers().heartbeat(&me).await.unwrap();
    let active = || async { store.consumers().get(&me.id).await.unwrap().unwrap().active };
    assert!(!active().await);
    assert!(!store.consumers().set_active(&me.id, true).await.unwrap());
    assert!(!active().await);
    // Reaped, then its next heartbeat registers it again: still inactive.
    let seen = store.consumers().get(&me.id).await.unwrap().unwrap();
    assert!(store.consumers().remove_if_unchanged(&seen).await.unwrap());
    assert!(store.consumers().heartbeat(&me).await.unwrap().registered);
    assert!(!active().await);
    // Locking a pool consumer does not make it active either.
    let name = EfoName::new("pool-0").unwrap();
    store
        .efo_consumers()
        .register(
            &name,
            "arn:aws:kinesis:us-east-1:0:stream/s/consumer/pool-0:1",
        )
        .await
        .unwrap();
    assert!(store
        .efo_consumers()
        .get_or_lock(&me.id)
        .await
        .unwrap()
        .is_some());
    assert!(!active().await);
}

/// A heartbeat carries the handler's busy time on each shard held, read
/// back as written; one that measured nothing leaves the last report.
#[tokio::test]
async fn a_heartbeat_carries_each_held_shards_load() {
    let ctx = ctx().await;
    let store = ctx.store("consumer-loads");
    let mut me = info("host-1:7", ctx.clock_now());
    me.busy = Some(600);
    me.loads = [("shardId-000000000001", 450), ("shardId-000000000002", 0)]
        .into_iter()
        .map(|(s, l)| (shardkeeper::state::ShardId::new(s).unwrap(), l))
        .collect();
    store.consumers().heartbeat(&me).await.unwrap();
    let read = store.consumers().get(&me.id).await.unwrap().unwrap();
    assert_eq!(read.info.loads, me.loads);
    assert_eq!(read.info.busy, Some(600));
    let unmeasured = ConsumerInfo {
        busy: None,
        loads: Default::default(),
        ..me.clone()
    };
    store.consumers().heartbeat(&unmeasured).await.unwrap();
    let read = store.consumers().get(&me.id).await.unwrap().unwrap();
    assert_eq!(read.info.loads, me.loads);
}
