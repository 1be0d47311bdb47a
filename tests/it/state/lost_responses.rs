//! Writes whose answer is lost after DynamoDB applied them: the SDK sends
//! the request again, and the retry meets the first attempt's write. Each
//! write recognises "already done by me" and reports what it did, instead
//! of a lost lease or a failed lock. The proxy in front of DynamoDB applies
//! the next request and drops its answer (`lose_next_responses`). And a
//! write that fails past the retries is not taken for a lost lease.

use crate::support::common::{register, seed_shards};
use crate::support::faulty::Faulty;
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, EfoName, Released, ShardScope, StateStore, TakeFrom,
};
use std::time::Duration;

const TERM: Duration = Duration::from_secs(30);

fn cid(s: &str) -> ConsumerId {
    ConsumerId::new(s).unwrap()
}

fn free(counter: u64) -> TakeFrom {
    TakeFrom::Stale {
        counter,
        expires: None,
        session: None,
    }
}

async fn setup(name: &str) -> (Faulty, StateStore) {
    let faulty = Faulty::start(7).await;
    let store = faulty.ctx.store(name);
    (faulty, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_take_release_and_hand_off_find_their_own_writes() {
    let (faulty, store) = setup("lost-lease").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    register(&store, "a").await;
    register(&store, "b").await;

    // Take: applied, answer lost, retried.
    faulty.dynamodb.lose_next_responses(1);
    let lease = store
        .leases()
        .take(&shard, &cid("a"), &free(0), Some("token-a"), TERM)
        .await
        .unwrap()
        .expect("the retry recognises the take it made");
    assert_eq!((lease.owner.clone(), lease.counter), (cid("a"), 1));
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    store
        .checkpoints()
        .save(&lease, &Checkpoint::after("10").unwrap(), None)
        .await
        .expect("the lease the retry reported is the one stored");

    // Hand-off to a claimant: applied, answer lost, retried.
    assert!(store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), 1)
        .await
        .unwrap());
    faulty.dynamodb.lose_next_responses(2);
    let released = store.leases().release(&lease, TERM).await.unwrap();
    assert_eq!(released, Released::HandedOff(cid("b")));
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!((state.owner, state.counter), (Some(cid("b")), 2));

    // Plain release: applied, answer lost, retried.
    let b = store
        .leases()
        .take(
            &shard,
            &cid("b"),
            &TakeFrom::Named {
                counter: 2,
                expires: None,
                from_another: false,
            },
            Some("token-b"),
            TERM,
        )
        .await
        .unwrap()
        .unwrap();
    faulty.dynamodb.lose_next_responses(1);
    assert_eq!(
        store.leases().release(&b, TERM).await.unwrap(),
        Released::Free
    );
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!((state.owner, state.counter), (None, 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_by_another_process_under_the_same_id_is_not_mistaken_for_ones_own() {
    let (_faulty, store) = setup("same-id").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    // The older process took the shard at counter 0.
    store
        .leases()
        .take(&shard, &cid("a"), &free(0), Some("old-process"), TERM)
        .await
        .unwrap()
        .unwrap();
    // The newer one, deciding on the same counter, must not read the older
    // one's take as its own (same id, next counter): only its token tells.
    let mine = store
        .leases()
        .take(&shard, &cid("a"), &free(0), Some("new-process"), TERM)
        .await
        .unwrap();
    assert_eq!(mine, None);
}

/// A record's failed attempt, counted in one invocation (named by its
/// request id), is counted once: the count's answer lost and the write sent
/// again, or the count sent twice in the invocation. Before, each sending
/// added one, so a record could be parked an attempt early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_counted_once_whatever_is_sent_again() {
    use shardkeeper::state::{RecordKey, SequenceNumber};
    let (faulty, store) = setup("lost-attempt").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    let key = RecordKey::in_shard(shard, SequenceNumber::new("42").unwrap(), 0);
    let count = |attempt: &'static str| {
        let (store, key) = (store.clone(), key.clone());
        async move {
            store
                .record_state()
                .record_attempt(&key, TERM, Some(attempt))
                .await
                .unwrap()
        }
    };
    faulty.dynamodb.lose_next_responses(1);
    assert_eq!(count("req-1").await, 1, "the retry finds its own count");
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    assert_eq!(count("req-1").await, 1, "the same invocation again");
    assert_eq!(count("req-2").await, 2, "the next invocation counts");
    // Without a name, each call counts (a shard worker's retries).
    let plain = store
        .record_state()
        .record_attempt(&key, TERM, None)
        .await
        .unwrap();
    assert_eq!(plain, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_lock_and_release_of_an_efo_consumer_find_their_own_writes() {
    let (faulty, store) = setup("lost-efo").await;
    let name = EfoName::new("pool-00").unwrap();
    assert!(store
        .efo_consumers()
        .register(
            &name,
            "arn:aws:kinesis:us-east-1:1:stream/s/consumer/pool-00:1"
        )
        .await
        .unwrap());
    let efo = store.efo_consumers().list().await.unwrap().remove(0);
    faulty.dynamodb.lose_next_responses(1);
    let lock = store
        .efo_consumers()
        .lock(&efo, &cid("a"))
        .await
        .unwrap()
        .expect("the retry recognises the lock it took");
    assert_eq!(lock.lock_counter, efo.lock_counter + 1);
    // Another consumer deciding on the same state does not get it.
    assert!(store
        .efo_consumers()
        .lock(&efo, &cid("b"))
        .await
        .unwrap()
        .is_none());
    faulty.dynamodb.lose_next_responses(1);
    assert!(store.efo_consumers().release(&lock).await.unwrap());
    let pool = store.efo_consumers().list().await.unwrap();
    assert_eq!(pool[0].used_by, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_heartbeat_that_registered_still_reports_the_registration() {
    let (faulty, store) = setup("lost-beat").await;
    let me = ConsumerInfo::for_this_process(cid("a"), store.now());
    let first = store
        .consumers()
        .heartbeat_as(&me, "token-a", true, &Default::default())
        .await
        .unwrap();
    assert!(first.registered);
    // The reaper removes the consumer; its next heartbeat re-registers it,
    // but the answer is lost and the retry finds the consumer registered.
    assert!(store.consumers().deregister(&me.id).await.unwrap());
    faulty.dynamodb.lose_next_responses(1);
    let beat = store
        .consumers()
        .heartbeat_as(&me, "token-a", false, &Default::default())
        .await
        .unwrap();
    // The registration's identity shows what happened.
    assert_ne!(beat.incarnation, first.incarnation, "{beat:?}");
    let again = store
        .consumers()
        .heartbeat_as(&me, "token-a", false, &Default::default())
        .await
        .unwrap();
    assert_eq!(again.incarnation, beat.incarnation);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_depletion_that_fails_transiently_keeps_the_lease_and_is_made_again() {
    let (faulty, store) = setup("lost-deplete").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    let info = ConsumerInfo::for_this_process(cid("a"), store.now());
    let mut session = shardkeeper::consumer::ConsumerSession::new(store.clone(), info, TERM);
    session.tick(|_| None).await.unwrap();
    store
        .leases()
        .take(&shard, &cid("a"), &free(0), None, TERM)
        .await
        .unwrap()
        .unwrap();
    assert!(store
        .consumers()
        .notify_assigned(&cid("a"), std::slice::from_ref(&shard))
        .await
        .unwrap());
    let tick = session.tick(|_| None).await.unwrap();
    assert_eq!(tick.gained, vec![shard.clone()]);

    // The table fails past the retries: not a lost lease.
    let failing = crate::support::faulty::every_request_fails();
    faulty.dynamodb.set_faults(failing).unwrap();
    let err = session.complete_shard(&shard, &[]).await.unwrap_err();
    faulty
        .dynamodb
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    assert!(err.is_transient() && !err.is_lease_lost(), "{err}");
    assert!(session.lease(&shard).is_some(), "the lease is kept");
    // Made again: depletion is idempotent.
    session.complete_shard(&shard, &[]).await.unwrap();
    assert!(session.lease(&shard).is_none());
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert!(state.depleted && state.owner.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_tick_that_fails_part_way_reports_the_leases_it_took_at_the_next_tick() {
    let (faulty, store) = setup("owed").await;
    let shards = seed_shards(&store, 2).await;
    // Both shards are given to "a" (as the rebalancer does).
    for shard in &shards {
        store
            .leases()
            .take(shard, &cid("a"), &free(0), None, TERM)
            .await
            .unwrap()
            .unwrap();
    }
    let info = ConsumerInfo::for_this_process(cid("a"), store.now());
    let mut session = shardkeeper::consumer::ConsumerSession::new(store.clone(), info, TERM);
    // Its first tick: the read of the stream item (for the upgrade
    // window), the heartbeat, the read of its shards (as an observer reads
    // the leases: two ranges of the home key and a Query per bucket, or two
    // of the one key) and the first take go through; every attempt of the
    // second take is applied and unanswered, so the tick fails after
    // taking the first shard.
    let buckets = usize::from(crate::support::common::test_buckets().count());
    let reads = if buckets == 1 { 2 } else { 2 + buckets };
    faulty.dynamodb.lose_responses_after(3 + reads as u64, 10);
    let err = session.tick(|_| None).await.unwrap_err();
    faulty.dynamodb.lose_next_responses(0);
    assert!(err.is_transient(), "{err}");
    assert_eq!(session.leases().count(), 1, "the first take went through");
    // The next tick reports it, and takes up the second.
    let tick = session.tick(|_| None).await.unwrap();
    let mut gained = tick.gained.clone();
    gained.sort();
    assert_eq!(gained, shards, "{tick:?}");
    assert_eq!(session.leases().count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_that_fails_part_way_reports_the_shard_lost_so_it_is_read_no_more() {
    let (faulty, store) = setup("hand-over-fails").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    store
        .leases()
        .take(&shard, &cid("a"), &free(0), None, TERM)
        .await
        .unwrap()
        .unwrap();
    let info = ConsumerInfo::for_this_process(cid("a"), store.now());
    let mut session = shardkeeper::consumer::ConsumerSession::new(store.clone(), info, TERM);
    let tick = session.tick(|_| None).await.unwrap();
    assert_eq!(tick.gained, vec![shard.clone()]);
    let counter = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap()
        .counter;
    assert!(store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), counter)
        .await
        .unwrap());
    // The heartbeat and the renewal (which finds the claim) go through; the
    // hand-over's checkpoint fails past the retries.
    faulty.dynamodb.lose_responses_after(2, 10);
    let progress = |_: &shardkeeper::state::ShardId| Some((Checkpoint::after("5").unwrap(), None));
    assert!(session.tick(progress).await.is_err());
    faulty.dynamodb.lose_next_responses(0);
    assert!(session.lease(&shard).is_none(), "no longer renewed");
    let tick = session.tick(|_| None).await.unwrap();
    assert_eq!(tick.lost, vec![shard], "{tick:?}");
}

/// A take from a stale session is one transaction: when its answer is lost
/// after it applied and the SDK sends it again, the retry is recognised as
/// this take (the lease is the taker's at the next counter), and the
/// revocation is noted on the old owner's item once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_take_from_a_stale_session_finds_its_own_write() {
    let (faulty, store) = setup("lost-revoke").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    register(&store, "a").await;
    let lease = store
        .leases()
        .take(&shard, &cid("a"), &free(0), Some("token-a"), TERM)
        .await
        .unwrap()
        .unwrap();
    let session = store
        .consumers()
        .get(&cid("a"))
        .await
        .unwrap()
        .unwrap()
        .session();
    let from = TakeFrom::Stale {
        counter: lease.counter,
        expires: Some(lease.expires),
        session: Some(session),
    };
    faulty.dynamodb.lose_next_responses(1);
    let taken = store
        .leases()
        .take(&shard, &cid("b"), &from, Some("token-b"), TERM)
        .await
        .unwrap()
        .expect("the retry recognises the take it made");
    assert_eq!((taken.owner, taken.counter), (cid("b"), lease.counter + 1));
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    let info = ConsumerInfo::for_this_process(cid("a"), store.now());
    let beat = store.consumers().heartbeat(&info).await.unwrap();
    assert_eq!(beat.revoked.len(), 1, "{beat:?}");
}

/// An operator's forced move of a registered owner's lease is one
/// transaction (the shard, and the owner's item told). Applied, its answer
/// lost, the retry carries the same client request token and DynamoDB
/// answers it as the first: the move is reported made, once (before, the
/// retry's condition failed on the counter the first attempt moved, the
/// move was reported "changed since read", and a re-run moved it again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_forced_move_finds_its_own_transaction() {
    use shardkeeper::state::PositionMove;
    let (faulty, store) = setup("lost-move").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    register(&store, "a").await;
    store
        .leases()
        .take(&shard, &cid("a"), &free(0), Some("token-a"), TERM)
        .await
        .unwrap()
        .unwrap();
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    let mut mv = PositionMove::to(Checkpoint::TrimHorizon);
    mv.evict = true;
    faulty.dynamodb.lose_next_responses(1);
    let moved = store
        .checkpoints()
        .move_position(&ShardScope::Group, &seen, &mv)
        .await
        .unwrap();
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    assert!(moved, "the retry is answered as the first attempt");
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.counter, seen.counter + 1, "moved once");
    assert_eq!(state.owner, Some(cid("a")));
    assert_eq!(state.checkpoint, Some(Checkpoint::TrimHorizon));
}

/// A give of a shard the consumer held before, applied before the
/// heartbeat that acknowledges the shard's earlier name: `given` is a set by
/// shard, so the new name merges into the one acknowledged and goes with it,
/// and with that heartbeat's answer lost its retry shows the item without
/// it. The session reads each name it acknowledged again after the
/// heartbeat when the shard is not held, and takes the shard. Before, it
/// stayed in the consumer's name, unread, for good (found by the
/// simulator: the sieges' seed 90, a shard completed, reopened by a rewind
/// and given back by the rebalancer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_merged_into_an_acknowledged_name_is_still_taken() {
    let (faulty, store) = setup("merged-name").await;
    let shard = seed_shards(&store, 1).await.remove(0);
    let info = ConsumerInfo::for_this_process(cid("a"), store.now());
    let mut session = shardkeeper::consumer::ConsumerSession::new(store.clone(), info, TERM);
    assert!(session.tick(|_| None).await.unwrap().gained.is_empty());
    let give = |counter: u64| {
        let (store, shard) = (store.clone(), shard.clone());
        async move {
            store
                .leases()
                .give(&shard, &cid("a"), &free(counter), None, TERM)
                .await
                .unwrap()
                .expect("given")
        }
    };
    give(0).await;
    assert_eq!(
        session.tick(|_| None).await.unwrap().gained,
        vec![shard.clone()]
    );
    // Read to its end; the name's acknowledgement waits for the next heartbeat.
    session.complete_shard(&shard, &[]).await.unwrap();
    // An operator reopens it (a rewind), and it is given to "a" again.
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    let mut reopen = shardkeeper::state::PositionMove::to(Checkpoint::TrimHorizon);
    reopen.evict = true;
    reopen.reopen = true;
    assert!(store
        .checkpoints()
        .move_position(&ShardScope::Group, &seen, &reopen)
        .await
        .unwrap());
    give(seen.counter + 1).await;
    // The heartbeat that acknowledges the name (the tick's first request):
    // applied, its answer lost, retried.
    faulty.dynamodb.lose_next_responses(1);
    let tick = session.tick(|_| None).await.unwrap();
    faulty.dynamodb.lose_next_responses(0);
    assert_eq!(faulty.dynamodb.counts().lost_responses, 1);
    let gained = if tick.gained.is_empty() {
        session.tick(|_| None).await.unwrap().gained
    } else {
        tick.gained
    };
    assert_eq!(
        gained,
        vec![shard.clone()],
        "the shard given again was never taken"
    );
}
