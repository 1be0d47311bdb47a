//! A producer of numbered records for a history: each key's records carry
//! their number among that key's records as text (`"0"`, `"1"`, ...). A
//! PutRecords batch holds each key at most once, and failed entries are
//! written again before the next batch, so each key's order in the stream is
//! the order of its numbers. Every accepted record is appended to the
//! history's `produced`.

use super::{Produced, SharedHistory};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What a numbered producer writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedLoad {
    /// The stream.
    pub stream: String,
    /// Records to write in all; `None`: until stopped.
    pub records: Option<usize>,
    /// Partition keys `key-0`, `key-1`, ... (at least 1).
    pub keys: usize,
    /// Records per PutRecords (1 to 500, at most one per key).
    pub batch: usize,
    /// Pause after each batch.
    pub pace: Duration,
}

/// Writes `load` until it is written or `stop` is set; returns the records
/// written. A PutRecords that fails as a whole (throttled, a 500, a dropped
/// connection) is sent again after a short pause, entry for entry.
pub async fn produce_numbered(
    kinesis: &aws_sdk_kinesis::Client,
    load: &NumberedLoad,
    history: &SharedHistory,
    stop: &AtomicBool,
) -> usize {
    let keys = load.keys.max(1);
    let batch = load.batch.clamp(1, 500).min(keys);
    let mut next_n = vec![0u64; keys];
    let (mut written, mut key) = (0, 0);
    let done = |written: usize| load.records.is_some_and(|r| written >= r);
    while !done(written) && !stop.load(Ordering::Relaxed) {
        let mut pending: Vec<(String, u64)> = Vec::new();
        while pending.len() < batch && load.records.is_none_or(|r| written + pending.len() < r) {
            pending.push((format!("key-{key}"), next_n[key]));
            next_n[key] += 1;
            key = (key + 1) % keys;
        }
        while !pending.is_empty() {
            let entries: Vec<_> = pending
                .iter()
                .map(|(k, n)| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(k)
                        .data(Blob::new(n.to_string()))
                        .build()
                        .expect("partition key and data are set")
                })
                .collect();
            let sent = kinesis
                .put_records()
                .stream_name(&load.stream)
                .set_records(Some(entries))
                .send()
                .await;
            let out = match sent {
                Ok(out) => out,
                Err(e) => {
                    tracing::debug!(error = %e, "PutRecords failed; sending the batch again");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let mut failed = Vec::new();
            let mut h = history.lock().expect("history");
            for (entry, result) in pending.into_iter().zip(out.records()) {
                if result.error_code().is_some() {
                    failed.push(entry);
                } else {
                    written += 1;
                    h.produced.push(Produced {
                        key: entry.0,
                        n: entry.1,
                    });
                }
            }
            pending = failed;
        }
        tokio::time::sleep(load.pace).await;
    }
    written
}
