//! Where a shard pipeline stores its position.
//!
//! - `Checkpointer` (here): the one trait of a pipeline's checkpoints, by
//!   scope (a lease, a standalone consumer's own items, an EFO consumer's,
//!   the DynamoDB Streams reader's positions).
//! - `sink`: the adapter through which the processing core commits to a
//!   checkpointer, and the transient policy (left to the next checkpoint, or
//!   the end of the batch).
//! - `paced`: pacing as a layer around any checkpointer: at most one write
//!   a shard every interval, the rest deferred.
//! - `shared`: one checkpointer behind a lock for shards stepped at once.

mod paced;
mod shared;
mod sink;

pub(crate) use paced::{Paced, Pacing};
pub(crate) use shared::Shared;
pub(crate) use sink::{DoneAhead, PipelineSink};

use crate::state::{Checkpoint, EffectsOutcome, EpochMillis, ShardId};
use crate::Result;
use aws_sdk_dynamodb::types::TransactWriteItem;
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

    /// `true` if [`Checkpointer::checkpoint_with`] writes effects with the
    /// checkpoint (a lease holder's).
    fn takes_effects(&self) -> bool {
        false
    }

    /// Stores `checkpoint` as [`Checkpointer::checkpoint`] does, with
    /// `effects` in one transaction: both or neither. Never deferred.
    fn checkpoint_with(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
        effects: Vec<TransactWriteItem>,
    ) -> impl Future<Output = Result<EffectsOutcome>> + Send {
        let _ = (shard, checkpoint, arrival, effects);
        async {
            Err(crate::Error::Event(
                "this checkpointer does not write effects".to_owned(),
            ))
        }
    }
}
