//! How a consumer learns of the leases it was given: the givers (the
//! rebalancer's executor, a hand-off) name the shards beside the consumer's
//! assignment counter, and the session reads those shards, not the group.

use crate::support::common::{create_stream, ctx, raw_item, rebalancer, seed_shards};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, ShardId, StateStore, TakeFrom, MAX_GIVEN,
};
use shardkeeper_local::RequestCounter;
use std::collections::BTreeMap;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(10);

fn session(store: &StateStore, name: &str) -> ConsumerSession {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    ConsumerSession::new(store.clone(), info, TERM)
}

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

/// Requests of `operation` since `before`.
fn sent(
    counter: &RequestCounter,
    before: &BTreeMap<String, shardkeeper_local::OperationCount>,
    operation: &str,
) -> u64 {
    counter
        .since(before)
        .get(operation)
        .map_or(0, |c| c.requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_leases_are_read_by_name_not_by_reading_the_group() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 40).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let counter = &ctx.aws.dynamodb_requests;
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap(); // registers: reads the group once

    // The rebalancer gives a every shard, naming them.
    rebalancer.tick().await.unwrap();
    let before = counter.snapshot();
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained.len(), 40);
    assert_eq!(sent(counter, &before, "Query"), 0, "the group is not read");
    assert_eq!(sent(counter, &before, "GetItem"), 40, "one read per shard");

    // The next heartbeat acknowledges them; a quiet tick reads nothing.
    let before = counter.snapshot();
    let tick = a.tick(no_progress).await.unwrap();
    assert!(tick.gained.is_empty() && tick.lost.is_empty(), "{tick:?}");
    assert_eq!(sent(counter, &before, "Query"), 0);
    assert_eq!(sent(counter, &before, "GetItem"), 0);
    let item = raw_item(&ctx, store.layout().partition_key(), "CONSUMER#a")
        .await
        .unwrap();
    assert!(!item.contains_key("given"), "acknowledged: {item:?}");

    // A newcomer: the rebalancer claims half of a's shards; a hands each
    // over at its next tick, naming it to b; b reads those alone.
    let mut b = session(&store, "b");
    b.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    let handed = a.tick(no_progress).await.unwrap().handed_off;
    assert_eq!(handed.len(), 20, "{handed:?}");
    let before = counter.snapshot();
    let tick = b.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained.len(), 20, "{tick:?}");
    assert_eq!(sent(counter, &before, "Query"), 0);
    assert_eq!(sent(counter, &before, "GetItem"), 20);
}

/// A give whose shards are not named (a giver from before names were
/// kept) still moves the counter: the consumer then reads every shard.
#[tokio::test]
async fn a_give_left_unnamed_is_found_by_reading_the_group() {
    let ctx = ctx().await;
    let store = ctx.store("pickup-unnamed");
    let shards = seed_shards(&store, 3).await;
    let counter = &ctx.aws.dynamodb_requests;
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    let me = ConsumerId::new("a").unwrap();
    store
        .leases()
        .take(
            &shards[1],
            &me,
            &TakeFrom::Stale {
                counter: 0,
                expires: None,
                session: None,
            },
            None,
            TERM,
        )
        .await
        .unwrap()
        .unwrap();
    assert!(store.consumers().notify_assigned(&me, &[]).await.unwrap());
    let before = counter.snapshot();
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained, vec![shards[1].clone()]);
    assert!(sent(counter, &before, "Query") > 0, "the group was read");
}

/// Names wait on the consumer's item only up to a bound (a consumer that
/// never acknowledges them, as code from before them, must not grow its
/// item without end): past it the counter moves alone, and its named
/// moves do not, so the consumer knows to read every shard.
#[tokio::test]
async fn names_stop_at_their_bound_and_the_counter_still_moves() {
    let ctx = ctx().await;
    let store = ctx.store("pickup-bound");
    let me = ConsumerInfo::for_this_process(ConsumerId::new("old").unwrap(), store.now());
    store.consumers().heartbeat(&me).await.unwrap();
    let names: Vec<ShardId> = (0..MAX_GIVEN)
        .map(|i| ShardId::new(format!("shardId-{i:012}")).unwrap())
        .collect();
    for chunk in names.chunks(250) {
        assert!(store
            .consumers()
            .notify_assigned(&me.id, chunk)
            .await
            .unwrap());
    }
    let one_more = ShardId::new("shardId-999999999999").unwrap();
    assert!(store
        .consumers()
        .notify_assigned(&me.id, std::slice::from_ref(&one_more))
        .await
        .unwrap());
    let beat = store.consumers().heartbeat(&me).await.unwrap();
    assert_eq!(beat.given.len(), MAX_GIVEN);
    assert!(!beat.given.contains(&one_more));
    assert_eq!((beat.assignments, beat.named), (5, 4));
}

/// A give and its note are one write: whenever the giver stops (a tick
/// killed at its deadline, a crash between two actions), every lease it
/// gave is named on the receiver's item, so the receiver's next heartbeat
/// picks it up at once instead of at its next full read minutes later.
/// Each request waits 30 ms at a proxy, and the executor is killed after
/// a deadline swept across its whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_is_never_applied_without_its_note_wherever_the_giver_is_killed() {
    use crate::support::faulty::Faulty;
    use shardkeeper::group::Action;
    use shardkeeper_local::Faults;
    let faulty = Faulty::start(37).await;
    faulty
        .dynamodb
        .set_faults(Faults {
            delay: 1.0,
            latency: Duration::from_millis(30)..=Duration::from_millis(30),
            ..Faults::none()
        })
        .unwrap();
    let me = ConsumerId::new("a").unwrap();
    let mut partial = 0;
    for deadline_ms in (15..=255).step_by(20) {
        let store = faulty.ctx.store("pickup-killed");
        let shards = seed_shards(&store, 4).await;
        let info = ConsumerInfo::for_this_process(me.clone(), store.now());
        store.consumers().heartbeat(&info).await.unwrap();
        let actions: Vec<Action> = shards
            .iter()
            .map(|shard| Action::Assign {
                shard: shard.clone(),
                to: me.clone(),
                from_state: TakeFrom::Stale {
                    counter: 0,
                    expires: None,
                    session: None,
                },
                holder: None,
            })
            .collect();
        let run = shardkeeper::group::execute(&store, None, &actions, TERM);
        let _ = tokio::time::timeout(Duration::from_millis(deadline_ms), run).await;
        // A request the proxy still holds may yet be applied.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let owned: Vec<ShardId> = store
            .leases()
            .owned_shards(&me)
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.shard_id)
            .collect();
        let beat = store.consumers().heartbeat(&info).await.unwrap();
        for shard in &owned {
            assert!(
                beat.given.contains(shard),
                "killed after {deadline_ms} ms: {shard} given without its note ({beat:?})"
            );
        }
        if !owned.is_empty() && owned.len() < shards.len() {
            partial += 1;
        }
    }
    assert!(partial > 0, "some kill fell between two gives");
}

/// A shard left in its owner's name while it waits for its parent (a child
/// an operator's rewind moved, waiting for the parent it reopened) cannot
/// be taken yet; the owner reads it again at each tick and takes it at the
/// first tick after the parent is read to its end again, with no note more
/// and no read of the group (before, at its next full read, up to 100
/// ticks later).
#[tokio::test]
async fn a_shard_given_while_it_waits_for_its_parent_is_taken_once_the_parent_ends() {
    use shardkeeper::state::{PositionMove, ShardScope};
    let ctx = ctx().await;
    let store = ctx.store("pickup-unready");
    let group = ShardScope::Group;
    let (parent, child) = crate::support::common::parent_and_child();
    for spec in [&parent, &child] {
        store.shards().ensure(&group, spec).await.unwrap();
    }
    // The parent is read to its end; a takes the child.
    let p = ConsumerId::new("p").unwrap();
    let lease = store
        .leases()
        .acquire(&parent.shard_id, &p, TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .mark_depleted(&lease, std::slice::from_ref(&child))
        .await
        .unwrap();
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    let me = ConsumerId::new("a").unwrap();
    let free = TakeFrom::Stale {
        counter: 0,
        expires: None,
        session: None,
    };
    store
        .leases()
        .give(&child.shard_id, &me, &free, None, TERM)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.tick(no_progress).await.unwrap().gained.len(), 1);

    // A rewind: the child moved to wait for its parent (its owner kept and
    // told), then the parent reopened.
    let seen = store.shards().get(&group, &child.shard_id).await.unwrap();
    let mut wait = PositionMove::to(Checkpoint::TrimHorizon);
    wait.evict = true;
    wait.wait_for = vec![parent.shard_id.clone()];
    assert!(store
        .checkpoints()
        .move_position(&group, &seen, &wait)
        .await
        .unwrap());
    let seen = store.shards().get(&group, &parent.shard_id).await.unwrap();
    let mut reopen = PositionMove::to(Checkpoint::TrimHorizon);
    reopen.evict = true;
    reopen.reopen = true;
    assert!(store
        .checkpoints()
        .move_position(&group, &seen, &reopen)
        .await
        .unwrap());
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(tick.lost, vec![child.shard_id.clone()]);
    assert!(tick.gained.is_empty(), "it waits: {tick:?}");
    assert!(a.tick(no_progress).await.unwrap().gained.is_empty());

    // The parent is read to its end again.
    let lease = store
        .leases()
        .acquire(&parent.shard_id, &p, TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .mark_depleted(&lease, std::slice::from_ref(&child))
        .await
        .unwrap();
    let counter = &ctx.aws.dynamodb_requests;
    let before = counter.snapshot();
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained, vec![child.shard_id.clone()]);
    assert_eq!(sent(counter, &before, "Query"), 0, "the group is not read");
}

/// Gives the free `shard` to consumer `a`, naming it on `a`'s item.
async fn give_to_a(store: &StateStore, shard: &ShardId) {
    let free = TakeFrom::Stale {
        counter: 0,
        expires: None,
        session: None,
    };
    store
        .leases()
        .give(shard, &ConsumerId::new("a").unwrap(), &free, None, TERM)
        .await
        .unwrap()
        .unwrap();
}

/// A store through the proxies of `faulty`, and a session `a`, registered
/// and holding the one shard given to it.
async fn holding_one(
    faulty: &crate::support::faulty::Faulty,
    name: &str,
) -> (StateStore, ConsumerSession, ShardId) {
    let store = faulty.ctx.store(name);
    let shard = seed_shards(&store, 1).await.remove(0);
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    give_to_a(&store, &shard).await;
    assert_eq!(
        a.tick(no_progress).await.unwrap().gained,
        vec![shard.clone()]
    );
    (store, a, shard)
}

/// An operator's move of `shard` to TRIM_HORIZON, its owner kept and told.
async fn operator_moves(store: &StateStore, shard: &ShardId) {
    use shardkeeper::state::{PositionMove, ShardScope};
    let seen = store.shards().get(&ShardScope::Group, shard).await.unwrap();
    let mut mv = PositionMove::to(Checkpoint::TrimHorizon);
    mv.evict = true;
    assert!(store
        .checkpoints()
        .move_position(&ShardScope::Group, &seen, &mv)
        .await
        .unwrap());
}

/// Names are acknowledged by shard. An operator's move names the shard on
/// the holder's item while the holder's acknowledgement of the give that
/// brought it is still to be sent; that heartbeat is applied and its answer
/// lost, and the SDK's retry finds the revocation without the name. The
/// holder stops the shard and still takes it up again from the moved
/// position (before, the shard stayed in its name unread for good: a stress
/// run through faults with an operator's reset lost records so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_lease_whose_name_an_acknowledgement_swallowed_is_taken_up_again() {
    use shardkeeper::state::ShardScope;
    let faulty = crate::support::faulty::Faulty::start(11).await;
    let (store, mut a, shard) = holding_one(&faulty, "pickup-swallowed").await;
    operator_moves(&store, &shard).await;

    faulty.dynamodb.lose_next_responses(1);
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    assert_eq!(tick.lost, vec![shard.clone()], "{tick:?}");
    let mut gained = tick.gained;
    if gained.is_empty() {
        gained = a.tick(no_progress).await.unwrap().gained;
    }
    assert_eq!(gained, vec![shard.clone()], "taken up again");
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.checkpoint, Some(Checkpoint::TrimHorizon));
    assert_eq!(a.lease(&shard).map(|l| l.counter), Some(state.counter));
}

/// A give is read, then an operator moves the shard before the take: the
/// take finds the counter moved, and the move's name merged into the
/// give's, which the next heartbeat acknowledges. That heartbeat is applied
/// and its answer lost, so the retry's answer shows no name (and a
/// revocation of a lease the session never held). The consumer reads the
/// shard again and takes it (before, it stayed in its name unread).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_moved_between_its_read_and_its_take_is_taken_at_the_next_tick() {
    use shardkeeper_local::{Faults, SlowRequests};
    let faulty = crate::support::faulty::Faulty::start(12).await;
    let store = faulty.ctx.store("pickup-raced");
    let direct = StateStore::new(faulty.direct.dynamodb.clone(), store.config().clone());
    let shard = seed_shards(&store, 1).await.remove(0);
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    give_to_a(&store, &shard).await;
    // The consumer's take (a conditional `SET #owner = :me` of its own)
    // waits at the proxy while the operator moves the shard.
    faulty.set_faults(&Faults {
        slow: Some(SlowRequests {
            operation: "UpdateItem".into(),
            body_contains: vec!["SET #owner = :me".into()],
            latency: Duration::from_millis(1500)..=Duration::from_millis(1500),
        }),
        ..Faults::none()
    });
    let ticking = tokio::spawn(async move {
        let tick = a.tick(no_progress).await.unwrap();
        (a, tick)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    operator_moves(&direct, &shard).await;
    let (mut a, tick) = ticking.await.unwrap();
    assert!(
        tick.gained.is_empty(),
        "the take found the shard moved: {tick:?}"
    );
    faulty.set_faults(&Faults::none());

    faulty.dynamodb.lose_next_responses(1);
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    assert_eq!(tick.gained, vec![shard.clone()], "{tick:?}");
    assert!(a.tick(no_progress).await.unwrap().gained.is_empty());
}

/// An operator's move names the shard on its holder's item again (merged
/// into the name of the give that brought it, not yet acknowledged) and
/// notes the revocation. The holder's next checkpoint is refused by the
/// moved counter and the session forgets the shard; its next heartbeat
/// acknowledges the name and its answer is lost, so the retry's answer
/// shows the revocation of a lease no longer held and no name. The shard,
/// still in the consumer's name, is read again and taken up (before, it
/// stayed in its name unread for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_lease_dropped_on_a_refused_checkpoint_is_taken_up_again() {
    use shardkeeper::state::ShardScope;
    let faulty = crate::support::faulty::Faulty::start(13).await;
    let (store, mut a, shard) = holding_one(&faulty, "pickup-refused").await;
    operator_moves(&store, &shard).await;
    let refused = a
        .checkpoint(&shard, &Checkpoint::after("42").unwrap(), None)
        .await
        .unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    assert!(a.lease(&shard).is_none());

    faulty.dynamodb.lose_next_responses(1);
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    let mut gained = tick.gained;
    if gained.is_empty() {
        gained = a.tick(no_progress).await.unwrap().gained;
    }
    assert_eq!(gained, vec![shard.clone()], "taken up again");
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.checkpoint, Some(Checkpoint::TrimHorizon));
    assert_eq!(a.lease(&shard).map(|l| l.counter), Some(state.counter));
}

/// The holder processed a shard to `P`; an operator moves it back (the
/// holder kept, its lease revoked at the old counter) and a rebalancer
/// claims it at the moved counter before the holder's next heartbeat. The
/// holder honours the claim of a lease it never held at that counter: it
/// hands over the moved position, not its own progress from before the
/// move (before, `P` was saved over the move, and the records between the
/// two were never read again).
#[tokio::test]
async fn a_claim_honoured_after_an_operators_move_hands_over_the_moved_position() {
    use shardkeeper::state::ShardScope;
    let ctx = ctx().await;
    let store = ctx.store("pickup-claim-moved");
    let shard = seed_shards(&store, 1).await.remove(0);
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    let mut b = session(&store, "b");
    b.tick(no_progress).await.unwrap();
    give_to_a(&store, &shard).await;
    assert_eq!(
        a.tick(no_progress).await.unwrap().gained,
        vec![shard.clone()]
    );
    let p = Checkpoint::after("1000").unwrap();
    a.checkpoint(&shard, &p, None).await.unwrap();

    operator_moves(&store, &shard).await;
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert!(store
        .leases()
        .claim(&shard, b.id(), a.id(), seen.counter)
        .await
        .unwrap());
    let progress = |_: &ShardId| Some((p.clone(), None));
    let tick = a.tick(progress).await.unwrap();
    assert_eq!(tick.lost, vec![shard.clone()], "{tick:?}");
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.owner.as_ref(), Some(b.id()), "handed over");
    assert_eq!(
        state.checkpoint,
        Some(Checkpoint::TrimHorizon),
        "the moved position, not the holder's progress from before the move"
    );
    assert_eq!(b.tick(no_progress).await.unwrap().gained, vec![shard]);
}

/// The full pickup (at registration, and after a give left unnamed) reads
/// the consumer's shards strongly consistent: an eventually consistent
/// read may miss a give, a hand-off or a move applied just before the
/// heartbeat, and the names it missed would be acknowledged unread
/// (before, it was the observers' eventually consistent read).
#[tokio::test]
async fn the_full_pickup_reads_strongly_consistent() {
    let ctx = ctx().await;
    let store = ctx.store("pickup-consistent");
    let shards = seed_shards(&store, 3).await;
    let counter = &ctx.aws.dynamodb_requests;
    let mut a = session(&store, "a");
    a.tick(no_progress).await.unwrap();
    give_to_a(&store, &shards[0]).await;
    // A give left unnamed besides: the session reads every shard.
    assert!(store
        .consumers()
        .notify_assigned(a.id(), &[])
        .await
        .unwrap());
    counter.start_log();
    let tick = a.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained, vec![shards[0].clone()]);
    let queries: Vec<serde_json::Value> = counter
        .take_log()
        .into_iter()
        .filter(|r| r.operation == "Query")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert!(!queries.is_empty(), "the group was read");
    for query in &queries {
        assert_eq!(query["ConsistentRead"], serde_json::json!(true), "{query}");
    }
}
