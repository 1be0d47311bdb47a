//! Tumbling windows: state carried between invocations, the final invoke acts once.

use crate::support::common::{create_stream, ctx};
use crate::support::esm::{kinesis_event, read_shard};
use aws_sdk_kinesis::primitives::Blob;
use shardkeeper::lambda::{KinesisWindowProcessor, WindowInfo, STATE_KEY};
use shardkeeper::processing::StreamRecord;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
struct Totals {
    count: u64,
    amount: u64,
}

fn window_event(records: serde_json::Value, state: Option<&str>, last: bool) -> String {
    let mut event = records;
    event["window"] =
        serde_json::json!({ "start": "2026-11-21T05:00:00Z", "end": "2026-11-21T05:01:00Z" });
    event["state"] = match state {
        Some(s) => serde_json::json!({ STATE_KEY: s }),
        None => serde_json::json!({}),
    };
    event["shardId"] = serde_json::json!("shardId-000000000000");
    event["eventSourceARN"] = serde_json::json!("arn:aws:kinesis:us-east-1:000000000000:stream/s");
    event["isFinalInvokeForWindow"] = serde_json::json!(last);
    event["isWindowTerminatedEarly"] = serde_json::json!(false);
    event.to_string()
}

/// The fold of these tests: counts records and adds up their amounts.
fn count_amounts(totals: &mut Totals, record: StreamRecord) -> Result<(), String> {
    let value: serde_json::Value =
        serde_json::from_slice(&record.data).map_err(|e| e.to_string())?;
    totals.count += 1;
    totals.amount += value["amount"].as_u64().ok_or("no amount")?;
    Ok(())
}

/// A stream of one shard holding `bodies` under one key: its shard and records.
async fn shard_with(
    ctx: &crate::support::common::Ctx,
    bodies: Vec<Vec<u8>>,
) -> (String, Vec<aws_sdk_kinesis::types::Record>) {
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
    let records = read_shard(ctx, &stream, &shard).await;
    (shard, records)
}

#[tokio::test]
async fn state_is_carried_between_invocations_and_the_final_invoke_acts_once() {
    let ctx = ctx().await;
    let bodies = [5u64, 7, 11, 13, 0]
        .map(|amount| match amount {
            0 => b"oops".to_vec(),
            _ => format!("{{\"amount\":{amount}}}").into_bytes(),
        })
        .to_vec();
    let (shard, records) = shard_with(&ctx, bodies).await;
    let arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s";
    let closed: Arc<Mutex<Vec<(Totals, WindowInfo)>>> = Arc::default();
    let sink = closed.clone();
    let processor =
        KinesisWindowProcessor::new(count_amounts, move |totals: Totals, window: WindowInfo| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((totals, window));
                Ok(())
            }
        });
    let first = processor
        .process(&window_event(
            kinesis_event(arn, &shard, &records[..2]),
            None,
            false,
        ))
        .await
        .unwrap();
    let state = first.time_window_event_response_properties.state[STATE_KEY].clone();
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 2,
            amount: 12
        }
    );
    // The next batch fails at the bad record: reported, state as before it.
    let second = processor
        .process(&window_event(
            kinesis_event(arn, &shard, &records[2..]),
            Some(&state),
            false,
        ))
        .await
        .unwrap();
    let json = serde_json::to_value(&second).unwrap();
    assert_eq!(
        json["batchItemFailures"][0]["itemIdentifier"],
        records[4].sequence_number()
    );
    let state = second.time_window_event_response_properties.state[STATE_KEY].clone();
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 4,
            amount: 36
        }
    );
    assert!(closed.lock().unwrap().is_empty());
    // The final invoke of the window: acted on once, state cleared.
    let last = processor
        .process(&window_event(
            serde_json::json!({ "Records": [] }),
            Some(&state),
            true,
        ))
        .await
        .unwrap();
    assert!(last.time_window_event_response_properties.state.is_empty());
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
/// twice.
#[tokio::test]
async fn a_failure_inside_an_aggregate_rolls_back_the_whole_record() {
    let ctx = ctx().await;
    let aggregate = shardkeeper::kpl::aggregate(&[
        ("k", None, b"{\"amount\":1}"),
        ("k", None, b"{\"amount\":2}"),
        ("k", None, b"oops"),
    ]);
    let (shard, records) = shard_with(&ctx, vec![b"{\"amount\":10}".to_vec(), aggregate]).await;
    let arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s";
    let processor = KinesisWindowProcessor::new(count_amounts, |_: Totals, _| async { Ok(()) });
    let response = processor
        .process(&window_event(
            kinesis_event(arn, &shard, &records),
            None,
            false,
        ))
        .await
        .unwrap();
    let state: Totals =
        serde_json::from_str(&response.time_window_event_response_properties.state[STATE_KEY])
            .unwrap();
    assert_eq!(
        state,
        Totals {
            count: 1,
            amount: 10
        },
        "the aggregate's first user records are not in the state"
    );
    assert_eq!(
        response.other["batchItemFailures"][0]["itemIdentifier"],
        records[1].sequence_number()
    );
}

/// Lambda carries at most 1 MB of window state, measured as it is sent
/// (the state's JSON inside a JSON string, escaped): a state that would
/// pass it ends the window early, as Lambda ends one ("If your state
/// exceeds that size, Lambda terminates the window early", Lambda developer
/// guide, tumbling windows), and the window goes on with a fresh state,
/// instead of an error Lambda would retry with the same records for ever.
/// Here the state's JSON is 800 KB, and 1.6 MB once escaped.
#[tokio::test]
async fn a_state_past_one_megabyte_as_sent_ends_the_window_early() {
    let ctx = ctx().await;
    let (shard, records) = shard_with(&ctx, vec![b"{}".to_vec()]).await;
    let closed: Arc<Mutex<Vec<(usize, WindowInfo)>>> = Arc::default();
    let sink = closed.clone();
    let processor = KinesisWindowProcessor::new(
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
    let event = window_event(
        kinesis_event(
            "arn:aws:kinesis:us-east-1:000000000000:stream/s",
            &shard,
            &records,
        ),
        None,
        false,
    );
    let json_len = serde_json::to_string(&vec!["\"".repeat(400 * 1024)])
        .unwrap()
        .len();
    assert!(json_len < 1024 * 1024, "under the limit before escaping");
    let response = processor.process(&event).await.unwrap();
    let closed = closed.lock().unwrap().clone();
    assert_eq!(closed.len(), 1, "on_window runs once");
    assert_eq!(closed[0].0, 400 * 1024, "with the whole state");
    assert!(closed[0].1.terminated_early);
    assert_eq!(
        response.time_window_event_response_properties.state[STATE_KEY], "[]",
        "the window goes on with a fresh state"
    );
    assert!(!response.other.contains_key("batchItemFailures"));
}

/// A state that no longer decodes (a deploy changed its type) is replaced
/// by a fresh one, once: the batch is folded into it, and the next
/// invocation reads the state returned.
#[tokio::test]
async fn a_state_that_does_not_decode_is_replaced_by_a_fresh_one() {
    let ctx = ctx().await;
    let (shard, records) = shard_with(&ctx, vec![br#"{"amount":4}"#.to_vec()]).await;
    let processor = KinesisWindowProcessor::new(count_amounts, |_: Totals, _| async { Ok(()) });
    let arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s";
    let event = window_event(
        kinesis_event(arn, &shard, &records),
        Some(r#"{"total":"not the shape of Totals"}"#),
        false,
    );
    let response = processor.process(&event).await.unwrap();
    let state = &response.time_window_event_response_properties.state[STATE_KEY];
    assert_eq!(
        serde_json::from_str::<Totals>(state).unwrap(),
        Totals {
            count: 1,
            amount: 4
        }
    );
    let next = window_event(kinesis_event(arn, &shard, &records), Some(state), false);
    let response = processor.process(&next).await.unwrap();
    let state = &response.time_window_event_response_properties.state[STATE_KEY];
    assert_eq!(serde_json::from_str::<Totals>(state).unwrap().count, 2);
}

/// With a state store, a record whose fold keeps failing is counted as the
/// batch processors count one, and at `max_attempts` it is parked and left
/// out of the window's state; the window goes on with the records after
/// it. Before, it was reported at every invocation, for ever.
#[tokio::test]
async fn a_record_whose_fold_keeps_failing_is_parked_and_left_out() {
    use shardkeeper::processing::{Parking, ProcessingOptions};
    let ctx = ctx().await;
    let bodies = vec![
        b"{\"amount\":5}".to_vec(),
        b"{\"amount\":7}".to_vec(),
        b"oops".to_vec(),
        b"{\"amount\":11}".to_vec(),
    ];
    let (shard, records) = shard_with(&ctx, bodies).await;
    let arn = "arn:aws:kinesis:us-east-1:000000000000:stream/s";
    let store = ctx.store("window-poison");
    let processor =
        KinesisWindowProcessor::new(count_amounts, |_: Totals, _: WindowInfo| async { Ok(()) })
            .with_store(store.clone())
            .with_options(ProcessingOptions::default().max_attempts(2).parking(
                Parking::StateTable {
                    ttl: std::time::Duration::from_secs(3600),
                },
            ));
    let first = processor
        .process(&window_event(
            kinesis_event(arn, &shard, &records),
            None,
            false,
        ))
        .await
        .unwrap();
    let json = serde_json::to_value(&first).unwrap();
    assert_eq!(
        json["batchItemFailures"][0]["itemIdentifier"],
        records[2].sequence_number()
    );
    let state = first.time_window_event_response_properties.state[STATE_KEY].clone();
    // Lambda's retry, from the failed record, with the state returned.
    let second = processor
        .process(&window_event(
            kinesis_event(arn, &shard, &records[2..]),
            Some(&state),
            false,
        ))
        .await
        .unwrap();
    let json = serde_json::to_value(&second).unwrap();
    assert!(json.get("batchItemFailures").is_none(), "{json}");
    let state = second.time_window_event_response_properties.state[STATE_KEY].clone();
    assert_eq!(
        serde_json::from_str::<Totals>(&state).unwrap(),
        Totals {
            count: 3,
            amount: 23
        }
    );
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[2].sequence_number()
    );
}

/// A window whose action keeps failing holds its shard for ever on Lambda
/// ("If the invocation fails, your Lambda function suspends further
/// processing until a successful invocation", Lambda developer guide,
/// tumbling windows). With a state store it fails the invocation until
/// `max_attempts`, then the window is parked, its state as the data, and
/// closed.
#[tokio::test]
async fn a_window_whose_action_keeps_failing_is_parked_with_its_state() {
    use shardkeeper::processing::{HandlerError, Parking, ProcessingOptions};
    let ctx = ctx().await;
    let store = ctx.store("window-action");
    let processor = KinesisWindowProcessor::new(count_amounts, |_: Totals, _: WindowInfo| async {
        Err::<(), HandlerError>("the warehouse is down".into())
    })
    .with_store(store.clone())
    .with_options(
        ProcessingOptions::default()
            .max_attempts(2)
            .parking(Parking::StateTable {
                ttl: std::time::Duration::from_secs(3600),
            }),
    );
    let state = r#"{"count":4,"amount":36}"#;
    let last = window_event(serde_json::json!({ "Records": [] }), Some(state), true);
    let error = processor.process(&last).await.unwrap_err();
    assert!(error.to_string().contains("warehouse"), "{error}");
    let closed = processor.process(&last).await.unwrap();
    assert!(closed
        .time_window_event_response_properties
        .state
        .is_empty());
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
