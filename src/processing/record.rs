//! The record a handler receives.

use crate::processing::outcome::RecordError;
use crate::processing::ChangeRecord;
use crate::state::EpochMillis;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// One user record: a plain Kinesis record, or one user record out of a KPL
/// aggregate (then `aggregated` is true and `sub_sequence` is its position),
/// or one DynamoDB Streams record: the JSON text of an event-source-mapped
/// one in `data`, or the decoded record the self-managed reader read in
/// `change`.
///
/// Strings are `Arc<str>` (read them as `&str` with `&*` or `as_ref()`):
/// the shard id and stream ARN are shared by every record of a batch, and
/// a clone of a record (which the processor keeps to park it if the
/// handler fails) allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// The shard it came from (empty for a DynamoDB Streams record from an
    /// event source mapping: Lambda's event does not name the shard).
    pub shard_id: Arc<str>,
    /// The Kinesis record's sequence number.
    pub sequence_number: Arc<str>,
    /// The position inside a KPL aggregate (0 for a plain record).
    pub sub_sequence: u64,
    /// True if it came out of a KPL aggregate.
    pub aggregated: bool,
    /// Its partition key.
    pub partition_key: Arc<str>,
    /// Its explicit hash key (aggregated records only).
    pub explicit_hash_key: Option<String>,
    /// Its payload.
    pub data: Bytes,
    /// When Kinesis received it (ms).
    pub approximate_arrival: Option<EpochMillis>,
    /// The stream ARN, as the event gives it.
    pub event_source_arn: Option<Arc<str>>,
    /// The DynamoDB Streams record as [`crate::ddb_streams::StreamReader`]
    /// read it, decoded from the SDK's types (its images as
    /// `aws_sdk_dynamodb` attribute values); `None` for every other record.
    /// Such a record has no text: its `data` is empty, its `partition_key`
    /// is its keys in DynamoDB JSON (as for an event-source-mapped record),
    /// and [`crate::processing::changes`] decodes its images straight from
    /// the attribute values. Shared, so a clone allocates nothing.
    pub change: Option<Arc<ChangeRecord>>,
}

/// Milliseconds since the epoch from an event's seconds (with a fraction),
/// `None` for a value no record can have arrived at (negative, past the year
/// 9999, not a number): an event is input, and an absurd time must not
/// overflow an age.
#[cfg(feature = "esm")]
pub(crate) fn arrival_from_seconds(secs: f64) -> Option<EpochMillis> {
    const LAST: f64 = 253_402_300_799.0; // 9999-12-31T23:59:59Z
    (secs.is_finite() && (0.0..=LAST).contains(&secs)).then(|| (secs * 1000.0).round() as i64)
}

impl StreamRecord {
    /// The payload parsed as JSON into `T`; the error names the record and the serde error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, RecordError> {
        serde_json::from_slice(&self.data).map_err(|e| RecordError::Payload {
            sequence_number: self.sequence_number.to_string(),
            sub_sequence: self.sub_sequence,
            error: e.to_string(),
        })
    }
}
