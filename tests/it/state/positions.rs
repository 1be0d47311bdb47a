//! DynamoDB Streams positions, against a real table stream of the DynamoDB server.

use crate::support::common::{create_stream_table, ctx};
use shardkeeper::state::{ShardId, StateError, StoredShardPosition};

#[tokio::test]
async fn shard_positions_are_saved_restored_and_removed() {
    let ctx = ctx().await;
    let (table, stream_arn) = create_stream_table(&ctx.aws).await;
    let described = ctx
        .aws
        .streams
        .describe_stream()
        .stream_arn(&stream_arn)
        .send()
        .await
        .unwrap();
    let shards = described.stream_description().unwrap().shards().to_vec();
    assert!(!shards.is_empty());
    let shard_id = shards[0].shard_id().unwrap().to_owned();

    let store = ctx.store(&table);
    let start =
        StoredShardPosition::new(&stream_arn, &shard_id, "TRIM_HORIZON", None, None).unwrap();
    store.positions().save(&start).await.unwrap();
    let loaded = store.positions().load().await.unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].iterator_type, "TRIM_HORIZON");
    assert_eq!(loaded[0].stream_arn, stream_arn);

    let moved = StoredShardPosition::new(
        &stream_arn,
        &shard_id,
        "AFTER_SEQUENCE_NUMBER",
        Some("000000000000000000042"),
        Some("shardId-parent"),
    )
    .unwrap();
    store.positions().save(&moved).await.unwrap();
    let loaded = store.positions().load().await.unwrap();
    assert_eq!(loaded[0].sequence_number.as_ref().unwrap().as_str(), "42");
    assert_eq!(
        loaded[0].parent_shard_id.as_ref().unwrap().as_str(),
        "shardId-parent"
    );
    // Seeking back to a time-based start replaces the position and drops the sequence number.
    store
        .positions()
        .save(&StoredShardPosition::new(&stream_arn, &shard_id, "LATEST", None, None).unwrap())
        .await
        .unwrap();
    let loaded = store.positions().load().await.unwrap();
    assert_eq!(loaded[0].iterator_type, "LATEST");
    assert!(loaded[0].sequence_number.is_none() && loaded[0].parent_shard_id.is_none());

    assert!(store
        .positions()
        .remove(&ShardId::new(&shard_id).unwrap())
        .await
        .unwrap());
    assert!(store.positions().load().await.unwrap().is_empty());

    for (iter, seq) in [
        ("AT_TIMESTAMP", None),
        ("AFTER_SEQUENCE_NUMBER", None),
        ("LATEST", Some("1")),
    ] {
        let err = StoredShardPosition::new(&stream_arn, &shard_id, iter, seq, None).unwrap_err();
        assert!(
            matches!(err, StateError::Validation { .. }),
            "{iter}: {err}"
        );
    }
}
