//! What a shard worker tells an observer about its leases and checkpoints:
//! the raw material of a history that can be checked afterwards (no shard
//! held by two consumers at once, no checkpoint moving backwards).

use crate::state::{Checkpoint, ShardId};
use std::sync::Arc;
use std::time::Instant;

/// One lease or checkpoint event of one worker.
///
/// Times are taken so that intervals are conservative: a worker learns of a
/// lease only after the write that gave it to it, and a checkpoint's `sent`
/// time is taken before the request left. So for one shard, the interval
/// from `Gained` to the last `Checkpointed.sent` of one holder can only
/// overlap another holder's if fencing failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEvent {
    /// The worker learned it holds the shard, starting at `position`.
    Gained {
        /// The shard.
        shard: ShardId,
        /// The stored checkpoint it resumes from, if any.
        position: Option<Checkpoint>,
        /// When it learned.
        at: Instant,
    },
    /// A fenced checkpoint was accepted.
    Checkpointed {
        /// The shard.
        shard: ShardId,
        /// What was stored.
        checkpoint: Checkpoint,
        /// When the request was sent.
        sent: Instant,
    },
    /// A batch of the shard starts processing under a lease that holds, as
    /// this process's clock tells, until `lease_expiry` (the send time of its
    /// session's last heartbeat plus the term): nothing of the batch may run after it.
    Processing {
        /// The shard.
        shard: ShardId,
        /// When the batch started.
        at: Instant,
        /// When the lease runs out unless the session beats again.
        lease_expiry: Instant,
    },
    /// The worker stopped reading the shard: the lease was lost, handed
    /// over to a claimant, released at a stop, or ended at SHARD_END.
    Stopped {
        /// The shard.
        shard: ShardId,
        /// Why.
        why: StopReason,
        /// When. [`StopReason::Completed`] is reported just before the
        /// write that depletes the shard is sent (its children cannot be
        /// leased before), and followed by [`StopReason::Lost`] if that write
        /// is refused.
        at: Instant,
    },
}

/// Why a worker stopped reading a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The lease was found taken or expired.
    Lost,
    /// Handed over to a claimant (checkpointed first).
    HandedOff,
    /// Released at a stop (checkpointed first).
    Released,
    /// Read to SHARD_END and depleted.
    Completed,
}

/// Receives a worker's events (cheap to clone; called inline, keep it fast).
pub type Observer = Arc<dyn Fn(WorkerEvent) + Send + Sync>;
