//! DynamoDB Streams records and events: one stream record decoded into a
//! typed change (as `serde_json::Value` and as a typed item), and a whole
//! event through the batch processor with the `changes` handler.
//!
//! The record's text is also decoded directly (`Change::from_event_json`,
//! images read from their DynamoDB JSON text): where the record parses as
//! `aws_lambda_events` parses it, both decodings must agree, and any text,
//! as a record or as an image, must decode or fail without a panic.
//!
//! An input is read as a stream record, as an event, and wrapped as the
//! only record of an event, so that a seed of either shape reaches all three.
//! The processor reads an event's records with a scanner that checks the
//! JSON in the same pass: an event that is not valid JSON (as `serde_json`
//! reads it) must fail whole.

use super::block_on;
use aws_lambda_events::event::dynamodb::EventRecord;
use serde::Deserialize;
use serde_json::Value;
use shardkeeper::lambda::DynamoDbProcessor;
use shardkeeper::processing::{
    changes, from_image_json, Change, FailureMode, HandlerError, ProcessingOptions, RecordError,
    StreamRecord,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A typed item, as a handler would declare it (every attribute optional
/// but the key, so that most images decode and some do not).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: String,
    status: Option<String>,
    amount_cents: Option<u64>,
    rate: Option<f64>,
    paid: Option<bool>,
    tags: Option<Vec<String>>,
    lines: Option<Vec<BTreeMap<String, Value>>>,
}

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let direct = Change::<Value>::from_event_json(text);
    let _ = Change::<Order>::from_event_json(text);
    let _ = from_image_json::<Value>(text);
    let _ = from_image_json::<Order>(text);
    if let Ok(record) = serde_json::from_str::<EventRecord>(text) {
        let value = Change::<Value>::from_record(&record);
        match (&direct, &value) {
            (Ok(direct), Ok(value)) => assert_eq!(direct, value, "the decodings differ"),
            (Ok(direct), Err(e)) => panic!("only the direct decoding succeeds: {direct:?}, {e}"),
            // Text that aws_lambda_events reads but that is not DynamoDB
            // JSON as serde_dynamo reads it may still differ in the error.
            _ => {}
        }
        if let Ok(change) = &value {
            let images = match change {
                Change::Insert { new } => vec![Some(new)],
                Change::Modify { old, new } => vec![old.as_ref(), Some(new)],
                Change::Remove { old, .. } => vec![old.as_ref()],
            };
            for image in images.into_iter().flatten() {
                assert!(image.is_object(), "an image decodes to a map: {image}");
            }
        }
        check(&record, value);
        check(&record, Change::<Order>::from_record(&record));
    }
    event(text);
    event(&format!("{{\"Records\":[{text}]}}"));
}

/// The change must be the one the event name says, with the images the record has.
fn check<T: std::fmt::Debug>(record: &EventRecord, change: Result<Change<T>, RecordError>) {
    let images = &record.change;
    match change {
        Ok(Change::Insert { .. }) => {
            assert_eq!(record.event_name, "INSERT");
            assert!(
                !images.new_image.is_empty(),
                "an insert without a new image"
            );
        }
        Ok(Change::Modify { old, .. }) => {
            assert_eq!(record.event_name, "MODIFY");
            assert!(!images.new_image.is_empty(), "a modify without a new image");
            assert_eq!(old.is_some(), !images.old_image.is_empty());
        }
        Ok(Change::Remove { old, .. }) => {
            assert_eq!(record.event_name, "REMOVE");
            assert_eq!(old.is_some(), !images.old_image.is_empty());
        }
        Err(RecordError::Payload {
            sequence_number,
            sub_sequence,
            error,
        }) => {
            let seq = images.sequence_number.as_deref().unwrap_or("");
            assert_eq!(sequence_number, seq, "the error names another record");
            assert_eq!(sub_sequence, 0);
            assert!(!error.is_empty());
        }
        Err(other) => panic!("a change fails with a payload error, not {other:?}"),
    }
}

/// Processes `text` as a whole event, reporting every failure.
fn event(text: &str) {
    let handled = Arc::new(AtomicU64::new(0));
    let count = handled.clone();
    let handler = changes(move |_change: Change<Value>, record: StreamRecord| {
        count.fetch_add(1, Ordering::Relaxed);
        assert!(
            serde_json::from_str::<Value>(&record.partition_key).is_ok(),
            "the record's keys are not JSON"
        );
        // Lambda's event does not name the shard (see `StreamRecord::shard_id`).
        assert!(record.shard_id.is_empty(), "{}", record.shard_id);
        assert_eq!((record.sub_sequence, record.aggregated), (0, false));
        async { Ok::<(), HandlerError>(()) }
    });
    let options = ProcessingOptions::default().mode(FailureMode::ReportAllFailures);
    let processor = DynamoDbProcessor::new(handler).with_options(options);
    let result = block_on(processor.process(text, None));
    if serde_json::from_str::<serde::de::IgnoredAny>(text).is_err() {
        assert!(result.is_err(), "an event that is not JSON was processed");
    }
    let Ok(report) = result else {
        return;
    };
    assert_eq!(report.processed, handled.load(Ordering::Relaxed));
    assert_eq!(report.not_attempted, 0, "every record is attempted");
    for failure in &report.failures {
        if let RecordError::Payload {
            sequence_number, ..
        } = &failure.error
        {
            assert_eq!(
                &failure.item_identifier, sequence_number,
                "a failure is reported under another record's identifier"
            );
        }
    }
}
