//! The processing core's sink for one batch of a pipeline, and the policy
//! for a checkpoint that fails in passing.

use super::Checkpointer;
use crate::processing::CheckpointSink;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Result;

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
}
