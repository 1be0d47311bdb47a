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

/// The rebalancer clears a child's wait for a parent its snapshot shows
/// depleted or without state. Its snapshot is separate eventually
/// consistent queries (each partition answers from its own replica), so a
/// child may show up beside no state of a parent created a moment before
/// it. The clear checks the parent itself: a parent that is there and not
/// depleted keeps its child waiting. Found by the simulator (seed 26 of the
/// sieges: a merge's child read before one of its parents).
#[tokio::test]
async fn a_childs_wait_survives_a_snapshot_that_misses_its_parent() {
    use shardkeeper::group::{execute, plan_rebalance, Action, Ages, RebalanceConfig};
    use shardkeeper::state::GroupPart;
    let ctx = ctx().await;
    let store = ctx.store("parent-unseen");
    ctx.start_group_item(&store).await;
    let group = ShardScope::Group;
    let (parent, child) = crate::support::common::parent_and_child();
    for spec in [&parent, &child] {
        store.shards().ensure(&group, spec).await.unwrap();
    }
    // A snapshot whose query of the parent's key came from a replica a
    // moment behind: the parent is not in it yet.
    let mut snapshot = store.observe_group(GroupPart::Leases).await.unwrap();
    snapshot.shards.retain(|s| s.shard_id != parent.shard_id);
    let actions = plan_rebalance(&snapshot, &Ages::default(), &RebalanceConfig::default());
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ClearPendingParent { .. })),
        "{actions:?}"
    );
    execute(&store, None, &actions, TERM).await.unwrap();
    let state = store.shards().get(&group, &child.shard_id).await.unwrap();
    assert_eq!(
        state.pending_parents,
        vec![parent.shard_id.clone()],
        "the child still waits for its parent"
    );
    assert!(store
        .leases()
        .acquire(&child.shard_id, &cid("a"), TERM)
        .await
        .unwrap()
        .is_none());

    // Depleted without its children known, the parent's wait is a
    // leftover, and the same clear goes through.
    let lease = lease(&store, &parent.shard_id, "p").await;
    store
        .checkpoints()
        .mark_depleted(&lease, &[])
        .await
        .unwrap();
    let snapshot = store.observe_group(GroupPart::Leases).await.unwrap();
    let actions = plan_rebalance(&snapshot, &Ages::default(), &RebalanceConfig::default());
    execute(&store, None, &actions, TERM).await.unwrap();
    let state = store.shards().get(&group, &child.shard_id).await.unwrap();
    assert!(state.pending_parents.is_empty(), "{actions:?}");
}

/// Refuses every `GetItem` while armed, before it is sent.
#[derive(Debug, Clone, Default)]
struct RefuseGetItem(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl aws_smithy_runtime_api::client::interceptors::Intercept for RefuseGetItem {
    fn name(&self) -> &'static str {
        "RefuseGetItem"
    }

    fn read_before_transmit(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef<'_>,
        _: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or_default();
        if self.0.load(std::sync::atomic::Ordering::SeqCst) && target.ends_with(".GetItem") {
            return Err("refused by the test".into());
        }
        Ok(())
    }
}

/// A depletion is the shard's own write: once it applied, the lease is gone
/// and the depletion succeeded, even if a child's write then fails (the
/// rebalancer makes the child leasable). Returned as an error, the worker
/// kept the lease, and its next checkpoint of the shard was refused as a
/// lost lease: the handler was told `lease_lost` for a shard it had read to
/// its end (the simulator's sieges, seed 16).
#[tokio::test]
async fn a_depletion_whose_childs_write_fails_still_ends_the_shard() {
    use shardkeeper::group::{execute, plan_rebalance, Ages, RebalanceConfig};
    use shardkeeper::state::{GroupPart, StateStore};
    let ctx = ctx().await;
    let refuse = RefuseGetItem::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        ctx.aws
            .dynamodb
            .config()
            .to_builder()
            .interceptor(refuse.clone())
            .build(),
    );
    let config = ctx.store("child-write-fails").config().clone();
    let store = StateStore::with_clock(client, config, std::sync::Arc::new(ctx.clock.clone()));
    ctx.start_group_item(&store).await;
    let group = ShardScope::Group;
    let (parent, child) = crate::support::common::parent_and_child();
    store.shards().ensure(&group, &parent).await.unwrap();
    let lease = lease(&store, &parent.shard_id, "a").await;
    // The child's state reads its parent first (`GetItem`): refused.
    refuse.0.store(true, std::sync::atomic::Ordering::SeqCst);
    let depleted = store
        .checkpoints()
        .mark_depleted(&lease, std::slice::from_ref(&child))
        .await
        .expect("the shard's write applied: the depletion succeeded");
    assert!(depleted.children.is_empty(), "{depleted:?}");
    refuse.0.store(false, std::sync::atomic::Ordering::SeqCst);
    let state = store.shards().get(&group, &parent.shard_id).await.unwrap();
    assert!(state.depleted);
    assert_eq!(state.owner, None);
    // Made again, as a worker whose answer was lost would: still done.
    store
        .checkpoints()
        .mark_depleted(&lease, &[])
        .await
        .unwrap();

    // The rebalancer gives the child its state, not waiting for the
    // depleted parent, and it is leasable.
    store.shards().ensure(&group, &child).await.unwrap();
    let snapshot = store.observe_group(GroupPart::Leases).await.unwrap();
    let actions = plan_rebalance(&snapshot, &Ages::default(), &RebalanceConfig::default());
    execute(&store, None, &actions, TERM).await.unwrap();
    assert!(store
        .leases()
        .acquire(&child.shard_id, &cid("b"), TERM)
        .await
        .unwrap()
        .is_some());
}
