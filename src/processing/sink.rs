//! Where a mode keeps its positions, as the processing core sees it: the
//! [`CheckpointSink`] each mode supplies, and [`NoCheckpoints`] for
//! processing without a state store.

use crate::processing::record::StreamRecord;
use crate::state::{Checkpoint, RecordKey, SequenceNumber, ShardId};
use crate::Result;
use std::future::Future;
use std::time::Instant;

/// Where a mode keeps its positions (what is already done, and what a batch
/// made done) and its per-record state.
pub trait CheckpointSink: Send {
    /// The stored position of the batch, if any: the core skips the records
    /// it covers. Read once per batch, before the first record.
    fn stored(&mut self) -> impl Future<Output = Result<Option<Checkpoint>>> + Send;

    /// Stores `checkpoint`: every record of the batch up to it was handled
    /// or parked. Called during the batch and at its end, with progress
    /// that only moves forward. Returns whether a write was stored
    /// (`false`: the stored position was already at or past it). An error
    /// ends the batch (after [`CheckpointSink::unavailable`]); a lost lease
    /// ([`crate::Error::is_lease_lost`]) ends it at once: nothing more of it
    /// starts, and nothing more is committed.
    fn commit(&mut self, checkpoint: &Checkpoint) -> impl Future<Output = Result<bool>> + Send;

    /// A state-store error of the sink's reads and writes, or of counting a
    /// record's attempts. `Err` ends the batch with it (the default); a
    /// sink that can go on without its state notes it and returns `Ok`,
    /// and from then on ([`CheckpointSink::degraded`]) the core neither
    /// commits nor counts attempts in this batch.
    fn unavailable(&mut self, error: crate::Error) -> Result<()> {
        Err(error)
    }

    /// `true` once the sink goes on without its state (see
    /// [`CheckpointSink::unavailable`]).
    fn degraded(&self) -> bool {
        false
    }

    /// The instant by which the core's state calls for this batch (a
    /// record's attempts, parking it) must come back (`None`: no bound); a
    /// call past it is given up as a transient state error.
    fn calls_until(&self) -> Option<Instant> {
        None
    }

    /// What names this batch's delivery (an invocation's request id), if
    /// anything: a record's failures are counted once per delivery, however
    /// often its count is sent (`None`: each failure counts).
    fn attempt(&self) -> Option<&str> {
        None
    }

    /// The key a record's attempts and parked copy are kept under. By
    /// default the record's shard (for modes whose group names the stream).
    fn record_key(&self, record: &StreamRecord, sequence: &SequenceNumber) -> Result<RecordKey> {
        Ok(RecordKey::in_shard(
            ShardId::new(&*record.shard_id)?,
            sequence.clone(),
            record.sub_sequence,
        ))
    }
}

/// A sink that stores nothing and knows of nothing done (processing without
/// a state store).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCheckpoints;

impl CheckpointSink for NoCheckpoints {
    async fn stored(&mut self) -> Result<Option<Checkpoint>> {
        Ok(None)
    }

    async fn commit(&mut self, _: &Checkpoint) -> Result<bool> {
        Ok(false)
    }
}
