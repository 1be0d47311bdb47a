//! The DynamoDB Streams batch processor end to end: items written to a
//! table on the DynamoDB server, its stream read back, shaped as the event
//! source mapping shapes it, and handled as typed changes.

use crate::support::common::{create_stream_table, ctx, lambda_context};
use crate::support::esm::{dynamodb_event, read_table_stream};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_runtime::{LambdaEvent, Service};
use serde::Deserialize;
use serde_json::value::RawValue;
use shardkeeper::lambda::DynamoDbProcessor;
use shardkeeper::processing::{changes, Change, RecordError, StreamRecord};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Deserialize, PartialEq)]
struct Order {
    id: String,
    status: String,
    amount: u64,
}

type Projection = Arc<Mutex<BTreeMap<String, Order>>>;
type Log = Arc<Mutex<Vec<String>>>;

fn projector(
    projection: Projection,
    log: Log,
    fail_on: Arc<Mutex<Option<String>>>,
) -> impl shardkeeper::processing::RecordHandler {
    changes(move |change: Change<Order>, _record: StreamRecord| {
        let (projection, log, fail_on) = (projection.clone(), log.clone(), fail_on.clone());
        async move {
            let (id, what) = match &change {
                Change::Insert { new } => (new.id.clone(), format!("insert {}", new.id)),
                Change::Modify { old, new } => (
                    new.id.clone(),
                    format!(
                        "modify {} {} -> {}",
                        new.id,
                        old.as_ref().map_or("?", |o| o.status.as_str()),
                        new.status
                    ),
                ),
                Change::Remove { old, .. } => {
                    let id = old.as_ref().map(|o| o.id.clone()).unwrap_or_default();
                    (id.clone(), format!("remove {id}"))
                }
            };
            if fail_on.lock().unwrap().as_deref() == Some(what.as_str()) {
                return Err(format!("cannot apply {what}"));
            }
            let mut p = projection.lock().unwrap();
            match change {
                Change::Insert { new } | Change::Modify { new, .. } => {
                    p.insert(id, new);
                }
                Change::Remove { .. } => {
                    p.remove(&id);
                }
            }
            log.lock().unwrap().push(what);
            Ok(())
        }
    })
}

async fn write_orders(ctx: &crate::support::common::Ctx) -> (String, String) {
    let (table, arn) = create_stream_table(&ctx.aws).await;
    let put = |id: &str, status: &str, amount: u64| {
        ctx.aws
            .dynamodb
            .put_item()
            .table_name(&table)
            .item("id", AttributeValue::S(id.into()))
            .item("status", AttributeValue::S(status.into()))
            .item("amount", AttributeValue::N(amount.to_string()))
            .send()
    };
    put("o1", "new", 10).await.unwrap();
    put("o2", "new", 20).await.unwrap();
    put("o1", "paid", 10).await.unwrap();
    ctx.aws
        .dynamodb
        .delete_item()
        .table_name(&table)
        .key("id", AttributeValue::S("o2".into()))
        .send()
        .await
        .unwrap();
    (table, arn)
}

#[tokio::test]
async fn typed_changes_keep_a_projection_through_the_lambda_service() {
    let ctx = ctx().await;
    let (table, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    assert_eq!(records.len(), 4);
    let event = dynamodb_event(&arn, &records);
    let (projection, log): (Projection, Log) = Default::default();
    let mut processor =
        DynamoDbProcessor::new(projector(projection.clone(), log.clone(), Arc::default()))
            .with_store(ctx.store(&table));
    let context = lambda_context(Duration::from_secs(60));
    let response = processor
        .call(LambdaEvent::new(
            RawValue::from_string(event.to_string()).unwrap(),
            context,
        ))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(
        log.lock().unwrap().clone(),
        vec![
            "insert o1",
            "insert o2",
            "modify o1 new -> paid",
            "remove o2"
        ]
    );
    let p = projection.lock().unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p["o1"].status, "paid");
}

#[tokio::test]
async fn a_retried_batch_applies_each_change_once() {
    let ctx = ctx().await;
    let (table, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    let event = dynamodb_event(&arn, &records).to_string();
    let (projection, log): (Projection, Log) = Default::default();
    let fail_on = Arc::new(Mutex::new(Some("modify o1 new -> paid".to_owned())));
    let processor = DynamoDbProcessor::new(projector(projection, log.clone(), fail_on.clone()))
        .with_store(ctx.store(&table));
    let first = processor.process(&event, None).await.unwrap();
    assert_eq!(first.processed, 2);
    assert_eq!(first.failures.len(), 1);
    assert_eq!(
        first.failures[0].item_identifier,
        records[2].dynamodb().unwrap().sequence_number().unwrap()
    );
    *fail_on.lock().unwrap() = None;
    // The same batch again (a timeout): the two applied changes are skipped.
    let second = processor.process(&event, None).await.unwrap();
    assert_eq!((second.duplicates_skipped, second.processed), (2, 2));
    assert_eq!(log.lock().unwrap().len(), 4, "{:?}", log.lock().unwrap());
}

/// A DynamoDB stream's ARN holds its table's name (up to 255 characters),
/// so it can be longer than a key part: such a stream is keyed by the
/// ARN's digest, and its batches keep de-duplication (before, every batch
/// ran without it).
#[tokio::test]
async fn a_stream_arn_longer_than_a_key_part_keeps_de_duplication() {
    let ctx = ctx().await;
    let (table, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    let long = format!(
        "arn:aws:dynamodb:us-east-1:123456789012:table/{}/stream/2026-11-27T00:00:00.000",
        "t".repeat(255)
    );
    assert!(long.len() > 256);
    let event = dynamodb_event(&arn, &records)
        .to_string()
        .replace(&arn, &long);
    let (projection, log): (Projection, Log) = Default::default();
    let fail_on = Arc::new(Mutex::new(Some("modify o1 new -> paid".to_owned())));
    let processor = DynamoDbProcessor::new(projector(projection, log.clone(), fail_on.clone()))
        .with_store(ctx.store(&table));
    let first = processor.process(&event, None).await.unwrap();
    assert!(!first.deduplication_off, "{first:?}");
    assert_eq!((first.processed, first.failures.len()), (2, 1));
    *fail_on.lock().unwrap() = None;
    let second = processor.process(&event, None).await.unwrap();
    assert_eq!((second.duplicates_skipped, second.processed), (2, 2));
    assert_eq!(log.lock().unwrap().len(), 4, "{:?}", log.lock().unwrap());
}

#[tokio::test]
async fn an_image_of_the_wrong_shape_fails_its_record_with_the_sequence_number() {
    let ctx = ctx().await;
    let (_, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    let mut event = dynamodb_event(&arn, &records);
    event["Records"][1]["dynamodb"]["NewImage"]["amount"] = serde_json::json!({ "S": "twenty" });
    let processor =
        DynamoDbProcessor::new(projector(Arc::default(), Arc::default(), Arc::default()));
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.processed, 1);
    let failure = &report.failures[0];
    let seq = records[1].dynamodb().unwrap().sequence_number().unwrap();
    assert_eq!(failure.item_identifier, seq);
    match &failure.error {
        RecordError::Payload {
            sequence_number,
            error,
            ..
        } => {
            assert_eq!(sequence_number, seq);
            assert!(error.contains("new image"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

/// Attempts and parking are kept per record (its sequence number in its
/// stream), so they carry across Lambda's retry that starts at the failed
/// record (a new batch): the poison record is parked after `max_attempts`.
#[tokio::test]
async fn attempts_follow_the_record_across_retries_that_start_at_it() {
    let ctx = ctx().await;
    let (table, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    let store = ctx.store(&table);
    let (projection, log): (Projection, Log) = Default::default();
    let fail_on = Arc::new(Mutex::new(Some("insert o2".to_owned())));
    let options = shardkeeper::processing::ProcessingOptions::default()
        .max_attempts(2)
        .parking(shardkeeper::processing::Parking::StateTable {
            ttl: Duration::from_secs(3600),
        });
    let processor = DynamoDbProcessor::new(projector(projection, log.clone(), fail_on))
        .with_store(store.clone())
        .with_options(options);
    let first = processor
        .process(&dynamodb_event(&arn, &records).to_string(), None)
        .await
        .unwrap();
    assert_eq!(first.failures.len(), 1);
    // ReportBatchItemFailures: the next batch starts at the failed record.
    let retry = processor
        .process(&dynamodb_event(&arn, &records[1..]).to_string(), None)
        .await
        .unwrap();
    assert_eq!((retry.parked, retry.processed), (1, 2), "{retry:?}");
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[1].dynamodb().unwrap().sequence_number().unwrap()
    );
    assert_eq!(parked[0].key.source.as_deref(), Some(arn.as_str()));
}

/// A deletion by DynamoDB's time to live is flagged on the change, and with
/// the `KEYS_ONLY` view an insert decodes its item from the keys.
#[tokio::test]
async fn ttl_deletions_are_flagged_and_keys_only_streams_decode() {
    #[derive(Debug, Deserialize, PartialEq)]
    struct Key {
        id: String,
        status: Option<String>,
    }
    let ctx = ctx().await;
    let (_, arn) = write_orders(&ctx).await;
    let records = read_table_stream(&ctx, &arn).await;
    let mut event = dynamodb_event(&arn, &records);
    event["Records"][3]["userIdentity"] =
        serde_json::json!({ "type": "Service", "principalId": "dynamodb.amazonaws.com" });
    let insert = &mut event["Records"][0]["dynamodb"];
    insert["StreamViewType"] = serde_json::json!("KEYS_ONLY");
    insert.as_object_mut().unwrap().remove("NewImage");
    let seen: Arc<Mutex<Vec<Change<Key>>>> = Arc::default();
    let processor = DynamoDbProcessor::new(changes({
        let seen = seen.clone();
        move |change: Change<Key>, _: StreamRecord| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(change);
                Ok::<(), std::io::Error>(())
            }
        }
    }));
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0],
        Change::Insert {
            new: Key {
                id: "o1".into(),
                status: None
            }
        }
    );
    assert!(
        matches!(&seen[3], Change::Remove { expired: true, old: Some(Key { id, .. }), .. } if id == "o2"),
        "{:?}",
        seen[3]
    );
    assert!(matches!(&seen[1], Change::Insert { .. }));
}
