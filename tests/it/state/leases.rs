//! Shard leases on the real DynamoDB-compatible server: races, fencing, hand-off, expiry.

use crate::support::common::{ctx, lease, register, seed_shards};
use shardkeeper::state::{
    Acks, Checkpoint, ConsumerId, ConsumerInfo, Released, Revocation, SessionSeen, ShardScope,
    StateError, TakeFrom,
};
use std::time::Duration;

const TERM: Duration = Duration::from_secs(30);

fn cid(s: &str) -> ConsumerId {
    ConsumerId::new(s).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_consumers_racing_for_one_lease_exactly_one_wins() {
    let ctx = ctx().await;
    let store = ctx.store("race");
    let shards = seed_shards(&store, 4).await;
    for shard in &shards {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..32 {
            let store = store.clone();
            let shard = shard.clone();
            tasks.spawn(async move {
                let me = cid(&format!("c{i}"));
                store.leases().acquire(&shard, &me, TERM).await.unwrap()
            });
        }
        let winners: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "winners for {shard}: {winners:?}");
        let owner = store.leases().get_owner(shard).await.unwrap();
        assert_eq!(owner.as_ref(), Some(&winners[0].owner));
        assert_eq!(winners[0].counter, 1);
    }
    assert!(store.stats().lost_conditions >= 4 * 31);
}

#[tokio::test]
async fn a_consumer_whose_lease_was_taken_cannot_renew_checkpoint_or_release() {
    let ctx = ctx().await;
    let store = ctx.store("fence");
    let shard = seed_shards(&store, 1).await.remove(0);
    let old = lease(&store, &shard, "a").await;
    // The lease expires; b takes it.
    ctx.clock.advance(TERM + Duration::from_secs(1));
    let new = lease(&store, &shard, "b").await;
    assert_eq!(new.counter, old.counter + 1);

    let cp = Checkpoint::after("100").unwrap();
    for err in [
        store.leases().renew(&old, TERM).await.unwrap_err(),
        store.checkpoints().save(&old, &cp, None).await.unwrap_err(),
        store.leases().release(&old, TERM).await.unwrap_err(),
        store
            .checkpoints()
            .mark_depleted(&old, &[])
            .await
            .unwrap_err(),
    ] {
        match &err {
            StateError::LeaseLost { shard_id, reason } => {
                assert_eq!(shard_id, shard.as_str());
                assert!(reason.contains("held by b"), "{reason}");
            }
            other => panic!("expected LeaseLost, got {other:?}"),
        }
    }
    // The new owner's work is untouched and it can go on.
    assert!(store
        .checkpoints()
        .fetch(&ShardScope::Group, &shard)
        .await
        .is_err());
    store.checkpoints().save(&new, &cp, Some(5)).await.unwrap();
    store.leases().renew(&new, TERM).await.unwrap();
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.checkpoint, Some(cp));
    assert_eq!(state.checkpoint_arrival, Some(5));
}

#[tokio::test]
async fn a_live_lease_is_not_acquirable_until_it_expires() {
    let ctx = ctx().await;
    let store = ctx.store("expiry");
    let shard = seed_shards(&store, 1).await.remove(0);
    let lease = lease(&store, &shard, "a").await;
    assert_eq!(lease.expires, ctx.clock_now() + 30_000);
    assert!(store
        .leases()
        .acquire(&shard, &cid("b"), TERM)
        .await
        .unwrap()
        .is_none());
    ctx.clock.advance(Duration::from_secs(20));
    let renewed = store.leases().renew(&lease, TERM).await.unwrap();
    assert!(renewed.claim.is_none());
    assert_eq!(
        renewed.lease.counter, lease.counter,
        "renewal does not move the fence"
    );
    ctx.clock.advance(Duration::from_secs(20));
    assert!(store
        .leases()
        .acquire(&shard, &cid("b"), TERM)
        .await
        .unwrap()
        .is_none());
    ctx.clock.advance(Duration::from_secs(11));
    assert!(store
        .leases()
        .acquire(&shard, &cid("b"), TERM)
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn claim_is_honoured_at_renewal_and_release_hands_off() {
    let ctx = ctx().await;
    let store = ctx.store("claim");
    let shard = seed_shards(&store, 1).await.remove(0);
    let lease = lease(&store, &shard, "a").await;
    register(&store, "a").await;
    register(&store, "b").await;
    // Claims with a stale counter, by the owner itself, or twice are refused.
    assert!(!store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), lease.counter + 1)
        .await
        .unwrap());
    assert!(!store
        .leases()
        .claim(&shard, &cid("a"), &cid("a"), lease.counter)
        .await
        .unwrap());
    assert!(store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), lease.counter)
        .await
        .unwrap());
    assert!(!store
        .leases()
        .claim(&shard, &cid("c"), &cid("a"), lease.counter)
        .await
        .unwrap());

    let renewal = store.leases().renew(&lease, TERM).await.unwrap();
    let claim = renewal.claim.expect("owner sees the claim");
    assert_eq!(claim.by, cid("b"));
    store
        .checkpoints()
        .save(&lease, &Checkpoint::after("7").unwrap(), None)
        .await
        .unwrap();
    assert_eq!(
        store.leases().release(&lease, TERM).await.unwrap(),
        Released::HandedOff(cid("b"))
    );
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.owner, Some(cid("b")));
    assert_eq!(state.counter, lease.counter + 1);
    assert!(state.claim.is_none());
    assert_eq!(state.checkpoint, Some(Checkpoint::after("7").unwrap()));
    let owned = store.leases().owned_shards(&cid("b")).await.unwrap();
    assert_eq!(owned.len(), 1);
    // The claimant was told in the hand-off's own write.
    let b = shardkeeper::state::ConsumerInfo::for_this_process(cid("b"), store.now());
    let beat = store.consumers().heartbeat(&b).await.unwrap();
    assert!(beat.given.contains(&shard), "{beat:?}");
    // The old owner is fenced out.
    assert!(store
        .leases()
        .renew(&lease, TERM)
        .await
        .unwrap_err()
        .is_lease_lost());
}

#[tokio::test]
async fn forced_take_on_the_renewal_seen_and_plain_release() {
    let ctx = ctx().await;
    let store = ctx.store("take");
    let shard = seed_shards(&store, 1).await.remove(0);
    let lease = lease(&store, &shard, "a").await;
    register(&store, "a").await;
    assert!(store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), lease.counter)
        .await
        .unwrap());
    // The owner never honours it nor renews: the rebalancer takes the lease
    // on the counter and the renewal it saw. A renewal since (another
    // stored expiry), or another counter, keeps it with its owner.
    assert!(store
        .leases()
        .take(
            &shard,
            &cid("b"),
            &TakeFrom::Claimed {
                counter: lease.counter,
                expires: Some(lease.expires - 1),
                session: None,
            },
            None,
            TERM
        )
        .await
        .unwrap()
        .is_none());
    assert!(store
        .leases()
        .take(
            &shard,
            &cid("b"),
            &TakeFrom::Claimed {
                counter: lease.counter + 5,
                expires: Some(lease.expires),
                session: None,
            },
            None,
            TERM
        )
        .await
        .unwrap()
        .is_none());
    let taken = store
        .leases()
        .take(
            &shard,
            &cid("b"),
            &TakeFrom::Claimed {
                counter: lease.counter,
                expires: Some(lease.expires),
                session: None,
            },
            None,
            TERM,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.owner, cid("b"));
    assert!(store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap()
        .claim
        .is_none());
    assert_eq!(
        store.leases().release(&taken, TERM).await.unwrap(),
        Released::Free
    );
    assert_eq!(store.leases().get_owner(&shard).await.unwrap(), None);
}

/// The reaper frees a lease only as it saw it: a renewal since (another
/// stored expiry) keeps it with its owner.
#[tokio::test]
async fn a_stale_lease_is_freed_only_if_not_renewed_since() {
    let ctx = ctx().await;
    let store = ctx.store("free-stale");
    let shard = seed_shards(&store, 1).await.remove(0);
    let seen = lease(&store, &shard, "a").await;
    ctx.clock.advance(Duration::from_secs(1));
    store.leases().renew(&seen, TERM).await.unwrap();
    assert!(!store.leases().free_stale(&seen).await.unwrap());
    assert_eq!(
        store.leases().get_owner(&shard).await.unwrap(),
        Some(cid("a"))
    );
    let now = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert!(store
        .leases()
        .free_stale(&now.lease().unwrap())
        .await
        .unwrap());
    assert_eq!(store.leases().get_owner(&shard).await.unwrap(), None);
}

#[tokio::test]
async fn remove_owner_remove_shard_and_listing() {
    let ctx = ctx().await;
    let store = ctx.store("listing");
    let shards = seed_shards(&store, 5).await;
    register(&store, "even").await;
    register(&store, "odd").await;
    for (i, shard) in shards.iter().enumerate() {
        let owner = cid(if i % 2 == 0 { "even" } else { "odd" });
        store
            .leases()
            .acquire(shard, &owner, TERM)
            .await
            .unwrap()
            .unwrap();
    }
    let workers = store.leases().list_active_workers().await.unwrap();
    assert_eq!(workers[&cid("even")].len(), 3);
    assert_eq!(workers[&cid("odd")].len(), 2);
    assert_eq!(
        store
            .leases()
            .owned_shards(&cid("odd"))
            .await
            .unwrap()
            .len(),
        2
    );

    assert!(!store
        .leases()
        .remove_owner(&shards[0], &cid("odd"), None)
        .await
        .unwrap());
    assert!(store
        .leases()
        .remove_owner(&shards[0], &cid("even"), None)
        .await
        .unwrap());
    assert_eq!(store.leases().get_owner(&shards[0]).await.unwrap(), None);

    assert!(store
        .shards()
        .remove(&ShardScope::Group, &shards[1])
        .await
        .unwrap());
    assert!(!store
        .shards()
        .remove(&ShardScope::Group, &shards[1])
        .await
        .unwrap());
    assert!(matches!(
        store.leases().get_owner(&shards[1]).await,
        Err(StateError::NotFound { .. })
    ));
    // A lease stays in its owner's name past its stored expiry (a consumer
    // takes up what it was given whatever the clocks say, and its session
    // keeps its leases); an owner no longer registered is no longer listed
    // as an active worker.
    ctx.clock.advance(TERM * 2);
    assert_eq!(
        store.leases().list_active_workers().await.unwrap()[&cid("even")].len(),
        2
    );
    assert!(store.consumers().deregister(&cid("even")).await.unwrap());
    assert!(store.consumers().deregister(&cid("odd")).await.unwrap());
    assert_eq!(
        store
            .leases()
            .owned_shards(&cid("even"))
            .await
            .unwrap()
            .len(),
        2
    );
    assert!(store
        .leases()
        .list_active_workers()
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_assignments_on_the_same_counter_give_the_lease_once() {
    let ctx = ctx().await;
    let store = ctx.store("take-race");
    let shard = seed_shards(&store, 1).await.remove(0);
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap()
        .counter;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..24 {
        let (store, shard) = (store.clone(), shard.clone());
        tasks.spawn(async move {
            store
                .leases()
                .take(
                    &shard,
                    &cid(&format!("c{i}")),
                    &TakeFrom::Stale {
                        counter: seen,
                        expires: None,
                        session: None,
                    },
                    Some(&format!("token-{i}")),
                    TERM,
                )
                .await
                .unwrap()
        });
    }
    let winners: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(
        store.leases().get_owner(&shard).await.unwrap(),
        Some(winners[0].owner.clone())
    );
}

#[tokio::test]
async fn a_consumer_whose_clock_runs_ahead_takes_leases_early_but_never_writes_over_another() {
    let ctx = ctx().await;
    let store = ctx.store("skew");
    let shard = seed_shards(&store, 1).await.remove(0);
    // b's clock runs 40 s ahead of a's (more than the 30 s lease term).
    let ahead = shardkeeper::state::ManualClock::new(ctx.clock_now() + 40_000);
    let skewed = shardkeeper::state::StateStore::with_clock(
        ctx.aws.dynamodb.clone(),
        store.config().clone(),
        std::sync::Arc::new(ahead),
    );
    let a = lease(&store, &shard, "a").await;
    store
        .checkpoints()
        .save(&a, &Checkpoint::after("10").unwrap(), None)
        .await
        .unwrap();
    // To b, a's fresh lease has already expired: it takes it early.
    let b = skewed
        .leases()
        .acquire(&shard, &cid("b"), TERM)
        .await
        .unwrap()
        .expect("taken early by the skewed clock");
    // a is fenced at once: its next write fails, and b's state stands.
    let err = store
        .checkpoints()
        .save(&a, &Checkpoint::after("20").unwrap(), None)
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    skewed
        .checkpoints()
        .save(&b, &Checkpoint::after("15").unwrap(), None)
        .await
        .unwrap();
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Group, &shard)
            .await
            .unwrap(),
        Checkpoint::after("15").unwrap()
    );
}

/// A take from a holder whose session was seen stale is one transaction on
/// the session seen: a heartbeat that lands before it fails the take (the
/// holder is alive), and one that lands after it carries the revocation in
/// its answer, so the holder never counts that heartbeat as keeping the
/// lease; its checkpoints are refused. A take from an owner seen
/// unregistered applies only while it still is.
#[tokio::test]
async fn a_take_from_a_stale_session_loses_to_an_earlier_heartbeat_and_is_told_to_a_later_one() {
    let ctx = ctx().await;
    let store = ctx.store("revoke");
    let shard = seed_shards(&store, 1).await.remove(0);
    let a = ConsumerInfo::for_this_process(cid("a"), store.now());
    let beat = |acks: Acks| {
        let (store, a) = (store.clone(), a.clone());
        async move {
            store
                .consumers()
                .heartbeat_as(&a, "token-a", false, &acks)
                .await
                .unwrap()
        }
    };
    beat(Acks::default()).await;
    let free = TakeFrom::Stale {
        counter: 0,
        expires: None,
        session: None,
    };
    let lease = store
        .leases()
        .take(&shard, &cid("a"), &free, Some("token-a"), TERM)
        .await
        .unwrap()
        .unwrap();
    let seen = || async {
        store
            .consumers()
            .get(&cid("a"))
            .await
            .unwrap()
            .unwrap()
            .session()
    };
    let from = |session| TakeFrom::Stale {
        counter: lease.counter,
        expires: Some(lease.expires),
        session: Some(session),
    };

    // Seen, then a heartbeat lands (even within the same millisecond): the
    // take on what was seen fails, and the holder keeps the lease.
    let before = seen().await;
    assert!(beat(Acks::default()).await.revoked.is_empty());
    let take = store
        .leases()
        .take(&shard, &cid("b"), &from(before), Some("token-b"), TERM)
        .await
        .unwrap();
    assert!(take.is_none(), "{take:?}");
    assert_eq!(
        store.leases().get_owner(&shard).await.unwrap(),
        Some(cid("a"))
    );

    // Seen again, and nothing lands before the take: it applies, and the
    // holder's next heartbeat is told, until it acknowledges it.
    let taken = store
        .leases()
        .take(
            &shard,
            &cid("b"),
            &from(seen().await),
            Some("token-b"),
            TERM,
        )
        .await
        .unwrap()
        .expect("taken");
    assert_eq!(taken.counter, lease.counter + 1);
    let revoked = Revocation {
        shard_id: shard.clone(),
        counter: lease.counter,
    };
    let told = beat(Acks::default()).await;
    assert_eq!(told.revoked, [revoked.clone()].into());
    let acks = Acks {
        revoked: told.revoked,
        ..Acks::default()
    };
    assert_eq!(
        beat(acks).await.revoked,
        [revoked].into(),
        "told until acknowledged"
    );
    assert!(beat(Acks::default()).await.revoked.is_empty());
    let err = store
        .checkpoints()
        .save(&lease, &Checkpoint::after("5").unwrap(), None)
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");

    // b is not registered. Seen so, then it registers: a take on its
    // absence fails; once it has left again, the take applies.
    let gone = SessionSeen::Unregistered { consumer: cid("b") };
    let from_b = TakeFrom::Stale {
        counter: taken.counter,
        expires: Some(taken.expires),
        session: Some(gone),
    };
    register(&store, "b").await;
    let take = store
        .leases()
        .take(&shard, &cid("c"), &from_b, None, TERM)
        .await
        .unwrap();
    assert!(take.is_none(), "{take:?}");
    assert!(store.consumers().deregister(&cid("b")).await.unwrap());
    let take = store
        .leases()
        .take(&shard, &cid("c"), &from_b, None, TERM)
        .await
        .unwrap();
    assert_eq!(take.map(|l| l.owner), Some(cid("c")));
}

/// `acquire` (README's five-line example, tools) follows sessions: a
/// registered consumer's lease is not taken when its stored expiry passes
/// (sessions do not renew it; the heartbeat keeps every lease), only once
/// the consumer is gone from the group (it left, or the reaper removed
/// it). A free lease and one's own are taken as before.
#[tokio::test]
async fn acquire_never_takes_a_registered_consumers_lease_by_its_stored_expiry() {
    let ctx = ctx().await;
    let store = ctx.store("acquire-sessions");
    let shards = seed_shards(&store, 1).await;
    register(&store, "a").await;
    let held = store
        .leases()
        .acquire(&shards[0], &cid("a"), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free lease");
    // The stored expiry passes; a's session (its consumer item) is live.
    ctx.clock.advance(Duration::from_secs(11));
    assert!(store
        .leases()
        .acquire(&shards[0], &cid("b"), TERM)
        .await
        .unwrap()
        .is_none());
    // Its own lease a takes up again (the counter moves on).
    let again = store
        .leases()
        .acquire(&shards[0], &cid("a"), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("its own lease");
    assert_eq!(again.counter, held.counter + 1);
    // Once a is gone from the group, b takes the expired lease, fenced.
    ctx.clock.advance(Duration::from_secs(11));
    assert!(store.consumers().deregister(&cid("a")).await.unwrap());
    let taken = store
        .leases()
        .acquire(&shards[0], &cid("b"), TERM)
        .await
        .unwrap()
        .expect("a gone consumer's expired lease");
    assert_eq!(taken.owner, cid("b"));
    assert!(matches!(
        store
            .checkpoints()
            .save(&again, &Checkpoint::after("1").unwrap(), None)
            .await,
        Err(StateError::LeaseLost { .. })
    ));
}

/// A hand-off goes only to a claimant still registered, with its note in
/// the same write: a claimant removed since its claim (it died, or left)
/// would hold the lease in a name no session picks up; the release frees
/// the shard instead, and the rebalancer gives it to a live consumer.
#[tokio::test]
async fn a_release_frees_a_shard_whose_claimant_is_gone_instead_of_handing_it_over() {
    let ctx = ctx().await;
    let store = ctx.store("claimant-gone");
    let shard = seed_shards(&store, 1).await.remove(0);
    let lease = lease(&store, &shard, "a").await;
    register(&store, "a").await;
    register(&store, "b").await;
    assert!(store
        .leases()
        .claim(&shard, &cid("b"), &cid("a"), lease.counter)
        .await
        .unwrap());
    assert!(store.consumers().deregister(&cid("b")).await.unwrap());
    assert_eq!(
        store.leases().release(&lease, TERM).await.unwrap(),
        Released::Free
    );
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!((state.owner, state.claim), (None, None));
    assert_eq!(state.counter, lease.counter + 1);
}

/// Two processes under one id, each taking the lease the other holds (each
/// a term after its own takeover, as `Holding::takes` waits): the one that
/// took the id over last takes it; the other, whose last heartbeat went
/// through before that takeover, must not take it back, since the newer
/// one may be processing under it. Found by the simulator (the sieges'
/// seed 26 with two replicas): the older process's tick had sent its
/// heartbeat just before the newer one took the id over, then took the
/// lease the newer one held, and both ran the shard's records.
#[tokio::test]
async fn a_take_from_another_process_of_the_id_needs_the_id_still_ones_own() {
    let ctx = ctx().await;
    let store = ctx.store("same-id-takes");
    let shard = seed_shards(&store, 1).await.remove(0);
    let info = ConsumerInfo::for_this_process(cid("dup"), store.now());
    let beat = |token: &'static str| {
        let (store, info) = (store.clone(), info.clone());
        async move {
            store
                .consumers()
                .heartbeat_as(&info, token, true, &Acks::default())
                .await
                .unwrap()
        }
    };
    let from_another = |lease: &shardkeeper::state::Lease| TakeFrom::Named {
        counter: lease.counter,
        expires: Some(lease.expires),
        from_another: true,
    };
    beat("older").await;
    let free = TakeFrom::Stale {
        counter: 0,
        expires: None,
        session: None,
    };
    let older = store
        .leases()
        .take(&shard, &cid("dup"), &free, Some("older"), TERM)
        .await
        .unwrap()
        .unwrap();
    assert!(beat("newer").await.took_over);
    let newer = store
        .leases()
        .take(
            &shard,
            &cid("dup"),
            &from_another(&older),
            Some("newer"),
            TERM,
        )
        .await
        .unwrap()
        .expect("the id is the newer one's: it takes the older one's lease");
    let taken_back = store
        .leases()
        .take(
            &shard,
            &cid("dup"),
            &from_another(&newer),
            Some("older"),
            TERM,
        )
        .await
        .unwrap();
    assert_eq!(
        taken_back, None,
        "taken from the process that took the id over"
    );
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(
        (state.holder.as_deref(), state.counter),
        (Some("newer"), newer.counter)
    );
}
