//! Kinesis events: `KinesisEvent` in, `KinesisEventResponse` out.

use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::source::{EventSource, EventUnits};
use crate::processing::unit::Unit;
use aws_lambda_events::event::streams::{KinesisBatchItemFailure, KinesisEventResponse};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::sync::Arc;

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

/// The fields of a Kinesis event record the processor uses, borrowed from
/// the event text (a string with escapes is the only one copied). Cheaper
/// than `aws_lambda_events`' owned record, which also keeps every other
/// field; measured in docs/BENCHMARKS.md.
#[derive(Deserialize)]
struct RecordRef<'a> {
    #[serde(rename = "eventID", borrow, default)]
    event_id: Option<Cow<'a, str>>,
    #[serde(rename = "eventSourceARN", borrow, default)]
    event_source_arn: Option<Cow<'a, str>>,
    #[serde(borrow)]
    kinesis: PayloadRef<'a>,
}

/// A whole event whose records all parse.
#[derive(Deserialize)]
struct WholeEvent<'a> {
    #[serde(rename = "Records", borrow)]
    records: Vec<RecordRef<'a>>,
}

#[derive(Deserialize)]
struct PayloadRef<'a> {
    #[serde(rename = "partitionKey", borrow)]
    partition_key: Cow<'a, str>,
    #[serde(rename = "sequenceNumber", borrow)]
    sequence_number: Cow<'a, str>,
    #[serde(borrow)]
    data: Cow<'a, str>,
    /// Seconds since the epoch, with a fraction.
    #[serde(rename = "approximateArrivalTimestamp", default)]
    approximate_arrival_timestamp: Option<f64>,
}

/// Reuses the previous record's shard id and stream ARN when they repeat
/// (they do for every record of an event-source-mapped batch).
#[derive(Default)]
struct Shared {
    shard: Option<Arc<str>>,
    arn: Option<Arc<str>>,
}

impl Shared {
    /// The event's units, with the stream and shard its records name.
    fn into_units(self, items: Vec<(String, Unit)>) -> EventUnits {
        EventUnits {
            stream: self.arn.as_deref().map(str::to_owned),
            shard: self.shard.as_deref().map(str::to_owned),
            items,
        }
    }
}

/// The shard of a record whose `eventID` does not name one.
const UNKNOWN_SHARD: &str = "unknown";

fn share(slot: &mut Option<Arc<str>>, value: &str) -> Arc<str> {
    match slot {
        Some(v) if &**v == value => v.clone(),
        _ => {
            let v: Arc<str> = Arc::from(value);
            *slot = Some(v.clone());
            v
        }
    }
}

/// A record's payload, base64 decoded with SIMD (`base64-simd`, measured
/// 2 to 4 times faster than the `base64` crate on event payloads; both
/// accept exactly the padded, canonical standard alphabet); a payload that
/// is not base64 is decoded again by the `base64` crate for an error that
/// says what is wrong.
fn decode_data(data: &str) -> Result<Vec<u8>, String> {
    base64_simd::STANDARD
        .decode_to_vec(data)
        .or_else(|_| BASE64.decode(data))
        .map_err(|e| format!("data is not base64: {e}"))
}

fn unit(rec: &RecordRef<'_>, shared: &mut Shared) -> Result<Unit, String> {
    let data = decode_data(&rec.kinesis.data)?;
    let shard = rec
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard)
        .unwrap_or(UNKNOWN_SHARD);
    let base = StreamRecord {
        shard_id: share(&mut shared.shard, shard),
        sequence_number: rec.kinesis.sequence_number.as_ref().into(),
        sub_sequence: 0,
        aggregated: false,
        partition_key: rec.kinesis.partition_key.as_ref().into(),
        explicit_hash_key: None,
        data: Bytes::new(),
        approximate_arrival: rec
            .kinesis
            .approximate_arrival_timestamp
            .map(|secs| (secs * 1000.0).round() as i64),
        event_source_arn: rec
            .event_source_arn
            .as_deref()
            .map(|arn| share(&mut shared.arn, arn)),
    };
    Ok(Unit::kinesis(base, Bytes::from(data)))
}

impl EventSource for Kinesis {
    type Response = KinesisEventResponse;

    fn units(event: &Bytes) -> Result<EventUnits, String> {
        let text = std::str::from_utf8(event).map_err(|e| format!("not a Kinesis event: {e}"))?;
        Kinesis::units_of(text)
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

impl Kinesis {
    /// The units of an event given as text (payloads are decoded copies,
    /// so nothing borrows the text).
    pub(crate) fn units_of(event_json: &str) -> Result<EventUnits, String> {
        // One pass over the event when every record is well-formed (the
        // common case); else record by record, so one malformed record
        // fails alone.
        if let Ok(event) = serde_json::from_str::<WholeEvent<'_>>(event_json) {
            let mut shared = Shared::default();
            let items = event
                .records
                .iter()
                .enumerate()
                .map(|(index, rec)| {
                    let item = rec.kinesis.sequence_number.to_string();
                    let unit = unit(rec, &mut shared).unwrap_or_else(|error| {
                        Unit::Unreadable(item.clone(), RecordError::Malformed { index, error })
                    });
                    (item, unit)
                })
                .collect();
            return Ok(shared.into_units(items));
        }
        let event: RawEvent<'_> =
            serde_json::from_str(event_json).map_err(|e| format!("not a Kinesis event: {e}"))?;
        let mut shared = Shared::default();
        let items = event
            .records
            .iter()
            .enumerate()
            .map(|(index, raw)| {
                let parsed = serde_json::from_str::<RecordRef<'_>>(raw.get())
                    .map_err(|e| e.to_string())
                    .and_then(|rec| {
                        let item = rec.kinesis.sequence_number.to_string();
                        unit(&rec, &mut shared).map(|u| (item, u))
                    });
                match parsed {
                    Ok(ok) => Ok(ok),
                    Err(e) => {
                        let id: RecordId = serde_json::from_str(raw.get()).map_err(|_| {
                            format!("record {index} is malformed and has no sequence number: {e}")
                        })?;
                        let error = RecordError::Malformed { index, error: e };
                        let item = id.kinesis.sequence_number;
                        Ok((item.clone(), Unit::Unreadable(item, error)))
                    }
                }
            })
            .collect::<Result<_, String>>()?;
        Ok(shared.into_units(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD decoder accepts what the `base64` crate accepts, and a bad
    /// payload's error is the `base64` crate's.
    #[test]
    fn payloads_decode_as_the_base64_crate_decodes_them() {
        for input in [
            "QQ==",
            "QR==",
            "QUI=",
            "QUJ=",
            "QUJD",
            "QQ",
            "QQ=",
            "Q===",
            "",
            "QUJD\n",
            " QUJD",
            "QQ==QQ==",
            "QUJD====",
            "-_8=",
            "aGVsbG8gd29ybGQgaGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=",
        ] {
            let expected = BASE64
                .decode(input)
                .map_err(|e| format!("data is not base64: {e}"));
            assert_eq!(decode_data(input), expected, "{input:?}");
        }
        let error = decode_data("%%% not base64 %%%").unwrap_err();
        assert!(error.contains("Invalid"), "{error}");
    }
}
