//! Stream state: created once, kept, and reset when the Kinesis stream was
//! re-created (parked records kept).

use crate::support::common::{ctx, seed_shards, wait_stream_active};
use shardkeeper::state::{
    kinesis_stream_summary, ConsumerId, ConsumerInfo, ParkedRecord, RecordKey, RetryPolicy,
    SequenceNumber, ShardId, StartOptions, StateError, StreamAddress, StreamInit, TableOptions,
};
use std::time::Duration;

#[tokio::test]
async fn state_is_reset_when_the_stream_is_recreated() {
    let ctx = ctx().await;
    let stream = crate::support::common::create_stream(&ctx.aws, 2).await;
    let retry = RetryPolicy::default();
    let address = StreamAddress::parse(&stream).unwrap();
    let summary = kinesis_stream_summary(&ctx.aws.kinesis, &address, &retry)
        .await
        .unwrap();
    let created = summary.created;
    let store = ctx.store(&stream);
    let options = StartOptions::new(created)
        .table(TableOptions::default().poll_interval(Duration::from_millis(50)))
        .stream_arn(Some(summary.arn.clone()));
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
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(me, 0))
        .await
        .unwrap();
    // A poison record parked before the stream goes: the only copy of its
    // payload once the stream is deleted.
    let parked = ParkedRecord {
        key: RecordKey::in_shard(
            ShardId::new("shardId-000000000000").unwrap(),
            SequenceNumber::new("4711").unwrap(),
            0,
        ),
        partition_key: "k".to_owned(),
        data: b"poison".to_vec(),
        data_size: 6,
        data_sha256: None,
        error: "handler failed".to_owned(),
        attempts: 3,
        parked_at: ctx.clock_now(),
    };
    store
        .record_state()
        .park(&parked, Duration::from_secs(3_600))
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
        if kinesis_stream_summary(&ctx.aws.kinesis, &address, &retry)
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
    let again = kinesis_stream_summary(&ctx.aws.kinesis, &address, &retry)
        .await
        .unwrap();
    let recreated = again.created;
    assert_ne!(recreated, created);
    assert_eq!(again.arn, summary.arn, "a re-created stream has its ARN");

    // Two starts race on the reset: one resets, both end on the new state.
    let other = store.clone();
    let arn = Some(again.arn.as_str());
    let (a, b) = tokio::join!(
        store.stream_item().init(recreated, arn),
        other.stream_item().init(recreated, arn)
    );
    let outcomes = [a.unwrap(), b.unwrap()];
    let resets: Vec<_> = outcomes
        .iter()
        .filter(|o| matches!(o, StreamInit::Reset { .. }))
        .collect();
    assert_eq!(resets.len(), 1, "{outcomes:?}");
    if let StreamInit::Reset {
        previous_created,
        deleted_items,
        kept_parked,
    } = resets[0]
    {
        assert_eq!(*previous_created, created);
        assert_eq!(*deleted_items, 5, "stream item, 3 shards, 1 consumer");
        assert_eq!(*kept_parked, 1, "the parked record is kept");
    }
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.stream.unwrap().stream_created, recreated);
    assert!(snapshot.shards.is_empty() && snapshot.consumers.is_empty());
    // The parked record is still listed, whole, after the reset.
    let listed = store.record_state().list_parked().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].data, parked.data);
    assert_eq!(listed[0].key, parked.key);
}

#[tokio::test]
async fn unknown_stream_is_a_typed_not_found() {
    let ctx = ctx().await;
    let err = kinesis_stream_summary(
        &ctx.aws.kinesis,
        &StreamAddress::parse("no-such-stream-here").unwrap(),
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
    store.stream_item().init(1_000, None).await.unwrap();
    ctx.aws
        .dynamodb
        .update_item()
        .table_name(&ctx.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(store.layout().partition_key().to_owned()),
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
    let err = store.stream_item().init(1_000, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            shardkeeper::state::StateError::NewerSchema {
                found: 99,
                supported: shardkeeper::state::SCHEMA_VERSION
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade every function"), "{err}");
}

/// A stream of the same name in another account or region (another ARN)
/// never takes the group's state for its own. With another creation time
/// too, it would otherwise be taken for a re-created stream and the state
/// deleted: it is refused instead, and the state kept.
#[tokio::test]
async fn state_of_a_same_named_stream_elsewhere_is_refused_and_kept() {
    let ctx = ctx().await;
    let ours = "arn:aws:kinesis:eu-west-1:111111111111:stream/arn-check";
    let theirs = "arn:aws:kinesis:eu-west-1:222222222222:stream/arn-check";
    let store = ctx.store("arn-check");
    assert_eq!(
        store.stream_item().init(1_000, Some(ours)).await.unwrap(),
        StreamInit::Created
    );
    seed_shards(&store, 2).await;
    let err = store
        .stream_item()
        .init(2_000, Some(theirs))
        .await
        .unwrap_err();
    match &err {
        StateError::OtherStream { recorded, found } => {
            assert_eq!((recorded.as_str(), found.as_str()), (ours, theirs));
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("a group of its own"), "{err}");
    let snapshot = store.load_group().await.unwrap();
    let kept = snapshot.stream.unwrap();
    assert_eq!(
        (kept.stream_created, kept.stream_arn.as_deref()),
        (1_000, Some(ours))
    );
    assert_eq!(snapshot.shards.len(), 2, "nothing deleted");
    // A start that does not know the ARN (a processor) goes on as before.
    assert_eq!(
        store.stream_item().init(1_000, None).await.unwrap(),
        StreamInit::Existing
    );

    // State recorded before ARNs were gets the ARN of its next start, and
    // is then told apart in the same way.
    let older = ctx.store("arn-later");
    older.stream_item().init(1_000, None).await.unwrap();
    assert_eq!(
        older.stream_item().init(1_000, Some(ours)).await.unwrap(),
        StreamInit::Existing
    );
    let recorded = older
        .stream_item()
        .state()
        .await
        .unwrap()
        .unwrap()
        .stream_arn;
    assert_eq!(recorded.as_deref(), Some(ours));
    assert!(matches!(
        older
            .stream_item()
            .init(1_000, Some(theirs))
            .await
            .unwrap_err(),
        StateError::OtherStream { .. }
    ));
}
