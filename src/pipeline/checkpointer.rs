//! Where a shard pipeline stores its position: the checkpointer of its
//! scope (a lease, a standalone consumer's own items, an EFO consumer's,
//! the DynamoDB Streams reader's positions), and the sink through which the
//! processing core commits to it.

use crate::processing::CheckpointSink;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Result;
use std::future::Future;

/// Stores a shard's position in one scope.
pub(crate) trait Checkpointer: Send {
    /// Whether a checkpoint that fails transiently is left to the next one
    /// (the batch goes on; a lease holder's next checkpoint or hand-over
    /// stores the position) rather than ending the batch.
    const LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT: bool = true;

    /// A batch of `shard` is about to run through the core (for observers
    /// of the scope: a lease's holder reports it is processing).
    fn batch_starts(&mut self, _shard: &ShardId) {}

    /// Stores `checkpoint` for `shard`, with the arrival time of its last
    /// record when known. Returns whether a write was stored (`false`: the
    /// stored position is already past it). A lost lease is the error
    /// [`crate::state::StateError::is_lease_lost`] tells.
    fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// The core's sink for one batch of a pipeline: what is stored is the
/// pipeline's position (nothing of a batch is done before it); a commit goes
/// to the checkpointer. A transient failure is left to the next checkpoint
/// (counted) where the checkpointer says so; a lost lease ends the batch.
pub(super) struct PipelineSink<'a, C> {
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
