//! The rebalancer, the reaper and consumer sessions together on the
//! in-process servers, ticking on a test clock; and both functions invoked
//! through lambda_runtime's service with the scheduled-event fixture.

use crate::support::common::{
    create_stream, ctx, lambda_context, list_shards, register_pool, split_first, stream_arn,
    wait_stream_active, Ctx,
};
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::{LambdaEvent, Service};
use shardkeeper::config::TickTiming;
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::{handle_reap, handle_rebalance, Reaper, Rebalancer};
use shardkeeper::group::ReapConfig;
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, ShardId, ShardScope, ShardSpec, StateStore,
};
use std::collections::BTreeMap;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(10);

fn rebalancer(ctx: &Ctx, store: &StateStore) -> Rebalancer {
    Rebalancer {
        emit_metrics: true,
        ..crate::support::common::rebalancer(&ctx.aws, store)
    }
}

fn session(store: &StateStore, name: &str) -> ConsumerSession {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    ConsumerSession::new(store.clone(), info, TERM)
}

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

/// Ticks every session once; returns who holds what, checking nobody holds a shard twice.
async fn tick_all(sessions: &mut [ConsumerSession]) -> BTreeMap<String, usize> {
    let mut owners: BTreeMap<ShardId, String> = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for s in sessions.iter_mut() {
        s.tick(no_progress).await.unwrap();
    }
    for s in sessions.iter() {
        counts.insert(s.id().to_string(), s.leases().count());
        for lease in s.leases() {
            if let Some(other) = owners.insert(lease.shard_id.clone(), s.id().to_string()) {
                panic!("{} held by {other} and {}", lease.shard_id, s.id());
            }
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_shards_one_consumer_then_four_balanced_in_one_tick() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 64).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut sessions = vec![session(&store, "c0")];
    tick_all(&mut sessions).await;
    let first = rebalancer.tick().await.unwrap();
    assert_eq!(first.discovery.created.len(), 64);
    assert_eq!(tick_all(&mut sessions).await["c0"], 64);

    for i in 1..4 {
        sessions.push(session(&store, &format!("c{i}")));
    }
    tick_all(&mut sessions).await; // the newcomers register
    let tick = rebalancer.tick().await.unwrap();
    assert_eq!(tick.live_consumers, 4);
    assert_eq!(tick.moves(), 48, "one tick plans the whole balance");
    // c0 honours the claims at its next renewal; the others pick their leases up.
    let counts = tick_all(&mut sessions).await;
    let counts = if counts.values().all(|n| *n == 16) {
        counts
    } else {
        tick_all(&mut sessions).await
    };
    assert!(counts.values().all(|n| *n == 16), "{counts:?}");
    // Balanced: the next tick changes nothing.
    let idle = rebalancer.tick().await.unwrap();
    assert_eq!(idle.actions_planned, 0, "{idle:?}");
}

#[tokio::test]
async fn a_silent_consumers_shards_move_after_the_timeout() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 8).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut sessions = vec![session(&store, "a"), session(&store, "b")];
    tick_all(&mut sessions).await;
    rebalancer.tick().await.unwrap();
    let counts = tick_all(&mut sessions).await;
    assert_eq!(counts.values().sum::<usize>(), 8);
    assert_eq!(counts["a"], 4);

    // b stops (no heartbeat, no renewals); a keeps ticking.
    let b = sessions.pop().unwrap();
    for _ in 0..4 {
        ctx.clock.advance(Duration::from_secs(4));
        tick_all(&mut sessions).await;
        let tick = rebalancer.tick().await.unwrap();
        if tick.live_consumers == 1
            && tick
                .execution
                .applied(shardkeeper::group::ActionKind::Assign)
                > 0
        {
            break;
        }
    }
    let counts = tick_all(&mut sessions).await;
    assert_eq!(counts["a"], 8, "{counts:?}");
    // b learns it lost everything the moment it writes.
    let mut b = b;
    let lost = b.tick(no_progress).await.unwrap();
    assert_eq!(lost.lost.len(), 4);
    assert_eq!(b.leases().count(), 0);
}

#[tokio::test]
async fn a_consumer_that_leaves_hands_everything_over_at_the_next_tick() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 6).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut sessions = vec![session(&store, "stays"), session(&store, "leaves")];
    tick_all(&mut sessions).await;
    rebalancer.tick().await.unwrap();
    let counts = tick_all(&mut sessions).await;
    assert_eq!(counts["leaves"], 3, "{counts:?}");
    let mut leaving = sessions.pop().unwrap();
    let first = leaving.leases().next().unwrap().shard_id.clone();
    let cp = Checkpoint::after("7").unwrap();
    // A rebalancer that read the group before the leave assigns one more
    // shard to it: the leave frees that one too.
    let extra = store
        .shards()
        .list(&ShardScope::Group)
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.owner.as_ref().is_some_and(|o| o.as_str() == "stays"))
        .unwrap();
    store
        .leases()
        .remove_owner(&extra.shard_id, &ConsumerId::new("stays").unwrap(), None)
        .await
        .unwrap();
    store
        .leases()
        .acquire(&extra.shard_id, leaving.id(), TERM)
        .await
        .unwrap()
        .expect("assigned to the leaving consumer");
    let released = leaving
        .leave(|s| (s == &first).then(|| (cp.clone(), None)))
        .await
        .unwrap();
    assert_eq!(released.len(), 4, "{released:?}");
    assert!(store
        .consumers()
        .list()
        .await
        .unwrap()
        .iter()
        .all(|c| c.id().as_str() == "stays"));
    let left = store
        .shards()
        .get(&ShardScope::Group, &first)
        .await
        .unwrap();
    assert_eq!(left.checkpoint, Some(cp), "checkpointed before release");
    // The next tick gives all six to the consumer that stayed.
    rebalancer.tick().await.unwrap();
    let counts = tick_all(&mut sessions).await;
    assert_eq!(counts["stays"], 6, "{counts:?}");
}

#[tokio::test]
async fn split_and_merge_during_consumption_keep_parents_first() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut sessions = vec![session(&store, "a")];
    tick_all(&mut sessions).await;
    rebalancer.tick().await.unwrap();
    tick_all(&mut sessions).await;
    let s0 = split_first(&ctx.aws, &stream).await;
    let tick = rebalancer.tick().await.unwrap();
    assert_eq!(tick.discovery.created.len(), 2, "{:?}", tick.discovery);
    assert_eq!(tick.discovery.closed, vec![s0.shard_id().to_owned()]);
    assert_eq!(tick.execution.applied.len(), 0, "children wait: {tick:?}");
    tick_all(&mut sessions).await;
    assert_eq!(
        sessions[0].leases().count(),
        2,
        "the parent and the untouched shard"
    );

    // The consumer reads s0 to its end and completes it with its children.
    let children: Vec<ShardSpec> = list_shards(&ctx.aws, &stream)
        .await
        .iter()
        .map(|s| ShardSpec::from_kinesis(s).unwrap())
        .filter(|s| s.parents.iter().any(|p| p.as_str() == s0.shard_id()))
        .collect();
    let parent = ShardId::new(s0.shard_id()).unwrap();
    sessions[0]
        .complete_shard(&parent, &children)
        .await
        .unwrap();
    let tick = rebalancer.tick().await.unwrap();
    assert_eq!(
        tick.execution
            .applied(shardkeeper::group::ActionKind::Assign),
        2
    );
    tick_all(&mut sessions).await;
    assert_eq!(sessions[0].leases().count(), 3);

    // Merge the two children: the merged shard waits for both.
    let (c0, c1) = (&children[0].shard_id, &children[1].shard_id);
    let (first, second) = if children[0]
        .hash_range
        .as_ref()
        .unwrap()
        .0
        .parse::<u128>()
        .unwrap()
        < children[1]
            .hash_range
            .as_ref()
            .unwrap()
            .0
            .parse::<u128>()
            .unwrap()
    {
        (c0, c1)
    } else {
        (c1, c0)
    };
    ctx.aws
        .kinesis
        .merge_shards()
        .stream_name(&stream)
        .shard_to_merge(first.as_str())
        .adjacent_shard_to_merge(second.as_str())
        .send()
        .await
        .unwrap();
    wait_stream_active(&ctx.aws, &stream).await;
    let tick = rebalancer.tick().await.unwrap();
    assert_eq!(tick.discovery.created.len(), 1);
    let merged = ShardId::new(&tick.discovery.created[0]).unwrap();
    sessions[0].complete_shard(first, &[]).await.unwrap();
    rebalancer.tick().await.unwrap();
    assert_eq!(
        store.leases().get_owner(&merged).await.unwrap(),
        None,
        "one parent is still open"
    );
    sessions[0].complete_shard(second, &[]).await.unwrap();
    // Depleted without naming the child: the rebalancer unblocks it, then leases it.
    rebalancer.tick().await.unwrap();
    rebalancer.tick().await.unwrap();
    assert_eq!(
        store.leases().get_owner(&merged).await.unwrap(),
        Some(ConsumerId::new("a").unwrap())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rebalancers_at_once_never_double_assign() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 24).await;
    let store = ctx.store(&stream);
    let (r1, r2) = (rebalancer(&ctx, &store), rebalancer(&ctx, &store));
    let mut sessions: Vec<ConsumerSession> =
        (0..3).map(|i| session(&store, &format!("c{i}"))).collect();
    tick_all(&mut sessions).await;
    let mut lost = 0;
    for round in 0..6 {
        if round == 3 {
            sessions.push(session(&store, "late"));
        }
        let (a, b) = tokio::join!(r1.tick(), r2.tick());
        lost += a.unwrap().execution.lost_total() + b.unwrap().execution.lost_total();
        tick_all(&mut sessions).await; // panics on any shard held twice
        ctx.clock.advance(Duration::from_secs(2));
    }
    let counts = tick_all(&mut sessions).await;
    assert_eq!(counts.values().sum::<usize>(), 24);
    assert!(counts.values().all(|n| *n == 6), "{counts:?}");
    assert!(lost > 0, "the overlapping rebalancer lost its races");
}

#[tokio::test]
async fn the_reaper_removes_the_dead_and_deregisters_idle_efo_consumers() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let arn = stream_arn(&ctx.aws, &stream).await;
    register_pool(&ctx.aws, &store, &arn, (0..3).map(|i| format!("pool-{i}"))).await;
    let mut dead = session(&store, "dead");
    dead.tick(no_progress).await.unwrap();
    store
        .efo_consumers()
        .get_or_lock(&ConsumerId::new("dead").unwrap())
        .await
        .unwrap()
        .unwrap();
    let reaper = Reaper {
        store: store.clone(),
        kinesis: ctx.aws.kinesis.clone(),
        config: ReapConfig::default().efo_idle_timeout(Duration::from_secs(600)),
        emit_metrics: true,
        sightings: Default::default(),
    };
    // The reaper's first look: it has seen nothing go silent yet.
    let first = reaper.tick().await.unwrap();
    assert_eq!(first.execution.applied.len(), 0, "{first:?}");
    ctx.clock.advance(Duration::from_secs(20));
    let tick = reaper.tick().await.unwrap();
    assert_eq!(
        tick.execution
            .applied(shardkeeper::group::ActionKind::ReapConsumer),
        1
    );
    assert_eq!(tick.execution.efo_released, 1);
    assert!(
        tick.execution.efo_deregistered.is_empty(),
        "not idle long enough yet"
    );
    ctx.clock.advance(Duration::from_secs(601));
    let tick = reaper.tick().await.unwrap();
    assert_eq!(tick.execution.efo_deregistered.len(), 2, "{tick:?}");
    let listed = ctx
        .aws
        .kinesis
        .list_stream_consumers()
        .stream_arn(&arn)
        .send()
        .await
        .unwrap();
    let remaining = listed
        .consumers()
        .iter()
        .filter(|c| c.consumer_status().as_str() != "DELETING")
        .count();
    assert_eq!(remaining, 1, "one EFO consumer is kept on Kinesis");
    assert_eq!(store.efo_consumers().list().await.unwrap().len(), 1);
}

/// A consumer that stops heartbeating keeps its leases until the
/// rebalancer has seen its session unchanged for a term: its process may be
/// inside a batch until its last heartbeat plus the term. Then the lease
/// moves, in one transaction that notes the revocation on the silent
/// consumer's item, so its next heartbeat drops the lease instead of
/// keeping it alive.
#[tokio::test]
async fn a_silent_consumers_lease_moves_once_its_session_went_a_term_unchanged_and_it_learns_of_it()
{
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut slow = session(&store, "slow");
    slow.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    let shard = slow.tick(no_progress).await.unwrap().gained.remove(0);
    let mut other = session(&store, "other");
    other.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    let owner = || async { store.leases().get_owner(&shard).await.unwrap() };

    // 9 s without a heartbeat: the lease stays.
    for _ in 0..3 {
        ctx.clock.advance(Duration::from_secs(3));
        other.tick(no_progress).await.unwrap();
        rebalancer.tick().await.unwrap();
        assert_eq!(
            owner().await.unwrap().as_str(),
            "slow",
            "moved within the term"
        );
    }
    // A term: it moves, and the new owner takes it up.
    ctx.clock.advance(Duration::from_secs(2));
    rebalancer.tick().await.unwrap();
    assert_eq!(owner().await.unwrap().as_str(), "other");
    assert_eq!(
        other.tick(no_progress).await.unwrap().gained,
        std::slice::from_ref(&shard)
    );
    // The silent consumer comes back: its heartbeat goes through, and its
    // answer names the lease revoked, so it stops the shard.
    let back = slow.tick(no_progress).await.unwrap();
    assert_eq!(back.lost, std::slice::from_ref(&shard), "{back:?}");
    assert!(slow.lease(&shard).is_none());
    assert!(slow.local_expiry(&shard).is_none());
}

/// A rebalancer that just started sees every heartbeat as fresh, so a
/// consumer that died just before looks alive for a heartbeat timeout. It
/// still gives it no lease by claim (that would take leases from a living
/// consumer and leave them with a dead one): a lease moves by claim only to
/// a consumer it has seen heartbeat.
#[tokio::test]
async fn a_fresh_rebalancer_claims_nothing_for_a_consumer_it_has_not_seen_heartbeat() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let mut alive = session(&store, "alive");
    alive.tick(no_progress).await.unwrap();
    rebalancer(&ctx, &store).tick().await.unwrap();
    assert_eq!(alive.tick(no_progress).await.unwrap().gained.len(), 4);
    // "dead" registers and dies; a new rebalancer starts.
    session(&store, "dead").tick(no_progress).await.unwrap();
    let fresh = rebalancer(&ctx, &store);
    for _ in 0..4 {
        fresh.tick().await.unwrap();
        let claimed: Vec<_> = store
            .shards()
            .list(&ShardScope::Group)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|s| s.claim)
            .collect();
        assert!(claimed.is_empty(), "{claimed:?}");
        ctx.clock.advance(Duration::from_secs(3));
        alive.tick(no_progress).await.unwrap();
    }
    // A consumer it sees heartbeat is given its share by claims.
    let mut joined = session(&store, "joined");
    joined.tick(no_progress).await.unwrap();
    fresh.tick().await.unwrap();
    ctx.clock.advance(Duration::from_secs(3));
    joined.tick(no_progress).await.unwrap();
    alive.tick(no_progress).await.unwrap();
    fresh.tick().await.unwrap();
    alive.tick(no_progress).await.unwrap();
    assert_eq!(joined.tick(no_progress).await.unwrap().gained.len(), 2);
}

fn scheduled_event() -> EventBridgeEvent {
    serde_json::from_str(include_str!("../../../events/scheduled.json")).expect("fixture parses")
}

#[tokio::test]
async fn both_functions_run_through_the_lambda_service_with_the_fixture() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let mut consumer = session(&store, "worker");
    consumer.tick(no_progress).await.unwrap();
    let timing = TickTiming {
        tick: Duration::from_millis(100),
        margin: Duration::from_millis(200),
    };

    let rebalancer = rebalancer(&ctx, &store);
    let mut service =
        lambda_runtime::service_fn(|event| handle_rebalance(&rebalancer, timing, event));
    let summary = service
        .call(LambdaEvent::new(
            scheduled_event(),
            lambda_context(Duration::from_millis(2000)),
        ))
        .await
        .unwrap();
    let json = serde_json::to_value(&summary).unwrap();
    assert!(json["ticks"].as_u64().unwrap() >= 2, "{json}");
    assert_eq!(json["last"]["live_consumers"], 1);
    assert_eq!(json["last"]["available_shards"], 4);
    consumer.tick(no_progress).await.unwrap();
    assert_eq!(consumer.leases().count(), 4);

    let reaper = Reaper {
        store: store.clone(),
        kinesis: ctx.aws.kinesis.clone(),
        config: ReapConfig::default(),
        emit_metrics: true,
        sightings: Default::default(),
    };
    reaper.tick().await.unwrap(); // its first look at the worker's heartbeat
    ctx.clock.advance(Duration::from_secs(60));
    let mut service = lambda_runtime::service_fn(|event| handle_reap(&reaper, timing, event));
    let summary = service
        .call(LambdaEvent::new(
            scheduled_event(),
            lambda_context(Duration::from_millis(1500)),
        ))
        .await
        .unwrap();
    let json = serde_json::to_value(&summary).unwrap();
    assert!(json["ticks"].as_u64().unwrap() >= 1, "{json}");
    assert!(
        store.consumers().list().await.unwrap().is_empty(),
        "the silent worker was reaped"
    );
    let free = store.shards().list(&ShardScope::Group).await.unwrap();
    assert!(free.iter().all(|s| s.owner.is_none()));
}

#[tokio::test]
async fn a_session_reads_only_the_shards_it_was_given() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx, &store);
    let mut worker = session(&store, "w");
    worker.tick(no_progress).await.unwrap(); // registers, scans
    let queries = |before: &BTreeMap<String, shardkeeper_local::OperationCount>| {
        ctx.aws
            .dynamodb_requests
            .since(before)
            .get("Query")
            .map_or(0, |c| c.requests)
    };
    let before = ctx.aws.dynamodb_requests.snapshot();
    worker.tick(no_progress).await.unwrap();
    assert_eq!(
        queries(&before),
        0,
        "nothing assigned: no read of the shards"
    );

    rebalancer.tick().await.unwrap();
    let before = ctx.aws.dynamodb_requests.snapshot();
    let tick = worker.tick(no_progress).await.unwrap();
    assert_eq!(
        queries(&before),
        0,
        "assignment noticed through the heartbeat, the shards named there"
    );
    let reads = ctx.aws.dynamodb_requests.since(&before)["GetItem"].requests;
    assert_eq!(reads, 4, "one read of each shard given");
    assert_eq!(tick.gained.len(), 4);
    let before = ctx.aws.dynamodb_requests.snapshot();
    worker.tick(no_progress).await.unwrap();
    let sent = ctx.aws.dynamodb_requests.since(&before);
    assert_eq!(
        sent.values().map(|c| c.requests).sum::<u64>(),
        1,
        "one heartbeat keeps the four leases, no renewal of each: {sent:?}"
    );
    assert_eq!(sent["UpdateItem"].requests, 1);
}

/// A group on a stream of two shards, and a process under id "dup" holding
/// both leases: the store, the rebalancer, the session and the shards.
async fn a_process_holding_two_leases_as_dup(
    ctx: &Ctx,
) -> (StateStore, Rebalancer, ConsumerSession, Vec<ShardId>) {
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(ctx, &store);
    let mut old = session(&store, "dup");
    old.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    old.tick(no_progress).await.unwrap();
    let shards: Vec<ShardId> = old.leases().map(|l| l.shard_id.clone()).collect();
    assert_eq!(shards.len(), 2);
    (store, rebalancer, old, shards)
}

/// Two processes under one consumer id (a restart while the old process
/// still runs, with `release_on_stop = false`): the newer takes the id over
/// at once, and the older's next tick says it was superseded; it stops. The
/// older may still be inside a batch until its last heartbeat that went
/// through plus the term, and none goes through after the takeover, so the
/// newer takes the leases (moving the counter, so the older can no longer
/// checkpoint) only a term after its takeover: the older stops before the
/// newer reads.
#[tokio::test]
async fn a_second_process_under_one_id_takes_over_and_the_first_stops() {
    let ctx = ctx().await;
    let (store, _, mut old, shards) = a_process_holding_two_leases_as_dup(&ctx).await;
    let cp = Checkpoint::after("100").unwrap();
    old.checkpoint(&shards[0], &cp, None).await.unwrap();

    let mut new = session(&store, "dup");
    let tick = new.tick(no_progress).await.unwrap();
    assert!(tick.gained.is_empty(), "{tick:?}");
    // The older's heartbeat no longer goes through: it learns it was
    // superseded, and its leases live no longer than its last heartbeat
    // before the takeover plus the term.
    ctx.clock.advance(TERM / 2);
    let err = old.tick(no_progress).await.unwrap_err();
    assert!(
        matches!(
            err,
            shardkeeper::Error::State(shardkeeper::state::StateError::Superseded { .. })
        ),
        "{err}"
    );
    assert!(new.tick(no_progress).await.unwrap().gained.is_empty());
    ctx.clock.advance(TERM / 2 - Duration::from_millis(1));
    assert!(
        new.tick(no_progress).await.unwrap().gained.is_empty(),
        "taken before a term had passed since the takeover"
    );
    ctx.clock.advance(Duration::from_millis(1));
    let tick = new.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained.len(), 2, "{tick:?}");

    let later = Checkpoint::after("200").unwrap();
    let err = old.checkpoint(&shards[0], &later, None).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    new.checkpoint(&shards[0], &later, None).await.unwrap();
    new.tick(no_progress).await.unwrap();
    assert_eq!(new.leases().count(), 2);
    // The older one stopping cleanly touches nothing of the newer one's:
    // not the registration, not the leases in the id's name.
    let err = old.leave(no_progress).await.unwrap_err();
    assert!(
        matches!(
            err,
            shardkeeper::Error::State(shardkeeper::state::StateError::Superseded { .. })
        ),
        "{err}"
    );
    assert!(store
        .consumers()
        .get(&ConsumerId::new("dup").unwrap())
        .await
        .unwrap()
        .is_some_and(|c| c.active));
    assert_eq!(
        store
            .leases()
            .owned_shards(&ConsumerId::new("dup").unwrap())
            .await
            .unwrap()
            .len(),
        2
    );
    let tick = new.tick(no_progress).await.unwrap();
    assert!(tick.lost.is_empty(), "{tick:?}");
}

/// A process that took the id over and leaves within a term (a supervisor
/// started it beside the older one, then stopped it) must not free the
/// older process's leases: the older may still be inside a batch until a
/// term after the takeover. Deregistered, every lease in the id's name would
/// be free to the rebalancer at once (found by the simulator: seed 48, two
/// consumers' handler calls on one shard at once). The leave releases what
/// it holds itself and leaves the registration to the reaper, which frees
/// the id's leases once the heartbeat is stale.
#[tokio::test]
async fn a_process_leaving_within_a_term_of_its_takeover_leaves_the_older_ones_leases_alone() {
    let ctx = ctx().await;
    let (store, rebalancer, mut old, shards) = a_process_holding_two_leases_as_dup(&ctx).await;
    let mut other = session(&store, "other");
    other.tick(no_progress).await.unwrap();

    let mut new = session(&store, "dup");
    assert!(new.tick(no_progress).await.unwrap().gained.is_empty());
    ctx.clock.advance(TERM / 2);
    assert_eq!(new.leave(no_progress).await.unwrap(), Vec::<ShardId>::new());
    let dup = ConsumerId::new("dup").unwrap();
    assert!(
        store.consumers().get(&dup).await.unwrap().is_some(),
        "deregistered within a term of the takeover"
    );
    rebalancer.tick().await.unwrap();
    assert!(other.tick(no_progress).await.unwrap().gained.is_empty());
    let owned = store.leases().owned_shards(&dup).await.unwrap();
    assert_eq!(
        owned.len(),
        2,
        "the older process's leases were freed: {owned:?}"
    );
    // The older process, inside its batch, can still checkpoint: nobody
    // took the shard.
    old.checkpoint(&shards[0], &Checkpoint::after("100").unwrap(), None)
        .await
        .unwrap();

    // Once the heartbeat is stale, the reaper removes the consumer and frees
    // its leases: nothing is stranded.
    ctx.clock.advance(Duration::from_secs(60));
    let report = store
        .consumers()
        .clear_old(Duration::from_secs(40))
        .await
        .unwrap();
    assert!(report.removed.contains(&dup), "{report:?}");
    assert_eq!(report.leases_released.len(), 2, "{report:?}");
}

/// A claim noted on the owner's item and withdrawn before the owner's next
/// heartbeat (its claimant died, or the plan changed) leaves the lease with
/// its owner: the session reads the lease, finds no claim, keeps the lease
/// and acknowledges the note.
#[tokio::test]
async fn a_withdrawn_claim_leaves_the_lease_with_its_owner() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let mut owner = session(&store, "owner");
    owner.tick(no_progress).await.unwrap();
    rebalancer(&ctx, &store).tick().await.unwrap();
    let shard = owner.tick(no_progress).await.unwrap().gained.remove(0);
    let counter = owner.lease(&shard).unwrap().counter;
    let (claimant, me) = (
        ConsumerId::new("claimant").unwrap(),
        ConsumerId::new("owner").unwrap(),
    );
    assert!(store
        .leases()
        .claim(&shard, &claimant, &me, counter)
        .await
        .unwrap());
    assert!(store
        .leases()
        .cancel_claim(&shard, &claimant)
        .await
        .unwrap());
    for _ in 0..2 {
        let tick = owner.tick(no_progress).await.unwrap();
        assert!(
            tick.handed_off.is_empty() && tick.lost.is_empty(),
            "{tick:?}"
        );
        assert_eq!(owner.lease(&shard).map(|l| l.counter), Some(counter));
    }
    assert_eq!(store.leases().get_owner(&shard).await.unwrap(), Some(me));
}
