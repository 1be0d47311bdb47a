//! One checkpointer shared by the pipelines of shards stepped at once: each
//! checkpoint takes it in turn; a batch's start is told to the caller's
//! function, which needs nothing the checkpointer holds.

use super::Checkpointer;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Result;
use tokio::sync::Mutex;

/// A checkpointer behind a lock, for one of the shards stepped at once.
pub(crate) struct Shared<'a, C> {
    pub checkpointer: &'a Mutex<C>,
    /// Called when a batch of a shard starts (what
    /// [`Checkpointer::batch_starts`] of the shared checkpointer would do).
    pub starts: &'a (dyn Fn(&ShardId) + Sync),
}

impl<C: Checkpointer> Checkpointer for Shared<'_, C> {
    const LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT: bool = C::LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT;

    fn batch_starts(&mut self, shard: &ShardId) {
        (self.starts)(shard);
    }

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<bool> {
        self.checkpointer
            .lock()
            .await
            .checkpoint(shard, checkpoint, arrival)
            .await
    }

    /// Shards are stepped at once only at concurrency above 1, where the
    /// core collects no effects.
    fn takes_effects(&self) -> bool {
        false
    }
}
