//! Kinesis events: `KinesisEvent` in, `KinesisEventResponse` out.

use crate::kpl;
use crate::processing::core::Unit;
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::source::EventSource;
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_lambda_events::event::streams::{KinesisBatchItemFailure, KinesisEventResponse};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::time::Duration;

/// The event's records, each kept raw so that one malformed record fails
/// alone instead of failing the whole event's parse.
#[derive(Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(rename = "Records", borrow)]
    pub(crate) records: Vec<&'a RawValue>,
}

/// Just enough of a malformed Kinesis record to report it.
#[derive(Deserialize)]
struct RecordId {
    kinesis: SequenceOnly,
}

#[derive(Deserialize)]
struct SequenceOnly {
    #[serde(rename = "sequenceNumber")]
    sequence_number: String,
}

/// Kinesis Data Streams events (see [`crate::processing::KinesisProcessor`]).
#[derive(Debug, Clone, Copy)]
pub struct Kinesis;

fn unit(rec: &KinesisEventRecord) -> Unit {
    let shard = rec
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard)
        .unwrap_or("unknown");
    record_unit(
        StreamRecord {
            shard_id: shard.to_owned(),
            sequence_number: rec.kinesis.sequence_number.clone(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: rec.kinesis.partition_key.clone(),
            explicit_hash_key: None,
            data: Bytes::new(),
            approximate_arrival: Some(
                rec.kinesis
                    .approximate_arrival_timestamp
                    .0
                    .timestamp_millis(),
            ),
            event_source_arn: rec.event_source_arn.clone(),
        },
        &rec.kinesis.data.0,
    )
}

/// The unit of one Kinesis record: `base` describes it (its `data` is
/// ignored), `data` is its payload, de-aggregated if it is a KPL aggregate.
pub(crate) fn record_unit(base: StreamRecord, data: &[u8]) -> Unit {
    match kpl::deaggregate(data) {
        Ok(None) => Unit::Records(vec![StreamRecord {
            data: Bytes::copy_from_slice(data),
            ..base
        }]),
        Ok(Some(users)) => Unit::Records(
            users
                .into_iter()
                .enumerate()
                .map(|(i, u)| StreamRecord {
                    sub_sequence: i as u64,
                    aggregated: true,
                    partition_key: u.partition_key.to_owned(),
                    explicit_hash_key: u.explicit_hash_key.map(str::to_owned),
                    data: Bytes::copy_from_slice(u.data),
                    ..base.clone()
                })
                .collect(),
        ),
        Err(e) => {
            let error = RecordError::Aggregate {
                sequence_number: base.sequence_number.clone(),
                error: e.to_string(),
            };
            Unit::Broken(
                StreamRecord {
                    data: Bytes::copy_from_slice(data),
                    ..base
                },
                error,
            )
        }
    }
}

impl EventSource for Kinesis {
    type Response = KinesisEventResponse;

    fn units(event_json: &str) -> Result<Vec<(String, Unit)>, String> {
        let event: RawEvent<'_> =
            serde_json::from_str(event_json).map_err(|e| format!("not a Kinesis event: {e}"))?;
        event
            .records
            .iter()
            .enumerate()
            .map(
                |(index, raw)| match serde_json::from_str::<KinesisEventRecord>(raw.get()) {
                    Ok(rec) => Ok((rec.kinesis.sequence_number.clone(), unit(&rec))),
                    Err(e) => {
                        let id: RecordId = serde_json::from_str(raw.get()).map_err(|_| {
                            format!("record {index} is malformed and has no sequence number: {e}")
                        })?;
                        let error = RecordError::Malformed {
                            index,
                            error: e.to_string(),
                        };
                        let item = id.kinesis.sequence_number;
                        Ok((item.clone(), Unit::Unreadable(item, error)))
                    }
                },
            )
            .collect()
    }

    fn checkpoint_ttl() -> Option<Duration> {
        None
    }

    fn response(report: &BatchReport) -> KinesisEventResponse {
        let mut response = KinesisEventResponse::default();
        for failure in &report.failures {
            let mut item = KinesisBatchItemFailure::default();
            item.item_identifier = Some(failure.item_identifier.clone());
            response.batch_item_failures.push(item);
        }
        response
    }
}
