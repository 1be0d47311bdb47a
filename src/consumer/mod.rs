//! The self-managed Kinesis consumer: a process that registers in the
//! group, holds the shard leases the rebalancer gives it (or reads every
//! shard with its own checkpoints, standalone), reads its shards by polling
//! or enhanced fan-out, and runs their records through the processing core.
//!
//! - `leases`: how it holds its shards: a group consumer's session, or a
//!   standalone one; its hold on its id; the EFO pool and locks.
//! - `worker`: [`ShardWorker`]: leases, the EFO lock and the drain around a
//!   map of shard pipelines ([`crate::pipeline`]).
//! - [`retrieval`]: the Kinesis reads (GetRecords, SubscribeToShard) behind a
//!   trait, and the Kinesis record source of a pipeline.
//! - `events`: the worker's lease and checkpoint events, for observers.

mod events;
mod leases;
pub mod retrieval;
mod worker;

pub use crate::discovery::{
    discover_shards, discover_shards_in, list_stream_shards, DiscoveryReport,
};
pub use events::{Observer, StopReason, WorkerEvent};
pub use leases::{
    lock_or_grow, stream_arn, ConsumerSession, EfoPool, SessionTick, StandaloneSession,
    MAX_EFO_CONSUMERS,
};
pub use worker::{ShardWorker, WorkerConfig, WorkerReport, SHARD_READ_BYTES_PER_SECOND};
