//! Kinesis events: `KinesisEvent` in, `KinesisEventResponse` out.

use crate::lambda::source::{sequence_of_malformed, EventSource, EventUnits};
use crate::processing::base64;
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use aws_lambda_events::event::streams::{KinesisBatchItemFailure, KinesisEventResponse};
use bytes::{Bytes, BytesMut};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// The event's records, each kept raw so that one malformed record fails
/// alone instead of failing the whole event's parse.
#[derive(Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(rename = "Records", borrow)]
    pub(crate) records: Vec<&'a RawValue>,
}

/// Kinesis Data Streams events (see [`crate::lambda::KinesisProcessor`]).
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

/// A whole event whose records all parse, each record made a unit as it
/// is read (no vector of parsed records in between).
struct WholeEvent<'r> {
    reader: &'r mut Reader,
}

/// Makes units of records: the shard id and ARN shared by the records
/// that repeat them, the payloads decoded into one buffer that the
/// records share (one allocation for the event, not one per record).
struct Reader {
    shared: Shared,
    payloads: BytesMut,
    items: Vec<(Arc<str>, Unit)>,
}

impl Reader {
    /// A reader for an event of `len` bytes: room for every payload (base64
    /// decodes to at most three quarters of its length).
    fn new(len: usize) -> Reader {
        Reader {
            shared: Shared::default(),
            payloads: BytesMut::with_capacity(len / 4 * 3),
            items: Vec::new(),
        }
    }

    /// The unit of the record at `index`, or the record unreadable.
    fn push(&mut self, index: usize, rec: &RecordRef<'_>) {
        // The item identifier is the sequence number: one string for both.
        let item: Arc<str> = Arc::from(rec.kinesis.sequence_number.as_ref());
        let unit = unit(rec, item.clone(), &mut self.shared, &mut self.payloads);
        let unit = unit.unwrap_or_else(|error| {
            Unit::Unreadable(item.to_string(), RecordError::Malformed { index, error })
        });
        self.items.push((item, unit));
    }
}

impl<'de> DeserializeSeed<'de> for WholeEvent<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WholeEvent<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kinesis event")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key != "Records" {
                map.next_value::<IgnoredAny>()?;
            } else if seen {
                return Err(de::Error::duplicate_field("Records"));
            } else {
                seen = true;
                map.next_value_seed(Records {
                    reader: &mut *self.reader,
                })?;
            }
        }
        if !seen {
            return Err(de::Error::missing_field("Records"));
        }
        Ok(())
    }
}

/// The `Records` of a [`WholeEvent`].
struct Records<'r> {
    reader: &'r mut Reader,
}

impl<'de> DeserializeSeed<'de> for Records<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Records<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of Kinesis records")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        while let Some(rec) = seq.next_element::<RecordRef<'de>>()? {
            self.reader.push(index, &rec);
            index += 1;
        }
        Ok(())
    }
}

#[derive(Deserialize)]
struct PayloadRef<'a> {
    #[serde(rename = "partitionKey", borrow)]
    partition_key: Cow<'a, str>,
    #[serde(rename = "sequenceNumber", borrow)]
    sequence_number: Cow<'a, str>,
    #[serde(borrow)]
    data: Cow<'a, str>,
    /// Seconds since the epoch, with a fraction: a number as Lambda sends
    /// it, or the same number as a string (as `aws_lambda_events` writes it).
    #[serde(
        rename = "approximateArrivalTimestamp",
        default,
        deserialize_with = "seconds"
    )]
    approximate_arrival_timestamp: Option<f64>,
}

/// A number of seconds, given as a number or as a string holding one (a
/// visitor, not an untagged enum: no buffering on the hot path).
fn seconds<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct Seconds;
    impl<'de> serde::de::Visitor<'de> for Seconds {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("seconds since the epoch, as a number or a string")
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            v.parse().map(Some).map_err(|_| {
                E::custom(format!("approximateArrivalTimestamp {v:?} is not a number"))
            })
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }
    d.deserialize_option(Seconds)
}

/// Reuses the previous record's shard id and stream ARN when they repeat
/// (they do for every record of an event-source-mapped batch).
#[derive(Default)]
struct Shared {
    shard: Option<Arc<str>>,
    arn: Option<Arc<str>>,
    /// A record's `eventID` named no shard.
    unnamed_shard: bool,
    /// KPL aggregates holding a user record whose key is not the outer
    /// record's (see [`EventUnits::mixed_key_aggregates`]).
    mixed_key_aggregates: u64,
}

impl Reader {
    /// The event's units, with the stream and shard its records name.
    fn into_units(self) -> EventUnits {
        EventUnits {
            stream: self.shared.arn.as_deref().map(str::to_owned),
            shard: self
                .shared
                .shard
                .as_deref()
                .filter(|_| !self.shared.unnamed_shard)
                .map(str::to_owned),
            items: self.items,
            event_ids: Vec::new(),
            mixed_key_aggregates: self.shared.mixed_key_aggregates,
        }
    }
}

/// The shard of a record whose `eventID` does not name one.
const UNKNOWN_SHARD: &str = "unknown";

/// `value`, as the string in `slot` if it is the same text (then nothing is
/// allocated), else as a new string kept in `slot`.
pub(crate) fn share(slot: &mut Option<Arc<str>>, value: &str) -> Arc<str> {
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
/// 2 to 4 times faster than the `base64` crate on event payloads; it
/// accepts exactly the padded, canonical standard alphabet) into the free
/// end of `buffer`, and split off it; for a payload that is not base64,
/// an error that says what is wrong.
fn decode_data(data: &str, buffer: &mut BytesMut) -> Result<Bytes, String> {
    let simd = base64_simd::STANDARD;
    if let Ok(len) = simd.decoded_length(data.as_bytes()) {
        buffer.clear();
        buffer.resize(len, 0);
        let decoded = simd
            .decode(
                data.as_bytes(),
                base64_simd::Out::from_slice(&mut buffer[..]),
            )
            .map(|out| out.len());
        if let Ok(decoded) = decoded {
            buffer.truncate(decoded);
            return Ok(buffer.split().freeze());
        }
    }
    Err(format!(
        "data is not base64: {}",
        base64::why_not(data.as_bytes())
    ))
}

fn unit(
    rec: &RecordRef<'_>,
    sequence_number: Arc<str>,
    shared: &mut Shared,
    payloads: &mut BytesMut,
) -> Result<Unit, String> {
    let data = decode_data(&rec.kinesis.data, payloads)?;
    let shard = rec
        .event_id
        .as_deref()
        .and_then(|id| id.split_once(':'))
        .map(|(shard, _)| shard)
        .unwrap_or_else(|| {
            shared.unnamed_shard = true;
            UNKNOWN_SHARD
        });
    let base = StreamRecord {
        shard_id: share(&mut shared.shard, shard),
        sequence_number,
        sub_sequence: 0,
        aggregated: false,
        partition_key: rec.kinesis.partition_key.as_ref().into(),
        explicit_hash_key: None,
        data: Bytes::new(),
        approximate_arrival: rec
            .kinesis
            .approximate_arrival_timestamp
            .and_then(crate::processing::record::arrival_from_seconds),
        event_source_arn: rec
            .event_source_arn
            .as_deref()
            .map(|arn| share(&mut shared.arn, arn)),
        change: None,
    };
    let outer = base.partition_key.clone();
    let unit = Unit::kinesis(base, data);
    if let Unit::Records(users) = &unit {
        if users.iter().any(|u| u.partition_key != outer) {
            shared.mixed_key_aggregates += 1;
        }
    }
    Ok(unit)
}

impl EventSource for Kinesis {
    type Response = KinesisEventResponse;

    fn units(event: &Bytes) -> crate::Result<EventUnits> {
        let text = std::str::from_utf8(event)
            .map_err(|e| crate::Error::Event(format!("not a Kinesis event: {e}")))?;
        Kinesis::units_of(text).map_err(crate::Error::Event)
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
        let mut reader = Reader::new(event_json.len());
        let mut json = serde_json::Deserializer::from_str(event_json);
        let whole = WholeEvent {
            reader: &mut reader,
        }
        .deserialize(&mut json)
        .and_then(|()| json.end());
        if whole.is_ok() {
            return Ok(reader.into_units());
        }
        let event: RawEvent<'_> =
            serde_json::from_str(event_json).map_err(|e| format!("not a Kinesis event: {e}"))?;
        let mut reader = Reader::new(event_json.len());
        for (index, raw) in event.records.iter().enumerate() {
            match serde_json::from_str::<RecordRef<'_>>(raw.get()) {
                Ok(rec) => reader.push(index, &rec),
                Err(e) => {
                    let item = sequence_of_malformed(raw.get()).ok_or_else(|| {
                        format!("record {index} is malformed and has no sequence number: {e}")
                    })?;
                    let error = RecordError::Malformed {
                        index,
                        error: e.to_string(),
                    };
                    let unit = Unit::Unreadable(item.clone(), error);
                    reader.items.push((item.into(), unit));
                }
            }
        }
        Ok(reader.into_units())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SIMD decoder accepts what the `base64` crate accepts, and a bad
    /// payload's error is the `base64` crate's.
    #[test]
    fn payloads_decode_as_the_one_base64_decoder_decodes_them() {
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
            let expected = base64::decode(input.as_bytes())
                .map(Bytes::from)
                .map_err(|e| format!("data is not base64: {e}"));
            let mut buffer = BytesMut::with_capacity(8);
            assert_eq!(decode_data(input, &mut buffer), expected, "{input:?}");
        }
        let error = decode_data("%%% not base64 %%%", &mut BytesMut::new()).unwrap_err();
        assert!(error.contains("invalid byte '%'"), "{error}");
    }

    fn record(sequence: &str, data: &str) -> serde_json::Value {
        serde_json::json!({
            "eventID": format!("shardId-000000000007:{sequence}"),
            "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/s",
            "kinesis": { "partitionKey": "k", "sequenceNumber": sequence, "data": data },
        })
    }

    /// The payloads share one buffer: each record keeps its own bytes,
    /// around a payload that is not base64 too; the item identifier is the
    /// record's sequence number, the same string.
    #[test]
    fn each_record_keeps_its_own_payload_from_the_shared_buffer() {
        let b64 = |text: &str| base64::encode(text.as_bytes());
        let event = serde_json::json!({ "Records": [
            record("1", &b64("first")),
            record("2", "QUJD%%%="),
            record("3", &b64("")),
            record("4", &b64("fourth, longer than the others")),
        ]})
        .to_string();
        let units = Kinesis::units_of(&event).unwrap();
        assert_eq!(units.shard.as_deref(), Some("shardId-000000000007"));
        let mut payloads = Vec::new();
        for (item, unit) in &units.items {
            match unit {
                Unit::Record(record) => {
                    assert!(Arc::ptr_eq(item, &record.sequence_number));
                    payloads.push(std::str::from_utf8(&record.data).unwrap().to_owned());
                }
                Unit::Unreadable(id, RecordError::Malformed { index: 1, error }) => {
                    assert_eq!((&**item, id.as_str()), ("2", "2"));
                    assert!(error.contains("not base64"), "{error}");
                    payloads.push("(unreadable)".to_owned());
                }
                other => panic!("unexpected unit {other:?}"),
            }
        }
        assert_eq!(
            payloads,
            [
                "first",
                "(unreadable)",
                "",
                "fourth, longer than the others"
            ]
        );
    }
}
