//! Setting a poison record aside so its shard can move on.

use crate::processing::options::Parking;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::state::{call_kinesis, ParkedRecord, RecordKey, Result, StateStore};
use base64::Engine;

/// The JSON a parked record carries to a dead-letter stream.
pub(crate) fn envelope(
    key: &RecordKey,
    record: &StreamRecord,
    error: &RecordError,
    attempts: u32,
) -> serde_json::Value {
    serde_json::json!({
        "source": record.event_source_arn,
        "shard_id": key.shard_id.as_str(),
        "sequence_number": record.sequence_number,
        "sub_sequence": record.sub_sequence,
        "partition_key": record.partition_key,
        "attempts": attempts,
        "error": error.to_string(),
        "data": base64::engine::general_purpose::STANDARD.encode(&record.data),
    })
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
            let parked = ParkedRecord {
                key: key.clone(),
                partition_key: record.partition_key.to_string(),
                data: record.data.to_vec(),
                error: error.to_string(),
                attempts,
                parked_at: store.now(),
            };
            store.park_record(&parked, *ttl).await?;
            Ok(true)
        }
        Parking::DeadLetterStream { client, stream } => {
            let body = envelope(key, record, error, attempts).to_string();
            let req = client
                .put_record()
                .stream_name(stream)
                .partition_key(&*record.partition_key)
                .data(aws_sdk_kinesis::primitives::Blob::new(body));
            let retry = store.map(|s| s.config().retry).unwrap_or_default();
            call_kinesis(&retry, "PutRecord", || req.clone().send()).await?;
            Ok(true)
        }
    }
}
