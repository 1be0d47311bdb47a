//! Where a mode keeps its positions, as the processing core sees it: the
//! [`CheckpointSink`] each mode supplies, and [`NoCheckpoints`] for
//! processing without a state store.

use crate::processing::record::StreamRecord;
use crate::state::{Checkpoint, EffectsOutcome, RecordKey, SequenceNumber, ShardId};
use crate::Result;
use aws_sdk_dynamodb::types::TransactWriteItem;
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

    /// `true` if an earlier delivery of this batch died in it (its process
    /// ended mid-batch): the core then runs one record a call and tells the
    /// sink of each record before it starts ([`CheckpointSink::before_record`]).
    /// Known once [`CheckpointSink::stored`] was read.
    fn guarded(&self) -> bool {
        false
    }

    /// `true` if `record` is done though the stored position does not cover
    /// it (run or parked past an earlier failure): it is skipped.
    fn done(&self, record: &StreamRecord) -> bool {
        let _ = record;
        false
    }

    /// `record` was handled (or parked) past the batch's progress (after a
    /// failure, or while an earlier record of another key still ran:
    /// [`ProcessingOptions::concurrency`](crate::processing::ProcessingOptions::concurrency)),
    /// so no checkpoint covers it yet: a sink that can remembers it as done
    /// (and may forget it once a checkpoint covers it). Told before each
    /// commit, perhaps more than once.
    fn past_failure(&mut self, record: &StreamRecord) {
        let _ = record;
    }

    /// `true` while the sink wants to be told of each record before it
    /// starts ([`CheckpointSink::before_record`]).
    fn watches_records(&self) -> bool {
        false
    }

    /// `record` starts now (called before each user record the handler is
    /// given, while [`CheckpointSink::watches_records`]): a guarded sink
    /// marks it first, so that a death in it is known to the next delivery.
    /// Returns what names the earlier delivery that died in this very
    /// record, if one did: the core counts that as a failed attempt.
    fn before_record(
        &mut self,
        record: &StreamRecord,
    ) -> impl Future<Output = Result<Option<String>>> + Send {
        let _ = record;
        async { Ok(None) }
    }

    /// The next commit is the batch's last: the delivery ends.
    fn ending(&mut self) {}

    /// The batch's run ended (after its last commit): a sink that marks
    /// deliveries says this one ended, unless its last write said so.
    fn ended(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// `true` if the sink writes effects with its progress
    /// ([`CheckpointSink::commit_effects`]): the core then collects what a
    /// record's call stages ([`stage_effect`](crate::processing::stage_effect)).
    fn takes_effects(&self) -> bool {
        false
    }

    /// Stores `checkpoint` as [`CheckpointSink::commit`] does, with
    /// `effects` (of records it covers) in one transaction: both or neither.
    /// Called instead of `commit` while effects wait, only if the sink
    /// [`takes_effects`](CheckpointSink::takes_effects).
    fn commit_effects(
        &mut self,
        checkpoint: &Checkpoint,
        effects: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<EffectsOutcome>> + Send {
        let _ = (checkpoint, effects);
        async {
            Err(crate::Error::Event(
                "this checkpoint sink does not write effects".to_owned(),
            ))
        }
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
