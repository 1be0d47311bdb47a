//! The processing core's sink for one batch of a pipeline, and the policy
//! for a checkpoint that fails in passing.

use super::Checkpointer;
use crate::processing::{CheckpointSink, StreamRecord};
use crate::state::{Checkpoint, EffectsOutcome, EpochMillis, SequenceNumber, ShardId};
use crate::Result;
use aws_sdk_dynamodb::types::TransactWriteItem;
use std::collections::HashSet;
use std::sync::Arc;

/// The core's sink for one batch of a pipeline: what is stored is the
/// pipeline's position (nothing of a batch is done before it); a commit goes
/// to the checkpointer. A transient failure is left to the next checkpoint
/// (counted) where the checkpointer says so; a lost lease ends the batch.
pub(crate) struct PipelineSink<'a, C> {
    pub shard: &'a ShardId,
    pub position: Option<Checkpoint>,
    pub arrival: Option<EpochMillis>,
    pub checkpointer: &'a mut C,
    pub transient_errors: &'a mut u64,
    pub done_ahead: &'a mut DoneAhead,
}

/// The records of a shard done past its position (run past a failure, or
/// ahead of a record of another key still running), kept by its pipeline
/// so the next batch skips them; at most
/// [`MAX_DONE_AFTER`](crate::state::MAX_DONE_AFTER) (those past it run
/// again), and forgotten once a checkpoint covers them.
#[derive(Debug, Default)]
pub(crate) struct DoneAhead(HashSet<(Arc<str>, u64)>);

impl DoneAhead {
    /// Forgets what `checkpoint` covers.
    pub fn forget_covered(&mut self, checkpoint: &Checkpoint) {
        self.0.retain(|(sequence, sub)| {
            SequenceNumber::new(sequence).map_or(true, |s| !checkpoint.covers(&s, *sub))
        });
    }
}

impl<C: Checkpointer> CheckpointSink for PipelineSink<'_, C> {
    async fn stored(&mut self) -> Result<Option<Checkpoint>> {
        Ok(self.position.clone())
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> Result<bool> {
        match self
            .checkpointer
            .checkpoint(self.shard, checkpoint, self.arrival)
            .await
        {
            Err(e)
                if C::LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT
                    && e.is_transient()
                    && !e.is_lease_lost() =>
            {
                *self.transient_errors += 1;
                tracing::warn!(shard = %self.shard, error = %e, "checkpoint failed; the next one covers these records");
                Ok(false)
            }
            other => other,
        }
    }

    fn takes_effects(&self) -> bool {
        self.checkpointer.takes_effects()
    }

    /// A failure ends the batch: its records run again.
    async fn commit_effects(
        &mut self,
        checkpoint: &Checkpoint,
        effects: Vec<TransactWriteItem>,
    ) -> Result<EffectsOutcome> {
        self.checkpointer
            .checkpoint_with(self.shard, checkpoint, self.arrival, effects)
            .await
    }

    fn done(&self, record: &StreamRecord) -> bool {
        !self.done_ahead.0.is_empty()
            && self
                .done_ahead
                .0
                .contains(&(record.sequence_number.clone(), record.sub_sequence))
    }

    fn past_failure(&mut self, record: &StreamRecord) {
        if self.done_ahead.0.len() < crate::state::MAX_DONE_AFTER {
            self.done_ahead
                .0
                .insert((record.sequence_number.clone(), record.sub_sequence));
        }
    }
}
