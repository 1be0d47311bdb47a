//! A closed, fully read shard's state is kept as long as the stream keeps
//! its records, and never created again once removed: the reaper takes the
//! stream's own retention when it is longer than the configured one, and
//! discovery does not re-create a listed closed shard whose child has
//! state (it would be read again from its first record, after its
//! children).

use crate::support::common::{create_stream, ctx, lease, list_shards, rebalancer, split_first};
use shardkeeper::functions::Reaper;
use shardkeeper::group::ReapConfig;
use shardkeeper::state::ShardSpec;
use std::time::Duration;

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_read_parent_stays_removed_and_is_kept_for_the_streams_own_retention() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    // The stream keeps records 48 hours; the reaper is configured with the
    // default 24 (an existing stream whose retention was raised by hand).
    ctx.aws
        .kinesis
        .increase_stream_retention_period()
        .stream_name(&stream)
        .retention_period_hours(48)
        .send()
        .await
        .unwrap();
    let store = ctx.store(&stream);
    crate::support::common::start_group(&ctx, &store).await;
    let rebalancer = rebalancer(&ctx.aws, &store);
    rebalancer.tick().await.unwrap();
    let parent = split_first(&ctx.aws, &stream).await;
    rebalancer.tick().await.unwrap();
    // The parent read to its end: depleted, its children free to read.
    let children: Vec<ShardSpec> = list_shards(&ctx.aws, &stream)
        .await
        .iter()
        .filter(|s| s.parent_shard_id() == Some(parent.shard_id()))
        .map(|s| ShardSpec::from_kinesis(s).unwrap())
        .collect();
    assert_eq!(children.len(), 2);
    let held = lease(&store, &parent.shard_id().try_into().unwrap(), "reader").await;
    store
        .checkpoints()
        .mark_depleted(&held, &children)
        .await
        .unwrap();
    let reaper = Reaper::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        ReapConfig::default().retention(24 * HOUR),
    );
    let has_parent = || async {
        store
            .load_group()
            .await
            .unwrap()
            .shards
            .iter()
            .any(|s| s.shard_id.as_str() == parent.shard_id())
    };

    // Past the configured retention, within the stream's: kept.
    ctx.clock.advance(25 * HOUR);
    reaper.tick().await.unwrap();
    assert!(has_parent().await, "removed before the stream's 48 hours");

    // Past the stream's retention: removed, and discovery, which still
    // finds it listed, does not create it again.
    ctx.clock.advance(24 * HOUR);
    let removed = reaper.tick().await.unwrap();
    assert_eq!(
        removed
            .execution
            .applied(shardkeeper::group::ActionKind::RemoveShard),
        1,
        "{removed:?}"
    );
    assert!(!has_parent().await);
    assert!(list_shards(&ctx.aws, &stream)
        .await
        .iter()
        .any(|s| s.shard_id() == parent.shard_id()));
    let tick = rebalancer.tick().await.unwrap();
    assert!(tick.discovery.created.is_empty(), "{:?}", tick.discovery);
    assert!(!has_parent().await, "the read parent came back");
}

/// The stream's retention is read only when a removal is planned. A stream
/// that is gone keeps the configured retention: the reaper's tick neither
/// fails on it nor keeps the state forever.
#[tokio::test]
async fn a_gone_streams_read_shards_are_removed_after_the_configured_retention() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    crate::support::common::start_group(&ctx, &store).await;
    let shard = crate::support::common::seed_shards(&store, 1)
        .await
        .remove(0);
    let held = lease(&store, &shard, "reader").await;
    store.checkpoints().mark_depleted(&held, &[]).await.unwrap();
    ctx.aws
        .kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .unwrap();
    let reaper = Reaper::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        ReapConfig::default().retention(24 * HOUR),
    );
    ctx.clock.advance(25 * HOUR);
    let tick = reaper.tick().await.unwrap();
    assert_eq!(
        tick.execution
            .applied(shardkeeper::group::ActionKind::RemoveShard),
        1,
        "{tick:?}"
    );
}
