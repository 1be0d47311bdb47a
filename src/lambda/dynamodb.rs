//! DynamoDB Streams events: `DynamoDbEvent` in, typed changes to the
//! handler, `DynamoDbEventResponse` out.

use crate::lambda::kinesis::{share, RawEvent};
use crate::lambda::source::{sequence_of_malformed, EventSource, EventUnits};
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use crate::scan;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;

/// DynamoDB Streams events (see [`crate::lambda::DynamoDbProcessor`]).
///
/// The event does not say which stream shard a batch came from, and
/// DynamoDB Streams sequence numbers are ordered only within a shard: a
/// batch's progress is keyed by its first record's event id and sequence
/// number (what a whole-batch retry starts from again), and attempts and
/// parked records by each record's event id.
#[derive(Debug, Clone, Copy)]
pub struct DynamoDbStreams;

/// The fields of a DynamoDB Streams event record the processor uses,
/// borrowed from the event text.
#[derive(Deserialize)]
struct ChangeRef<'a> {
    #[serde(rename = "eventSourceARN", borrow, default)]
    event_source_arn: Option<Cow<'a, str>>,
    #[serde(rename = "eventID", borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    dynamodb: ChangeFields<'a>,
}

#[derive(Deserialize)]
struct ChangeFields<'a> {
    #[serde(rename = "SequenceNumber", borrow)]
    sequence_number: Cow<'a, str>,
    /// Seconds since the epoch.
    #[serde(rename = "ApproximateCreationDateTime", default)]
    created: Option<f64>,
    #[serde(rename = "Keys", borrow, default)]
    keys: Option<&'a RawValue>,
}

/// The fields of a record the processor reads, and those of its `dynamodb`
/// object.
const RECORD_FIELDS: [&str; 2] = ["eventSourceARN", "eventID"];
const CHANGE_FIELDS: [&str; 3] = ["SequenceNumber", "ApproximateCreationDateTime", "Keys"];

impl<'a> ChangeRef<'a> {
    /// The fields found by the scanner (the event is already validated), or
    /// `None` where only serde reads the record as it must (then serde's
    /// error is the record's).
    fn scan(record: &'a str) -> Option<ChangeRef<'a>> {
        let (fields, dynamodb) =
            scan::nested_fields(record, RECORD_FIELDS, "dynamodb", CHANGE_FIELDS)?;
        ChangeRef::from_spans(fields, dynamodb)
    }

    /// The fields whose spans the scanner found, or `None` as for
    /// [`ChangeRef::scan`].
    fn from_spans(
        [arn, event_id]: scan::Spans<'a, 2>,
        dynamodb: Option<scan::Spans<'a, 3>>,
    ) -> Option<ChangeRef<'a>> {
        let [seq, created, keys] = dynamodb?;
        let keys = match keys {
            None | Some("null") => None,
            Some(keys) => Some(serde_json::from_str::<&RawValue>(keys).ok()?),
        };
        Some(ChangeRef {
            event_source_arn: scan::optional_string(arn)?,
            event_id: scan::optional_string(event_id)?,
            dynamodb: ChangeFields {
                sequence_number: scan::string(seq?)?,
                created: scan::optional_number(created)?,
                keys,
            },
        })
    }
}

impl DynamoDbStreams {
    /// The units of an event, or why it is not a DynamoDB Streams event.
    pub(crate) fn units_of(event: &Bytes) -> Result<EventUnits, String> {
        let event_json =
            std::str::from_utf8(event).map_err(|e| format!("not a DynamoDB Streams event: {e}"))?;
        let body = event;
        // Each record's text and, where the scanner reads them plainly, its
        // fields: in one pass that also checks the event is valid JSON, or
        // else validated by serde first and then scanned record by record.
        let records: Vec<(&str, Option<ChangeRef<'_>>)> =
            match scan::event_records(event_json, RECORD_FIELDS, "dynamodb", CHANGE_FIELDS) {
                Some(records) => records
                    .into_iter()
                    .map(|(text, fields, dynamodb)| (text, ChangeRef::from_spans(fields, dynamodb)))
                    .collect(),
                None => {
                    let event: RawEvent<'_> = serde_json::from_str(event_json)
                        .map_err(|e| format!("not a DynamoDB Streams event: {e}"))?;
                    event
                        .records
                        .iter()
                        .map(|raw| (raw.get(), ChangeRef::scan(raw.get())))
                        .collect()
                }
            };
        let mut stream: Option<String> = None;
        // The stream ARN, shared by the records that repeat it, and the
        // shard id: the event does not name the shard.
        let mut arn: Option<Arc<str>> = None;
        let no_shard: Arc<str> = Arc::from("");
        let mut units = Vec::with_capacity(records.len());
        let mut event_ids = Vec::with_capacity(records.len());
        for (index, (text, scanned)) in records.into_iter().enumerate() {
            // Only what the processor needs; the handler decodes the images
            // (one full parse per record).
            let parsed = match scanned {
                Some(rec) => Ok(rec),
                None => serde_json::from_str::<ChangeRef<'_>>(text).map_err(|e| e.to_string()),
            };
            let rec = match parsed {
                Ok(rec) => rec,
                Err(error) => {
                    let item = sequence_of_malformed(text).ok_or_else(|| {
                        format!("record {index} is malformed and has no sequence number: {error}")
                    })?;
                    let error = RecordError::Malformed { index, error };
                    units.push((Arc::from(item.as_str()), Unit::Unreadable(item, error)));
                    continue;
                }
            };
            if stream.is_none() {
                stream = rec.event_source_arn.as_deref().map(str::to_owned);
            }
            let seq: Arc<str> = Arc::from(rec.dynamodb.sequence_number.as_ref());
            if let Some(id) = rec.event_id.as_deref() {
                event_ids.push((seq.clone(), Arc::from(id)));
            }
            let record = StreamRecord {
                shard_id: no_shard.clone(),
                sequence_number: seq.clone(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: rec.dynamodb.keys.map_or("{}", RawValue::get).into(),
                explicit_hash_key: None,
                // The record's text, a slice of the event (not a copy).
                data: body.slice_ref(text.as_bytes()),
                approximate_arrival: rec
                    .dynamodb
                    .created
                    .and_then(crate::processing::record::arrival_from_seconds),
                event_source_arn: rec
                    .event_source_arn
                    .as_deref()
                    .map(|value| share(&mut arn, value)),
                change: None,
            };
            units.push((seq, Unit::Record(record)));
        }
        Ok(EventUnits {
            stream,
            shard: None,
            items: units,
            event_ids,
            mixed_key_aggregates: 0,
        })
    }
}

impl EventSource for DynamoDbStreams {
    type Response = DynamoDbEventResponse;

    fn units(event: &Bytes) -> crate::Result<EventUnits> {
        Self::units_of(event).map_err(crate::Error::Event)
    }

    fn response(report: &BatchReport) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        for failure in &report.failures {
            let mut item = DynamoDbBatchItemFailure::default();
            item.item_identifier = Some(failure.item_identifier.clone());
            response.batch_item_failures.push(item);
        }
        response
    }
}
