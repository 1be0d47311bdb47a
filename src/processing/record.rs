//! The record a handler receives.

use crate::processing::outcome::RecordError;
use crate::state::EpochMillis;
use bytes::Bytes;
use serde::de::DeserializeOwned;

/// One user record: a plain Kinesis record, or one user record out of a KPL
/// aggregate (then `aggregated` is true and `sub_sequence` is its position).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRecord {
    /// The shard it came from.
    pub shard_id: String,
    /// The Kinesis record's sequence number.
    pub sequence_number: String,
    /// The position inside a KPL aggregate (0 for a plain record).
    pub sub_sequence: u64,
    /// True if it came out of a KPL aggregate.
    pub aggregated: bool,
    /// Its partition key.
    pub partition_key: String,
    /// Its explicit hash key (aggregated records only).
    pub explicit_hash_key: Option<String>,
    /// Its payload.
    pub data: Bytes,
    /// When Kinesis received it (ms).
    pub approximate_arrival: Option<EpochMillis>,
    /// The stream ARN, as the event gives it.
    pub event_source_arn: Option<String>,
}

impl StreamRecord {
    /// The payload parsed as JSON into `T`; the error names the record and the serde error.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, RecordError> {
        serde_json::from_slice(&self.data).map_err(|e| RecordError::Payload {
            sequence_number: self.sequence_number.clone(),
            sub_sequence: self.sub_sequence,
            error: e.to_string(),
        })
    }
}
