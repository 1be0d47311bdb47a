//! Checkpoints: never backwards, fenced, un-leased, typed not-found, and what they cost.

use crate::support::common::{ctx, seed_shards};
use proptest::prelude::*;
use shardkeeper::state::{
    cost, Checkpoint, CheckpointOutcome, ConsumerId, SequenceNumber, ShardId, ShardScope,
    StateError,
};
use std::time::Duration;

const TERM: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_checkpoint_never_moves_backwards() {
    let ctx = ctx().await;
    let store = ctx.store("monotonic");
    let shard = seed_shards(&store, 1).await.remove(0);
    let me = ConsumerId::new("a").unwrap();
    let lease = store
        .leases()
        .acquire(&shard, &me, TERM)
        .await
        .unwrap()
        .unwrap();
    // 10 < 9 as strings: compared as numbers here.
    let ten = Checkpoint::after("10").unwrap();
    assert_eq!(
        store.checkpoints().save(&lease, &ten, None).await.unwrap(),
        CheckpointOutcome::Stored
    );
    assert_eq!(
        store
            .checkpoints()
            .save(&lease, &Checkpoint::after("9").unwrap(), None)
            .await
            .unwrap(),
        CheckpointOutcome::Stale {
            current: ten.clone()
        }
    );
    // Equal is idempotent; sub-sequence numbers move it on.
    assert_eq!(
        store.checkpoints().save(&lease, &ten, None).await.unwrap(),
        CheckpointOutcome::Stored
    );
    let sub = Checkpoint::after_sub("10", 4).unwrap();
    assert_eq!(
        store.checkpoints().save(&lease, &sub, None).await.unwrap(),
        CheckpointOutcome::Stored
    );
    assert!(matches!(
        store.checkpoints().save(&lease, &ten, None).await.unwrap(),
        CheckpointOutcome::Stale { .. }
    ));
    // A sentinel can't rewind progress.
    assert!(matches!(
        store
            .checkpoints()
            .save(&lease, &Checkpoint::TrimHorizon, None)
            .await
            .unwrap(),
        CheckpointOutcome::Stale { .. }
    ));
    let big = "9".repeat(129);
    assert_eq!(
        store
            .checkpoints()
            .save(&lease, &Checkpoint::after(&big).unwrap(), None)
            .await
            .unwrap(),
        CheckpointOutcome::Stored
    );
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Group, &shard)
            .await
            .unwrap(),
        Checkpoint::after(&big).unwrap()
    );
}

#[tokio::test]
async fn fetch_checkpoint_is_a_typed_not_found() {
    let ctx = ctx().await;
    let store = ctx.store("notfound");
    let shard = seed_shards(&store, 1).await.remove(0);
    let err = store
        .checkpoints()
        .fetch(&ShardScope::Group, &shard)
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::NotFound { .. }), "{err}");
    let missing = ShardId::new("shardId-999").unwrap();
    let err = store
        .checkpoints()
        .fetch(&ShardScope::Group, &missing)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("shardId-999"), "{err}");
}

#[tokio::test]
async fn unleased_checkpoints_for_event_source_mappings_are_monotonic() {
    let ctx = ctx().await;
    let store = ctx.store("esm");
    let shard = ShardId::new("shardId-000000000007").unwrap();
    let scope = ShardScope::Group;
    let a = Checkpoint::after("49590338271490256608559692538361571095921575989136588898").unwrap();
    assert_eq!(
        store
            .checkpoints()
            .save_unleased(&scope, &shard, &a, Some(1_700_000_000_000))
            .await
            .unwrap(),
        CheckpointOutcome::Stored
    );
    let b = Checkpoint::after("49590338271490256608559692538361571095921575989136588897").unwrap();
    assert_eq!(
        store
            .checkpoints()
            .save_unleased(&scope, &shard, &b, None)
            .await
            .unwrap(),
        CheckpointOutcome::Stale { current: a.clone() }
    );
    let state = store.shards().get(&scope, &shard).await.unwrap();
    assert_eq!(state.checkpoint, Some(a));
    assert_eq!(state.checkpoint_arrival, Some(1_700_000_000_000));
    // Standalone scopes keep their own checkpoints apart.
    let own = ShardScope::Consumer(ConsumerId::new("solo").unwrap());
    assert!(matches!(
        store.checkpoints().fetch(&own, &shard).await,
        Err(StateError::NotFound { .. })
    ));
    store
        .checkpoints()
        .save_unleased(&own, &shard, &b, None)
        .await
        .unwrap();
    assert_eq!(store.checkpoints().fetch(&own, &shard).await.unwrap(), b);
}

#[tokio::test]
async fn a_checkpoint_is_one_request_of_one_write_unit_whatever_the_shard_count() {
    let ctx = ctx().await;
    for shards in [8usize, 1024] {
        let store = ctx.store("cost");
        let ids = seed_shards(&store, shards).await;
        let me = ConsumerId::new("worker-with-a-long-id-0123456789").unwrap();
        let lease = store
            .leases()
            .acquire(&ids[shards - 1], &me, TERM)
            .await
            .unwrap()
            .unwrap();
        let before = ctx.aws.dynamodb_requests.snapshot();
        let cp = Checkpoint::after_sub(&"4".repeat(56), 3).unwrap();
        store
            .checkpoints()
            .save(&lease, &cp, Some(1_700_000_000_000))
            .await
            .unwrap();
        let sent = ctx.aws.dynamodb_requests.since(&before);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent["UpdateItem"].requests, 1, "{shards} shards: {sent:?}");
        let pk = store
            .layout()
            .key_of(ids[shards - 1].as_str())
            .await
            .unwrap();
        let sk = format!("SHARD#{}", ids[shards - 1]);
        let item = crate::support::common::raw_item(&ctx, &pk, &sk)
            .await
            .unwrap();
        let size = cost::item_size(&item);
        assert_eq!(
            cost::write_units(size),
            1,
            "{shards} shards: item of {size} bytes"
        );
    }
}

fn seq_strategy() -> impl Strategy<Value = (String, u64)> {
    ("[1-9][0-9]{0,30}", 0u64..4)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Whatever order concurrent writers try checkpoints in, the stored one is
    /// the greatest attempted, and an attempt is refused iff it was behind.
    #[test]
    fn stored_checkpoint_is_the_maximum_attempted(attempts in prop::collection::vec(seq_strategy(), 1..24)) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async move {
            let ctx = ctx().await;
            let store = ctx.store("prop");
            let shard = ShardId::new("shardId-000000000000").unwrap();
            let scope = ShardScope::Group;
            let mut tasks = tokio::task::JoinSet::new();
            for (seq, sub) in attempts.clone() {
                let store = store.clone();
                let shard = shard.clone();
                tasks.spawn(async move {
                    let cp = Checkpoint::after_sub(&seq, sub).unwrap();
                    let outcome = store.checkpoints().save_unleased(&ShardScope::Group, &shard, &cp, None).await.unwrap();
                    (cp, outcome)
                });
            }
            let results = tasks.join_all().await;
            let max = attempts
                .iter()
                .map(|(s, sub)| (SequenceNumber::new(s).unwrap(), *sub))
                .max()
                .unwrap();
            let stored = store.checkpoints().fetch(&scope, &shard).await.unwrap();
            assert_eq!(stored, Checkpoint::After { sequence: max.0, sub_sequence: max.1 });
            for (cp, outcome) in results {
                if let CheckpointOutcome::Stale { current } = outcome {
                    assert!(current.order_key() > cp.order_key(), "refused {cp} though current was {current}");
                }
            }
        });
    }
}

#[tokio::test]
async fn standalone_scopes_deplete_without_leases() {
    let ctx = ctx().await;
    let store = ctx.store("solo-deplete");
    let scope = ShardScope::Consumer(ConsumerId::new("solo").unwrap());
    let parent = shardkeeper::state::ShardSpec::new("shardId-000000000000").unwrap();
    let mut child = shardkeeper::state::ShardSpec::new("shardId-000000000001")
        .unwrap()
        .with_parents(&["shardId-000000000000"])
        .unwrap();
    child.starting_sequence = Some("77".parse().unwrap());
    store.shards().ensure(&scope, &parent).await.unwrap();
    store.shards().ensure(&scope, &child).await.unwrap();
    assert!(!store
        .shards()
        .get(&scope, &child.shard_id)
        .await
        .unwrap()
        .is_leasable());
    store
        .checkpoints()
        .save_unleased(
            &scope,
            &parent.shard_id,
            &Checkpoint::after("70").unwrap(),
            None,
        )
        .await
        .unwrap();
    let done = store
        .checkpoints()
        .mark_depleted_unleased(&scope, &parent.shard_id, std::slice::from_ref(&child))
        .await
        .unwrap();
    assert_eq!(done.children_started, vec![child.shard_id.clone()]);
    let state = store.shards().get(&scope, &child.shard_id).await.unwrap();
    assert!(state.is_leasable());
    assert_eq!(
        state.checkpoint,
        Some(Checkpoint::AtSequence("77".parse().unwrap()))
    );
    // The group scope of the same store saw none of it.
    assert!(store
        .shards()
        .list(&ShardScope::Group)
        .await
        .unwrap()
        .is_empty());
    let missing = ShardId::new("shardId-404").unwrap();
    assert!(matches!(
        store
            .checkpoints()
            .mark_depleted_unleased(&scope, &missing, &[])
            .await,
        Err(StateError::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_reset_of_a_shard_without_state_creates_nothing() {
    let ctx = ctx().await;
    let store = ctx.store("reset-nothing");
    let shard = seed_shards(&store, 1).await.remove(0);
    let mut seen = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    seen.shard_id = ShardId::new("shardId-000000000099").unwrap();
    let applied = store
        .checkpoints()
        .reset(&ShardScope::Group, &seen, &Checkpoint::TrimHorizon, true)
        .await
        .unwrap();
    assert!(!applied);
    let err = store
        .shards()
        .get(&ShardScope::Group, &seen.shard_id)
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::NotFound { .. }), "{err}");
    // Every item of the group still reads as a shard.
    assert_eq!(
        store.shards().list(&ShardScope::Group).await.unwrap().len(),
        1
    );
}

/// What a mapping's consumer completed in a shard: the furthest progress
/// its batches and its floor stored there (another consumer's, another
/// shard's and another stream's left out), counting only what was stored
/// since the time asked for; a shard it never stored progress for has none.
#[tokio::test]
async fn a_mapping_consumers_shard_progress_is_its_furthest_batch_or_floor() {
    use shardkeeper::state::{BatchKey, BatchProgress, SequenceNumber};
    let ctx = ctx().await;
    let store = ctx.store("esm");
    let arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders";
    let batch = |consumer: &str, stream: &str, shard: &str, first: &str| BatchKey {
        consumer: consumer.to_owned(),
        stream: stream.to_owned(),
        shard: Some(shard.to_owned()),
        first_event_id: None,
        first: SequenceNumber::new(first).unwrap(),
    };
    let store_progress = |key: BatchKey, last: &str| {
        let store = store.clone();
        let cp = Checkpoint::after(last).unwrap();
        async move {
            store
                .record_state()
                .store_batch_progress(
                    &key,
                    &BatchProgress::new(cp, vec![], [7; 16]),
                    Duration::from_secs(3600),
                )
                .await
                .unwrap();
        }
    };
    let shard = "shardId-000000000001";
    store_progress(batch("orders", arn, shard, "10"), "19").await;
    store_progress(batch("orders", arn, shard, "20"), "29").await;
    // Others' progress: another consumer, shard and stream.
    store_progress(batch("audit", arn, shard, "30"), "99").await;
    store_progress(batch("orders", arn, "shardId-000000000002", "30"), "98").await;
    store_progress(
        batch(
            "orders",
            "arn:aws:kinesis:us-east-1:123456789012:stream/other",
            shard,
            "30",
        ),
        "97",
    )
    .await;

    let progress = |since| {
        let store = store.clone();
        async move {
            store
                .record_state()
                .shard_progress("orders", arn, shard, since)
                .await
                .unwrap()
        }
    };
    let all = progress(None).await;
    assert_eq!(all.furthest, Some(Checkpoint::after("29").unwrap()));
    assert_eq!((all.stored, all.counted), (2, 2));
    // Stored before the time asked for: stored, not counted.
    let later = progress(Some(store.now() + 1)).await;
    assert_eq!((later.furthest, later.stored, later.counted), (None, 2, 0));

    // A floor counts as progress, and the processor reads it back.
    let floor = Checkpoint::after("45").unwrap();
    store
        .record_state()
        .set_shard_floor("orders", arn, shard, &floor, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(progress(None).await.furthest, Some(floor.clone()));
    assert_eq!(
        store
            .record_state()
            .shard_floor("orders", arn, shard)
            .await
            .unwrap(),
        Some(floor)
    );
    // A shard the consumer never stored progress for.
    let none = store
        .record_state()
        .shard_progress("orders", arn, "shardId-000000000009", None)
        .await
        .unwrap();
    assert_eq!((none.furthest, none.stored), (None, 0));
}

/// An operator's move of a live lease's position (a forced reset, a rewind)
/// keeps the lease in its owner's name and, in the same transaction, tells
/// the owner: the lease at the counter it held is revoked and the shard is
/// given to it again by name. So no other consumer is given the shard while
/// the old holder may still be inside a batch, and no note can be lost
/// apart from the move. The old holder's writes at its counter are refused.
/// A lease whose owner is not registered ends with the move.
#[tokio::test]
async fn an_operators_move_keeps_the_lease_with_its_owner_and_tells_it_in_one_write() {
    use crate::support::common::{lease, register};
    use shardkeeper::state::{ConsumerInfo, Revocation};
    let ctx = ctx().await;
    let store = ctx.store("moves");
    let shards = seed_shards(&store, 2).await;
    register(&store, "a").await;
    register(&store, "b").await;
    let held = lease(&store, &shards[0], "a").await;
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shards[0])
        .await
        .unwrap();
    assert!(store
        .checkpoints()
        .reset(&ShardScope::Group, &seen, &Checkpoint::TrimHorizon, true)
        .await
        .unwrap());
    let moved = store
        .shards()
        .get(&ShardScope::Group, &shards[0])
        .await
        .unwrap();
    assert_eq!(
        moved.owner,
        Some(ConsumerId::new("a").unwrap()),
        "still a's"
    );
    assert_eq!(moved.counter, held.counter + 1);
    assert_eq!(moved.checkpoint, Some(Checkpoint::TrimHorizon));
    // The old holder's write at its counter is refused.
    assert!(matches!(
        store
            .checkpoints()
            .save(&held, &Checkpoint::after("9").unwrap(), None)
            .await,
        Err(StateError::LeaseLost { .. })
    ));
    // The rebalancer's plan, both consumers just seen live, gives the
    // shard to nobody (before, the move freed it for any consumer).
    let plan = shardkeeper::group::plan_rebalance(
        &store.load_group().await.unwrap(),
        &shardkeeper::group::Ages::default(),
        &shardkeeper::group::RebalanceConfig::default(),
    );
    assert!(
        !format!("{plan:?}").contains(shards[0].as_str()),
        "{plan:?}"
    );
    // a's next heartbeat tells it both: revoked at the old counter, given again.
    let beat = store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(
            ConsumerId::new("a").unwrap(),
            store.now(),
        ))
        .await
        .unwrap();
    assert!(beat.revoked.contains(&Revocation {
        shard_id: shards[0].clone(),
        counter: held.counter,
    }));
    assert!(beat.given.contains(&shards[0]));

    // A lease of an owner no longer registered ends with the move.
    let orphan = lease(&store, &shards[1], "gone").await;
    let seen = store
        .shards()
        .get(&ShardScope::Group, &shards[1])
        .await
        .unwrap();
    assert!(store
        .checkpoints()
        .reset(&ShardScope::Group, &seen, &Checkpoint::TrimHorizon, true)
        .await
        .unwrap());
    let freed = store
        .shards()
        .get(&ShardScope::Group, &shards[1])
        .await
        .unwrap();
    assert_eq!(freed.owner, None);
    assert_eq!(freed.counter, orphan.counter + 1);
}
