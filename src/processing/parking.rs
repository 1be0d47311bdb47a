//! Setting a poison record aside so its shard can move on.
//!
//! What is set aside is bounded, whatever the record: a payload too large
//! for a DynamoDB item (400 KB) or a Kinesis record (1 MB, base64 in the
//! envelope) is kept as a prefix with its size and SHA-256 (the record can be
//! read again from the stream by its coordinates while it is retained); a
//! partition key longer than Kinesis accepts (256 characters) is hashed; a
//! long error message is cut.

use crate::processing::base64;
use crate::processing::options::{Parking, ProcessingOptions, ATTEMPTS_TTL};
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::state_time::within;
use crate::state::{
    call_kinesis, own_kinesis_client, ForStream, ParkedRecord, RecordKey, StateStore,
};
use crate::Result;
use sha2::{Digest, Sha256};
use std::borrow::Cow;

/// Payloads above this many bytes are kept as a prefix in a parked item
/// (the item also holds its key, the error and a few numbers; DynamoDB
/// items hold at most 400 KB).
pub(crate) const MAX_PARKED_ITEM_DATA: usize = 300 * 1024;
/// Payloads above this many bytes are sent as a prefix in a dead-letter
/// envelope (base64 grows them by a third; a Kinesis record holds 1 MB).
pub(crate) const MAX_ENVELOPE_DATA: usize = 512 * 1024;
/// What a kept prefix holds.
const PREFIX: usize = 1024;
/// Kinesis accepts partition keys of at most this many characters.
const MAX_PARTITION_KEY: usize = 256;
/// Error messages are cut to this many bytes.
const MAX_ERROR: usize = 4096;

/// The SHA-256 of `data`, in lower-case hex.
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The payload as kept: whole, or a prefix with the whole one's SHA-256.
fn bounded_data(data: &[u8], limit: usize) -> (&[u8], Option<String>) {
    if data.len() <= limit {
        (data, None)
    } else {
        (&data[..PREFIX], Some(sha256_hex(data)))
    }
}

fn bounded_error(error: &RecordError) -> String {
    let mut text = error.to_string();
    if text.len() > MAX_ERROR {
        let mut end = MAX_ERROR;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}

/// A partition key Kinesis accepts: the record's, or its SHA-256 if longer.
fn dead_letter_partition_key(record: &StreamRecord) -> String {
    if record.partition_key.chars().count() <= MAX_PARTITION_KEY {
        record.partition_key.to_string()
    } else {
        sha256_hex(record.partition_key.as_bytes())
    }
}

/// What is kept of a record's payload: its data, or, for a record the
/// DynamoDB Streams reader handed over decoded, its text as a Lambda event
/// record (as an event source mapping's record is kept; written here only,
/// for a poison record).
fn payload(record: &StreamRecord) -> Cow<'_, [u8]> {
    match &record.change {
        Some(change) => {
            let arn = record.event_source_arn.as_deref().unwrap_or_default();
            Cow::Owned(change.to_event_json(arn).into_bytes())
        }
        None => Cow::Borrowed(&record.data),
    }
}

/// What names a parked record in its envelope: the SHA-256 of who parked
/// which record (consumer, source, shard or event id, sequence and
/// sub-sequence numbers), the same each time the record is parked, so a
/// replay can drop an envelope sent again.
fn envelope_id(key: &RecordKey, record: &StreamRecord) -> String {
    let identity = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        key.consumer.as_deref().unwrap_or(""),
        record
            .event_source_arn
            .as_deref()
            .or(key.source.as_deref())
            .unwrap_or(""),
        key.shard_id.as_ref().map_or("", |s| s.as_str()),
        key.event_id.as_deref().unwrap_or(""),
        record.sequence_number,
        record.sub_sequence,
    );
    sha256_hex(identity.as_bytes())
}

/// The JSON a parked record carries to a dead-letter stream.
pub(crate) fn envelope(
    key: &RecordKey,
    record: &StreamRecord,
    error: &RecordError,
    attempts: u32,
) -> serde_json::Value {
    let payload = payload(record);
    let (data, sha256) = bounded_data(&payload, MAX_ENVELOPE_DATA);
    serde_json::json!({
        "id": envelope_id(key, record),
        "source": record.event_source_arn.as_deref().or(key.source.as_deref()),
        "consumer": key.consumer,
        "shard_id": key.shard_id.as_ref().map(|s| s.as_str()),
        "event_id": key.event_id,
        "sequence_number": record.sequence_number,
        "sub_sequence": record.sub_sequence,
        "partition_key": record.partition_key,
        "attempts": attempts,
        "error": bounded_error(error),
        "data": base64::encode(data),
        "data_size": payload.len(),
        "data_sha256": sha256,
    })
}

/// What counting a failed attempt of a record, and parking it at its
/// limit, came to (see [`park_at_limit`]).
pub(crate) enum AtLimit {
    /// The attempt could not be counted (nothing was parked).
    Uncounted(crate::Error),
    /// Counted, below the limit (or parking is off): the record stays failed.
    Below,
    /// At the limit and parked, after this many attempts.
    Parked(u32),
    /// At the limit, and parking failed: the record stays failed.
    ParkFailed(crate::Error),
}

/// Counts a failed attempt of `record` (kept under `key`; once for
/// `attempt`, what names the delivery it failed in) and, once it failed
/// `options.max_attempts` times, parks it as `options.parking` says. Each
/// state call is bounded by `until`; their futures are boxed (a failure's
/// path keeps the stack of the record's call small).
pub(crate) async fn park_at_limit(
    store: &StateStore,
    options: &ProcessingOptions,
    key: &RecordKey,
    record: &StreamRecord,
    error: &RecordError,
    attempt: Option<&str>,
    until: Option<std::time::Instant>,
) -> AtLimit {
    let counted = within(
        until,
        "UpdateItem",
        Box::pin(async {
            Ok(store
                .record_state()
                .record_attempt(key, ATTEMPTS_TTL, attempt)
                .await?)
        }),
    )
    .await;
    let attempts = match counted {
        Ok(attempts) => attempts,
        Err(e) => return AtLimit::Uncounted(e),
    };
    if attempts < options.max_attempts {
        return AtLimit::Below;
    }
    let parked = Box::pin(park(
        &options.parking,
        Some(store),
        key,
        record,
        error,
        attempts,
    ));
    match within(until, "park", parked).await {
        Ok(true) => AtLimit::Parked(attempts),
        Ok(false) => AtLimit::Below,
        Err(e) => AtLimit::ParkFailed(e),
    }
}

/// Parks `record` (kept under `key`) where `parking` says. `false` if
/// parking is disabled (or needs a store that is not there): the record
/// stays failed.
pub(crate) async fn park(
    parking: &Parking,
    store: Option<&StateStore>,
    key: &RecordKey,
    record: &StreamRecord,
    error: &RecordError,
    attempts: u32,
) -> Result<bool> {
    match parking {
        Parking::Disabled => Ok(false),
        Parking::StateTable { ttl } => {
            let Some(store) = store else { return Ok(false) };
            let payload = payload(record);
            let (data, sha256) = bounded_data(&payload, MAX_PARKED_ITEM_DATA);
            let mut partition_key = record.partition_key.to_string();
            if partition_key.len() > MAX_ERROR {
                partition_key = sha256_hex(partition_key.as_bytes());
            }
            let parked = ParkedRecord {
                key: key.clone(),
                partition_key,
                data: data.to_vec(),
                data_size: payload.len() as u64,
                data_sha256: sha256,
                error: bounded_error(error),
                attempts,
                parked_at: store.now(),
            };
            store.record_state().park(&parked, *ttl).await?;
            Ok(true)
        }
        Parking::DeadLetterStream { client, stream } => {
            let body = envelope(key, record, error, attempts).to_string();
            let (retry, timeouts) = store
                .map(|s| (s.config().retry, s.config().timeouts))
                .unwrap_or_default();
            let req = own_kinesis_client(client, &timeouts)
                .put_record()
                .for_stream(stream)
                .partition_key(dead_letter_partition_key(record))
                .data(aws_sdk_kinesis::primitives::Blob::new(body));
            call_kinesis(&retry, "PutRecord", || req.clone().send()).await?;
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn record(partition_key: &str, data: Vec<u8>) -> StreamRecord {
        StreamRecord {
            shard_id: Arc::from("shardId-000000000000"),
            sequence_number: Arc::from("1"),
            sub_sequence: 0,
            aggregated: false,
            partition_key: Arc::from(partition_key),
            explicit_hash_key: None,
            data: data.into(),
            approximate_arrival: None,
            event_source_arn: None,
            change: None,
        }
    }

    #[test]
    fn a_partition_key_kinesis_refuses_is_hashed() {
        let short = record("order-1", Vec::new());
        assert_eq!(dead_letter_partition_key(&short), "order-1");
        let long = record(&"k".repeat(300), Vec::new());
        let key = dead_letter_partition_key(&long);
        assert_eq!(key.len(), 64);
        assert_eq!(key, sha256_hex("k".repeat(300).as_bytes()));
    }

    #[test]
    fn an_envelope_keeps_a_bounded_payload() {
        let key = RecordKey {
            consumer: Some("orders-fn".into()),
            source: Some("arn:stream".into()),
            shard_id: None,
            event_id: Some("c4ca4238".into()),
            sequence: crate::state::SequenceNumber::new("1").unwrap(),
            sub_sequence: 0,
        };
        let big = record("k", vec![7; MAX_ENVELOPE_DATA + 1]);
        let error = RecordError::payload("1", "x".repeat(10_000));
        let envelope = envelope(&key, &big, &error, 3);
        let data = base64::decode(envelope["data"].as_str().unwrap().as_bytes()).unwrap();
        assert_eq!(data.len(), PREFIX);
        assert_eq!(envelope["data_size"], MAX_ENVELOPE_DATA + 1);
        assert_eq!(envelope["data_sha256"], sha256_hex(&big.data));
        assert!(envelope["error"].as_str().unwrap().len() <= MAX_ERROR + 3);
    }

    /// A record parked twice (its envelope sent again after a lost answer,
    /// or parked again on a later delivery) carries the same id; another
    /// record, or the same one parked by another consumer, another.
    #[test]
    fn an_envelope_id_names_the_record_and_its_consumer() {
        let key = |consumer: &str, sequence: &str| RecordKey {
            consumer: Some(consumer.into()),
            source: Some("arn:stream".into()),
            shard_id: Some(crate::state::ShardId::new("shardId-000000000000").unwrap()),
            event_id: None,
            sequence: crate::state::SequenceNumber::new(sequence).unwrap(),
            sub_sequence: 0,
        };
        let error = RecordError::payload("1", "bad");
        let id = |k: &RecordKey, r: &StreamRecord| envelope(k, r, &error, 3)["id"].clone();
        let r1 = record("k", b"x".to_vec());
        let mut r2 = record("k", b"x".to_vec());
        r2.sequence_number = Arc::from("2");
        let first = id(&key("orders", "1"), &r1);
        assert_eq!(first.as_str().map(str::len), Some(64));
        assert_eq!(id(&key("orders", "1"), &r1), first);
        assert_ne!(id(&key("orders", "2"), &r2), first);
        assert_ne!(id(&key("audit", "1"), &r1), first);
    }

    /// A record the reader handed over decoded is kept as its text in the
    /// shape of a Lambda event record, as an event source mapping's is.
    #[test]
    fn a_decoded_reader_record_keeps_its_event_text() {
        use crate::processing::Unit;
        use crate::processing::{ChangeKind, ChangeRecord};
        use aws_sdk_dynamodb::types::AttributeValue;
        let change = ChangeRecord {
            shard_id: crate::state::ShardId::new("shardId-1").unwrap(),
            event_id: "e1".into(),
            kind: ChangeKind::Insert,
            sequence_number: crate::state::SequenceNumber::new("42").unwrap(),
            created_at: None,
            keys: [("id".to_owned(), AttributeValue::S("o1".into()))].into(),
            new_image: Some([("id".to_owned(), AttributeValue::S("o1".into()))].into()),
            old_image: None,
            view_type: Some("NEW_IMAGE".into()),
            expired: false,
        };
        let text = change.to_event_json("arn:stream");
        let Unit::Record(decoded) = Unit::change(change, &Arc::from("arn:stream")) else {
            panic!("one record");
        };
        assert!(decoded.data.is_empty());
        assert_eq!(&*payload(&decoded), text.as_bytes());
        let plain = record("k", b"payload".to_vec());
        assert_eq!(&*payload(&plain), b"payload");
    }
}
