//! Parent before child on the real DynamoDB-compatible server: a child shard
//! is leasable only once every parent is depleted, however discovery races
//! with depletion.

use crate::support::common::{ctx, lease};
use shardkeeper::state::{Checkpoint, ConsumerId, ShardScope, ShardSpec};
use std::collections::BTreeSet;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(30);

fn cid(s: &str) -> ConsumerId {
    ConsumerId::new(s).unwrap()
}

#[tokio::test]
async fn children_are_not_leasable_until_every_parent_is_depleted() {
    let ctx = ctx().await;
    let store = ctx.store("parents");
    let group = ShardScope::Group;
    for p in ["shardId-p1", "shardId-p2"] {
        store
            .shards()
            .ensure(&group, &ShardSpec::new(p).unwrap())
            .await
            .unwrap();
    }
    let mut child = ShardSpec::new("shardId-child")
        .unwrap()
        .with_parents(&["shardId-p1", "shardId-p2"])
        .unwrap();
    child.starting_sequence = Some("500".parse().unwrap());
    store.shards().ensure(&group, &child).await.unwrap();
    let state = store.shards().get(&group, &child.shard_id).await.unwrap();
    let pending: BTreeSet<_> = state.pending_parents.iter().map(|p| p.as_str()).collect();
    assert_eq!(pending, BTreeSet::from(["shardId-p1", "shardId-p2"]));
    assert!(store
        .leases()
        .acquire(&child.shard_id, &cid("a"), TERM)
        .await
        .unwrap()
        .is_none());

    let p1 = store
        .leases()
        .acquire(&"shardId-p1".try_into().unwrap(), &cid("a"), TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .save(&p1, &Checkpoint::after("499").unwrap(), None)
        .await
        .unwrap();
    let done = store
        .checkpoints()
        .mark_depleted(&p1, std::slice::from_ref(&child))
        .await
        .unwrap();
    assert_eq!(done.children, vec![child.shard_id.clone()]);
    // Still blocked on p2, which never had a checkpoint.
    assert!(store
        .leases()
        .acquire(&child.shard_id, &cid("a"), TERM)
        .await
        .unwrap()
        .is_none());
    let p2 = store
        .leases()
        .acquire(&"shardId-p2".try_into().unwrap(), &cid("a"), TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .mark_depleted(&p2, std::slice::from_ref(&child))
        .await
        .unwrap();
    // Repeating it is harmless; the depleted parent can't be leased again.
    store
        .checkpoints()
        .mark_depleted(&p2, std::slice::from_ref(&child))
        .await
        .unwrap();
    assert!(store
        .leases()
        .acquire(&p2.shard_id, &cid("a"), TERM)
        .await
        .unwrap()
        .is_none());

    let lease = store
        .leases()
        .acquire(&child.shard_id, &cid("a"), TERM)
        .await
        .unwrap();
    assert!(
        lease.is_some(),
        "child leasable once both parents are depleted"
    );
    let state = store.shards().get(&group, &child.shard_id).await.unwrap();
    assert_eq!(
        state.checkpoint,
        Some(Checkpoint::AtSequence("500".parse().unwrap())),
        "child starts at its starting sequence number because p1 had a checkpoint"
    );
    let parent = store.shards().get(&group, &p1.shard_id).await.unwrap();
    assert!(parent.depleted);
    assert_eq!(parent.checkpoint, Some(Checkpoint::ShardEnd));
    assert_eq!(parent.owner, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_racing_with_depletion_never_strands_a_child() {
    let ctx = ctx().await;
    let store = ctx.store("child-race");
    let group = ShardScope::Group;
    for round in 0..12 {
        let parent = ShardSpec::new(&format!("shardId-p{round}")).unwrap();
        store.shards().ensure(&group, &parent).await.unwrap();
        let child = ShardSpec::new(&format!("shardId-c{round}"))
            .unwrap()
            .with_parents(&[parent.shard_id.as_str()])
            .unwrap();
        let lease = lease(&store, &parent.shard_id, "a").await;
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let (store, child) = (store.clone(), child.clone());
            tasks.spawn(async move {
                store
                    .shards()
                    .ensure(&ShardScope::Group, &child)
                    .await
                    .unwrap();
            });
        }
        let (s, c) = (store.clone(), child.clone());
        tasks.spawn(async move {
            s.checkpoints()
                .mark_depleted(&lease, std::slice::from_ref(&c))
                .await
                .unwrap();
        });
        tasks.join_all().await;
        let state = store.shards().get(&group, &child.shard_id).await.unwrap();
        assert!(state.pending_parents.is_empty(), "round {round}: {state:?}");
        assert!(state.is_leasable());
    }
}
