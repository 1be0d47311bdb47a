//! How a consumer holds its shards: as a member of a group (leases the
//! rebalancer gives it, kept alive by its session's heartbeat, fenced checkpoints) or
//! standalone (every shard, in its own scope), and the enhanced fan-out
//! consumer it reads with.
//!
//! - `session`: a group consumer's heartbeat, revocations, claims and leave.
//! - `standalone`: a consumer that reads every shard in its own scope.
//! - `mode`: the one of the two a worker runs, and its checkpointer.
//! - `holding`: a process's hold on its consumer id (the heartbeat token).
//! - `pulse`: a session's heartbeats on a task of their own, through long
//!   batches and hung calls.
//! - `efo_pool`: the group's pool of enhanced fan-out consumers, and locks.

mod efo_pool;
mod holding;
mod mode;
mod pulse;
mod session;
mod standalone;

pub use efo_pool::{lock_or_grow, stream_arn, EfoPool, MAX_EFO_CONSUMERS};
pub(crate) use mode::{Mode, ModeCheckpoints};
pub use session::{ConsumerSession, SessionTick};
pub use standalone::StandaloneSession;
