//! Stream state: created once, kept, and reset when the Kinesis stream was re-created.

use crate::support::common::{ctx, seed_shards, wait_stream_active};
use shardkeeper::state::{
    kinesis_stream_summary, ConsumerId, ConsumerInfo, RetryPolicy, StartOptions, StreamInit,
    TableOptions,
};
use std::time::Duration;

#[tokio::test]
async fn state_is_reset_when_the_stream_is_recreated() {
    let ctx = ctx().await;
    let stream = crate::support::common::create_stream(&ctx.aws, 2).await;
    let retry = RetryPolicy::default();
    let created = kinesis_stream_summary(&ctx.aws.kinesis, &stream, &retry)
        .await
        .unwrap()
        .created;
    let store = ctx.store(&stream);
    let options = StartOptions {
        table: TableOptions {
            poll_interval: Duration::from_millis(50),
            ..TableOptions::default()
        },
        stream_created: created,
    };
    let report = store.start(&options).await.unwrap();
    assert_eq!(report.stream, StreamInit::Created);
    assert!(!report.table.created, "the run's table exists already");
    assert_eq!(
        store.start(&options).await.unwrap().stream,
        StreamInit::Existing
    );
    seed_shards(&store, 3).await;
    let me = ConsumerId::new("c").unwrap();
    store
        .heartbeat(&ConsumerInfo::for_this_process(me, 0))
        .await
        .unwrap();

    // Delete and re-create the stream under the same name.
    ctx.aws
        .kinesis
        .delete_stream()
        .stream_name(&stream)
        .send()
        .await
        .unwrap();
    let mut gone = false;
    for _ in 0..200 {
        if kinesis_stream_summary(&ctx.aws.kinesis, &stream, &retry)
            .await
            .is_err()
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "stream deleted");
    // Some servers keep creation times in whole seconds: re-create in the next second.
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(1_001 - ms % 1_000)).await;
    ctx.aws
        .kinesis
        .create_stream()
        .stream_name(&stream)
        .shard_count(1)
        .send()
        .await
        .unwrap();
    wait_stream_active(&ctx.aws, &stream).await;
    let recreated = kinesis_stream_summary(&ctx.aws.kinesis, &stream, &retry)
        .await
        .unwrap()
        .created;
    assert_ne!(recreated, created);

    // Two starts race on the reset: one resets, both end on the new state.
    let other = store.clone();
    let (a, b) = tokio::join!(store.init_stream(recreated), other.init_stream(recreated));
    let outcomes = [a.unwrap(), b.unwrap()];
    let resets: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, StreamInit::Reset { .. }))
        .collect();
    assert_eq!(resets.len(), 1, "{outcomes:?}");
    if let StreamInit::Reset {
        previous_created,
        deleted_items,
    } = resets[0]
    {
        assert_eq!(*previous_created, created);
        assert_eq!(*deleted_items, 5, "stream item, 3 shards, 1 consumer");
    }
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.stream.unwrap().stream_created, recreated);
    assert!(snapshot.shards.is_empty() && snapshot.consumers.is_empty());
}

#[tokio::test]
async fn unknown_stream_is_a_typed_not_found() {
    let ctx = ctx().await;
    let err = kinesis_stream_summary(
        &ctx.aws.kinesis,
        "no-such-stream-here",
        &RetryPolicy::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, shardkeeper::state::StateError::NotFound { .. }),
        "{err}"
    );
}

/// State written by a newer layout is refused at start with a clear error,
/// never read as if it were this one's.
#[tokio::test]
async fn state_of_a_newer_schema_is_refused_at_start() {
    let ctx = ctx().await;
    let store = ctx.store("schema-check");
    store.init_stream(1_000).await.unwrap();
    ctx.aws
        .dynamodb
        .update_item()
        .table_name(&ctx.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(store.partition_key().to_owned()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("STREAM".into()),
        )
        .update_expression("SET #s = :v")
        .expression_attribute_names("#s", "schema")
        .expression_attribute_values(
            ":v",
            aws_sdk_dynamodb::types::AttributeValue::N("99".into()),
        )
        .send()
        .await
        .unwrap();
    let err = store.init_stream(1_000).await.unwrap_err();
    assert!(
        matches!(
            err,
            shardkeeper::state::StateError::NewerSchema {
                found: 99,
                supported: shardkeeper::state::schema::SCHEMA_VERSION
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade every function"), "{err}");
}
