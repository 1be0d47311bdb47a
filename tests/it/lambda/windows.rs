//! Tumbling windows, for Kinesis and for DynamoDB Streams (Lambda runs
//! them on both): state carried between invocations, the final invoke acts
//! once, a state past 1 MB ends the window early, a state that does not
//! decode is replaced, and with a store a failing fold's record and a
//! failing action's window are parked. Each test runs on both sources
//! (the KPL one on Kinesis alone), its records read from a real stream.

use crate::support::common::{create_stream, create_stream_table, ctx, Ctx};
use crate::support::esm::{
    dynamodb_event_record, kinesis_event_record, read_shard, read_table_stream,
};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use shardkeeper::lambda::{
    DynamoDbStreams, Kinesis, KinesisWindowProcessor, WindowInfo, WindowProcessor, WindowSource,
    STATE_KEY,
};
use shardkeeper::processing::StreamRecord;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
struct Totals {
    count: u64,
    amount: u64,
}

/// Where a test's records come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    Kinesis,
    DynamoDb,
}

/// One shard's records as the mapping delivers them, under one key.
struct Shard {
    arn: String,
    records: Vec<serde_json::Value>,
    sequences: Vec<String>,
}

impl Shard {
    /// The event's records, `range` of them.
    fn records(&self, range: std::ops::Range<usize>) -> serde_json::Value {
        serde_json::json!({ "Records": self.records[range].to_vec() })
    }

    /// A time-window event of `records`, carrying `state`, final or not.
    fn window_event(&self, records: serde_json::Value, state: Option<&str>, last: bool) -> String {
        let mut event = records;
        event["window"] =
            serde_json::json!({ "start": "2026-11-21T05:00:00Z", "end": "2026-11-21T05:01:00Z" });
        event["state"] = match state {
            Some(s) => serde_json::json!({ STATE_KEY: s }),
            None => serde_json::json!({}),
        };
        event["shardId"] = serde_json::json!("shardId-000000000000");
        event["eventSourceARN"] = serde_json::json!(self.arn);
        event["isFinalInvokeForWindow"] = serde_json::json!(last);
        event["isWindowTerminatedEarly"] = serde_json::json!(false);
        event.to_string()
    }
}

/// A shard of `feed` holding `bodies` in order under one key: records on a
/// Kinesis stream, or changes of one item (its `body` attribute) on a
/// table's stream.
async fn shard_with(ctx: &Ctx, feed: Feed, bodies: Vec<Vec<u8>>) -> Shard {
    match feed {
        Feed::Kinesis => {
            let stream = create_stream(&ctx.aws, 1).await;
            let mut shard = String::new();
            for body in bodies {
                shard = ctx
                    .aws
                    .kinesis
                    .put_record()
                    .stream_name(&stream)
                    .partition_key("k")
                    .data(Blob::new(body))
                    .send()
                    .await
                    .unwrap()
                    .shard_id()
                    .to_owned();
            }
            let arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s".to_owned();
            let read = read_shard(ctx, &stream, &shard).await;
            Shard {
                records: read
                    .iter()
                    .map(|r| kinesis_event_record(&arn, &shard, r))
                    .collect(),
                sequences: read
                    .iter()
                    .map(|r| r.sequence_number().to_owned())
                    .collect(),
                arn,
            }
        }
        Feed::DynamoDb => {
            let (table, arn) = create_stream_table(&ctx.aws).await;
            for body in bodies {
                ctx.aws
                    .dynamodb
                    .put_item()
                    .table_name(&table)
                    .item("id", AttributeValue::S("k".into()))
                    .item("body", AttributeValue::S(String::from_utf8(body).unwrap()))
                    .send()
                    .await
                    .unwrap();
            }
            let read = read_table_stream(ctx, &arn).await;
            Shard {
                records: read
                    .iter()
                    .map(|r| dynamodb_event_record(&arn, r))
                    .collect(),
                sequences: read
                    .iter()
                    .map(|r| r.dynamodb().unwrap().sequence_number().unwrap().to_owned())
                    .collect(),
                arn,
            }
        }
    }
}

/// The body a test put: a Kinesis record's data, or a DynamoDB change's
/// `body` attribute (the record's text is the change, as a mapping sends
/// it).
fn body(record: &StreamRecord) -> Vec<u8> {
    serde_json::from_slice::<serde_json::Value>(&record.data)
        .ok()
        .and_then(|v| {
            v["dynamodb"]["NewImage"]["body"]["S"]
                .as_str()
                .map(Into::into)
        })
        .unwrap_or_else(|| record.data.to_vec())
}

/// The fold of these tests: counts records and adds up their amounts.
fn count_amounts(totals: &mut Totals, record: StreamRecord) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(&body(&record)).map_err(|e| e.to_string())?;
    totals.count += 1;
    totals.amount += value["amount"].as_u64().ok_or("no amount")?;
    Ok(())
}

/// A response as Lambda reads it.
fn json(response: impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(response).unwrap()
}

/// The state a response carries on.
fn state_of(response: &serde_json::Value) -> String {
    response["state"][STATE_KEY].as_str().unwrap().to_owned()
}

/// The record a response reports failed, if any.
fn failed_item(response: &serde_json::Value) -> Option<String> {
    response["batchItemFailures"]
        .get(0)
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_owned())
}

fn amounts(list: &[u64]) -> Vec<Vec<u8>> {
    list.iter()
        .map(|amount| match amount {
            0 => b"oops".to_vec(),
            _ => format!("{{\"amount\":{amount}}}").into_bytes(),
        })
        .collect()
}

#[tokio::test]
async fn state_is_carried_between_invocations_and_the_final_invoke_acts_once() {
    state_is_carried::<Kinesis>(Feed::Kinesis).await;
}

#[tokio::test]
async fn dynamodb_state_is_carried_between_invocations_and_the_final_invoke_acts_once() {
    state_is_carried::<DynamoDbStreams>(Feed::DynamoDb).await;
}

async fn state_is_carried<Src: WindowSource>(feed: Feed) {
    let ctx = ctx().await;
    let shard = shard_with(&ctx, feed, amounts(&[5, 7, 11, 13, 0])).await;
    let closed: Arc<Mutex<Vec<(Totals, WindowInfo)>>> = Arc::default();
    let sink = closed.clone();
    let processor = WindowProcessor::<Src, Totals, _, _>::new(
        count_amounts,
        move |totals: Totals, window: WindowInfo| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((totals, window));
                Ok(())
            }
        },
    );
    let first = json(
        processor
            .process(&shard.window_event(shard.records(0..2), None, false))
            .await
            .unwrap(),
    );
    let state = state_of(&first);
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 2,
            amount: 12
        }
    );
    // The next batch fails at the bad record: reported, state as before it.
    let second = json(
        processor
            .process(&shard.window_event(shard.records(2..5), Some(&state), false))
            .await
            .unwrap(),
    );
    assert_eq!(failed_item(&second), Some(shard.sequences[4].clone()));
    let state = state_of(&second);
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 4,
            amount: 36
        }
    );
    assert!(closed.lock().unwrap().is_empty());
    // The final invoke of the window: acted on once, state cleared.
    let last = json(
        processor
            .process(&shard.window_event(serde_json::json!({ "Records": [] }), Some(&state), true))
            .await
            .unwrap(),
    );
    assert!(
        last["state"].as_object().is_none_or(|s| s.is_empty()),
        "{last}"
    );
    let closed = closed.lock().unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(
        closed[0].0,
        Totals {
            count: 4,
            amount: 36
        }
    );
    assert_eq!(
        closed[0].1.shard_id.as_deref(),
        Some("shardId-000000000000")
    );
}

/// A fold that fails inside a KPL aggregate rolls the state back to before
/// the whole aggregate (the retry delivers it whole): nothing is counted
/// twice. (Kinesis only: DynamoDB Streams has no aggregates.)
#[tokio::test]
async fn a_failure_inside_an_aggregate_rolls_back_the_whole_record() {
    let ctx = ctx().await;
    let aggregate = shardkeeper::kpl::aggregate(&[
        ("k", None, b"{\"amount\":1}"),
        ("k", None, b"{\"amount\":2}"),
        ("k", None, b"oops"),
    ]);
    let shard = shard_with(
        &ctx,
        Feed::Kinesis,
        vec![b"{\"amount\":10}".to_vec(), aggregate],
    )
    .await;
    let processor = KinesisWindowProcessor::new(count_amounts, |_: Totals, _| async { Ok(()) });
    let response = json(
        processor
            .process(&shard.window_event(shard.records(0..2), None, false))
            .await
            .unwrap(),
    );
    assert_eq!(
        serde_json::from_str::<Totals>(&state_of(&response)).unwrap(),
        Totals {
            count: 1,
            amount: 10
        },
        "the aggregate's first user records are not in the state"
    );
    assert_eq!(failed_item(&response), Some(shard.sequences[1].clone()));
}

/// Lambda carries at most 1 MB of window state, measured as it is sent
/// (the state's JSON inside a JSON string, escaped): a state that would
/// pass it ends the window early, as Lambda ends one ("If your state
/// exceeds that size, Lambda terminates the window early", Lambda developer
/// guide, tumbling windows), and the window goes on with a fresh state,
/// instead of an error Lambda would retry with the same records for ever.
/// Here the state's JSON is 400 KB, and 800 KB once escaped, twice.
#[tokio::test]
async fn a_state_past_one_megabyte_as_sent_ends_the_window_early() {
    a_state_past_one_megabyte::<Kinesis>(Feed::Kinesis).await;
}

#[tokio::test]
async fn dynamodb_a_state_past_one_megabyte_as_sent_ends_the_window_early() {
    a_state_past_one_megabyte::<DynamoDbStreams>(Feed::DynamoDb).await;
}

async fn a_state_past_one_megabyte<Src: WindowSource>(feed: Feed) {
    let ctx = ctx().await;
    let shard = shard_with(&ctx, feed, vec![b"{}".to_vec()]).await;
    let closed: Arc<Mutex<Vec<(usize, WindowInfo)>>> = Arc::default();
    let sink = closed.clone();
    let processor = WindowProcessor::<Src, Vec<String>, _, _>::new(
        |state: &mut Vec<String>, _: StreamRecord| -> Result<(), String> {
            state.push("\"".repeat(400 * 1024));
            Ok(())
        },
        move |state: Vec<String>, window: WindowInfo| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((state.concat().len(), window));
                Ok(())
            }
        },
    );
    let json_len = serde_json::to_string(&vec!["\"".repeat(400 * 1024)])
        .unwrap()
        .len();
    assert!(json_len < 1024 * 1024, "under the limit before escaping");
    let response = json(
        processor
            .process(&shard.window_event(shard.records(0..1), None, false))
            .await
            .unwrap(),
    );
    let closed = closed.lock().unwrap().clone();
    assert_eq!(closed.len(), 1, "on_window runs once");
    assert_eq!(closed[0].0, 400 * 1024, "with the whole state");
    assert!(closed[0].1.terminated_early);
    assert_eq!(
        state_of(&response),
        "[]",
        "the window goes on with a fresh state"
    );
    assert_eq!(failed_item(&response), None);
}

/// A state that no longer decodes (a deploy changed its type) is replaced
/// by a fresh one, once: the batch is folded into it, and the next
/// invocation reads the state returned.
#[tokio::test]
async fn a_state_that_does_not_decode_is_replaced_by_a_fresh_one() {
    a_state_that_does_not_decode::<Kinesis>(Feed::Kinesis).await;
}

#[tokio::test]
async fn dynamodb_a_state_that_does_not_decode_is_replaced_by_a_fresh_one() {
    a_state_that_does_not_decode::<DynamoDbStreams>(Feed::DynamoDb).await;
}

async fn a_state_that_does_not_decode<Src: WindowSource>(feed: Feed) {
    let ctx = ctx().await;
    let shard = shard_with(&ctx, feed, amounts(&[4])).await;
    let processor =
        WindowProcessor::<Src, Totals, _, _>::new(count_amounts, |_: Totals, _| async { Ok(()) });
    let event = shard.window_event(
        shard.records(0..1),
        Some(r#"{"total":"not the shape of Totals"}"#),
        false,
    );
    let response = json(processor.process(&event).await.unwrap());
    let state = state_of(&response);
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 1,
            amount: 4
        }
    );
    let next = shard.window_event(shard.records(0..1), Some(&state), false);
    let response = json(processor.process(&next).await.unwrap());
    assert_eq!(
        serde_json::from_str::<Totals>(&state_of(&response))
            .unwrap()
            .count,
        2
    );
}

/// With a state store, a record whose fold keeps failing is counted as the
/// batch processors count one, and at `max_attempts` it is parked and left
/// out of the window's state; the window goes on with the records after
/// it. Before, it was reported at every invocation, for ever.
#[tokio::test]
async fn a_record_whose_fold_keeps_failing_is_parked_and_left_out() {
    a_record_whose_fold_keeps_failing::<Kinesis>(Feed::Kinesis).await;
}

#[tokio::test]
async fn dynamodb_a_record_whose_fold_keeps_failing_is_parked_and_left_out() {
    a_record_whose_fold_keeps_failing::<DynamoDbStreams>(Feed::DynamoDb).await;
}

async fn a_record_whose_fold_keeps_failing<Src: WindowSource>(feed: Feed) {
    use shardkeeper::processing::{Parking, ProcessingOptions};
    let ctx = ctx().await;
    let shard = shard_with(&ctx, feed, amounts(&[5, 7, 0, 11])).await;
    let store = ctx.store("window-poison");
    let processor = WindowProcessor::<Src, Totals, _, _>::new(
        count_amounts,
        |_: Totals, _: WindowInfo| async { Ok(()) },
    )
    .with_store(store.clone())
    .with_options(
        ProcessingOptions::default()
            .max_attempts(2)
            .parking(Parking::StateTable {
                ttl: std::time::Duration::from_secs(3600),
            }),
    );
    let first = json(
        processor
            .process(&shard.window_event(shard.records(0..4), None, false))
            .await
            .unwrap(),
    );
    assert_eq!(failed_item(&first), Some(shard.sequences[2].clone()));
    let state = state_of(&first);
    // Lambda's retry, from the failed record, with the state returned.
    let second = json(
        processor
            .process(&shard.window_event(shard.records(2..4), Some(&state), false))
            .await
            .unwrap(),
    );
    assert_eq!(failed_item(&second), None, "{second}");
    assert_eq!(
        serde_json::from_str::<Totals>(&state_of(&second)).unwrap(),
        Totals {
            count: 3,
            amount: 23
        }
    );
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].key.sequence.as_str(), shard.sequences[2]);
}

/// A window whose action keeps failing holds its shard for ever on Lambda
/// ("If the invocation fails, your Lambda function suspends further
/// processing until a successful invocation", Lambda developer guide,
/// tumbling windows). With a state store it fails the invocation until
/// `max_attempts`, then the window is parked, its state as the data, and
/// closed.
#[tokio::test]
async fn a_window_whose_action_keeps_failing_is_parked_with_its_state() {
    a_window_whose_action_keeps_failing::<Kinesis>(Feed::Kinesis).await;
}

#[tokio::test]
async fn dynamodb_a_window_whose_action_keeps_failing_is_parked_with_its_state() {
    a_window_whose_action_keeps_failing::<DynamoDbStreams>(Feed::DynamoDb).await;
}

async fn a_window_whose_action_keeps_failing<Src: WindowSource>(feed: Feed) {
    use shardkeeper::processing::{HandlerError, Parking, ProcessingOptions};
    let ctx = ctx().await;
    let shard = shard_with(&ctx, feed, amounts(&[1])).await;
    let store = ctx.store("window-action");
    let processor = WindowProcessor::<Src, Totals, _, _>::new(
        count_amounts,
        |_: Totals, _: WindowInfo| async {
            Err::<(), HandlerError>("the warehouse is down".into())
        },
    )
    .with_store(store.clone())
    .with_options(
        ProcessingOptions::default()
            .max_attempts(2)
            .parking(Parking::StateTable {
                ttl: std::time::Duration::from_secs(3600),
            }),
    );
    let state = r#"{"count":4,"amount":36}"#;
    let last = shard.window_event(serde_json::json!({ "Records": [] }), Some(state), true);
    let error = processor.process(&last).await.unwrap_err();
    assert!(error.to_string().contains("warehouse"), "{error}");
    let closed = json(processor.process(&last).await.unwrap());
    assert!(
        closed["state"].as_object().is_none_or(|s| s.is_empty()),
        "{closed}"
    );
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].data, state.as_bytes());
    assert!(parked[0]
        .key
        .event_id
        .as_deref()
        .is_some_and(|id| id.starts_with("window-")));
    assert!(parked[0].error.contains("warehouse"), "{}", parked[0].error);
}
