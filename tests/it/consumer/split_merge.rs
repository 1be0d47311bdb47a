//! Parent-before-child through a real SplitShard and MergeShards on the Kinesis server.

use crate::support::common::{create_stream, ctx, list_shards, wait_stream_active};
use shardkeeper::state::{Checkpoint, ConsumerId, EnsureShard, ShardId, ShardScope, ShardSpec};
use std::collections::BTreeMap;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(60);

async fn discover(ctx: &crate::support::common::Ctx, stream: &str) -> BTreeMap<String, ShardSpec> {
    list_shards(&ctx.aws, stream)
        .await
        .iter()
        .map(|s| {
            let spec = ShardSpec::from_kinesis(s).unwrap();
            (spec.shard_id.to_string(), spec)
        })
        .collect()
}

#[tokio::test]
async fn depletion_after_split_and_merge_releases_children_in_order() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let store = ctx.store(&stream);
    let scope = ShardScope::Group;
    let me = ConsumerId::new("worker").unwrap();
    for spec in discover(&ctx, &stream).await.values() {
        assert_eq!(
            store.shards().ensure(&scope, spec).await.unwrap(),
            EnsureShard::Created
        );
    }
    let before = discover(&ctx, &stream).await;
    let (first, second): (Vec<_>, Vec<_>) = (
        before.keys().take(1).cloned().collect(),
        before.keys().skip(1).take(1).cloned().collect(),
    );
    let (s0, s1) = (first[0].clone(), second[0].clone());

    // Put a record in s0 so its lease has a real checkpoint.
    let put = ctx
        .aws
        .kinesis
        .put_record()
        .stream_name(&stream)
        .partition_key("k")
        .explicit_hash_key("0")
        .data(aws_sdk_kinesis::primitives::Blob::new("hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(put.shard_id(), s0);

    // Split s0 at the middle of its hash range.
    let (lo, hi) = before[&s0].hash_range.clone().unwrap();
    let mid = (lo.parse::<u128>().unwrap() + hi.parse::<u128>().unwrap()) / 2;
    ctx.aws
        .kinesis
        .split_shard()
        .stream_name(&stream)
        .shard_to_split(&s0)
        .new_starting_hash_key(mid.to_string())
        .send()
        .await
        .unwrap();
    wait_stream_active(&ctx.aws, &stream).await;
    let after_split = discover(&ctx, &stream).await;
    let children: Vec<ShardSpec> = after_split
        .values()
        .filter(|s| s.parents.iter().any(|p| p.as_str() == s0))
        .cloned()
        .collect();
    assert_eq!(children.len(), 2, "{after_split:?}");
    // Discovery records the closed parent and creates children with s0 pending.
    assert_eq!(
        store
            .shards()
            .ensure(&scope, &after_split[&s0])
            .await
            .unwrap(),
        EnsureShard::Closed
    );
    for child in &children {
        store.shards().ensure(&scope, child).await.unwrap();
        assert!(store
            .leases()
            .acquire(&child.shard_id, &me, TERM)
            .await
            .unwrap()
            .is_none());
    }
    let parent = store
        .shards()
        .get(&scope, &ShardId::new(&s0).unwrap())
        .await
        .unwrap();
    assert!(
        parent.ending_sequence.is_some(),
        "closed shard recorded with its ending sequence number"
    );

    // The consumer reads s0 to its end, checkpoints, and depletes it.
    let lease = store
        .leases()
        .acquire(&parent.shard_id, &me, TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .save(
            &lease,
            &Checkpoint::after(put.sequence_number()).unwrap(),
            None,
        )
        .await
        .unwrap();
    let done = store
        .checkpoints()
        .mark_depleted(&lease, &children)
        .await
        .unwrap();
    assert_eq!(done.children_started.len(), 2);
    for child in &children {
        let state = store.shards().get(&scope, &child.shard_id).await.unwrap();
        assert!(state.is_leasable());
        assert_eq!(
            state.checkpoint,
            Some(Checkpoint::AtSequence(
                child.starting_sequence.clone().unwrap()
            ))
        );
    }

    // Merge s1 with its adjacent child: the merged shard waits for both parents.
    let s1_lo: u128 = after_split[&s1]
        .hash_range
        .as_ref()
        .unwrap()
        .0
        .parse()
        .unwrap();
    let adjacent = children
        .iter()
        .find(|c| c.hash_range.as_ref().unwrap().1.parse::<u128>().unwrap() + 1 == s1_lo)
        .expect("a child adjacent to s1")
        .clone();
    ctx.aws
        .kinesis
        .merge_shards()
        .stream_name(&stream)
        .shard_to_merge(adjacent.shard_id.as_str())
        .adjacent_shard_to_merge(&s1)
        .send()
        .await
        .unwrap();
    wait_stream_active(&ctx.aws, &stream).await;
    let after_merge = discover(&ctx, &stream).await;
    let merged = after_merge
        .values()
        .find(|s| s.parents.len() == 2)
        .expect("merged shard has two parents")
        .clone();
    for parent in &merged.parents {
        store
            .shards()
            .ensure(&scope, &after_merge[parent.as_str()])
            .await
            .unwrap();
    }
    store.shards().ensure(&scope, &merged).await.unwrap();
    let state = store.shards().get(&scope, &merged.shard_id).await.unwrap();
    assert_eq!(state.pending_parents.len(), 2, "{state:?}");
    for parent in &merged.parents {
        assert!(store
            .leases()
            .acquire(&merged.shard_id, &me, TERM)
            .await
            .unwrap()
            .is_none());
        let lease = store
            .leases()
            .acquire(parent, &me, TERM)
            .await
            .unwrap()
            .unwrap();
        store
            .checkpoints()
            .mark_depleted(&lease, std::slice::from_ref(&merged))
            .await
            .unwrap();
    }
    assert!(store
        .leases()
        .acquire(&merged.shard_id, &me, TERM)
        .await
        .unwrap()
        .is_some());
}
