//! DynamoDB Streams events: `DynamoDbEvent` in, typed changes to the
//! handler, `DynamoDbEventResponse` out.

use crate::processing::kinesis::RawEvent;
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::source::{EventSource, EventUnits};
use crate::processing::unit::Unit;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use bytes::Bytes;
use serde::Deserialize;
use std::sync::Arc;

/// DynamoDB Streams events (see [`crate::processing::DynamoDbProcessor`]).
///
/// The event does not say which stream shard a batch came from, so
/// de-duplication is per batch: the checkpoint is keyed by the batch's first
/// sequence number, which is what a whole-batch retry (timeout, crash)
/// starts from again; after a reported failure the mapping resumes at the
/// failed record and nothing before it comes back. These checkpoints expire
/// after two days (the stream keeps records for one).
#[derive(Debug, Clone, Copy)]
pub struct DynamoDbStreams;

#[derive(Deserialize)]
struct RecordId {
    dynamodb: SequenceOnly,
}

#[derive(Deserialize)]
struct SequenceOnly {
    #[serde(rename = "SequenceNumber")]
    sequence_number: String,
}

impl EventSource for DynamoDbStreams {
    type Response = DynamoDbEventResponse;

    fn units(event_json: &str) -> Result<EventUnits, String> {
        let event: RawEvent<'_> = serde_json::from_str(event_json)
            .map_err(|e| format!("not a DynamoDB Streams event: {e}"))?;
        let mut stream: Option<String> = None;
        let mut units = Vec::with_capacity(event.records.len());
        for (index, raw) in event.records.iter().enumerate() {
            let parsed = serde_json::from_str::<EventRecord>(raw.get())
                .map_err(|e| e.to_string())
                .and_then(|rec| match rec.change.sequence_number.clone() {
                    Some(seq) => Ok((rec, seq)),
                    None => Err("no SequenceNumber".to_owned()),
                });
            let (rec, seq) = match parsed {
                Ok(ok) => ok,
                Err(error) => {
                    let id: RecordId = serde_json::from_str(raw.get()).map_err(|_| {
                        format!("record {index} is malformed and has no sequence number: {error}")
                    })?;
                    let item = id.dynamodb.sequence_number;
                    let error = RecordError::Malformed { index, error };
                    units.push((item.clone(), Unit::Unreadable(item, error)));
                    continue;
                }
            };
            if stream.is_none() {
                stream = rec.event_source_arn.clone();
            }
            let record = StreamRecord {
                shard_id: Arc::from(""),
                sequence_number: seq.as_str().into(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: serde_json::to_string(&rec.change.keys)
                    .unwrap_or_default()
                    .into(),
                explicit_hash_key: None,
                data: Bytes::copy_from_slice(raw.get().as_bytes()),
                approximate_arrival: Some(
                    rec.change.approximate_creation_date_time.timestamp_millis(),
                ),
                event_source_arn: rec.event_source_arn.as_deref().map(Arc::from),
            };
            units.push((seq, Unit::Records(vec![record])));
        }
        Ok(EventUnits {
            stream,
            shard: None,
            items: units,
        })
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
