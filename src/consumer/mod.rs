//! The self-managed Kinesis consumer: a process that registers in the
//! group, holds the shard leases the rebalancer gives it (or reads every
//! shard with its own checkpoints, standalone), reads its shards by polling
//! or enhanced fan-out, and runs their records through the processing core.
//!
//! - `session`: a group consumer's heartbeat, renewals, claims and leave.
//! - `standalone`: a consumer that reads every shard in its own scope.
//! - `mode`: the one of the two a worker runs.
//! - `holding`: a process's hold on its consumer id (the heartbeat token).
//! - `worker`: [`ShardWorker`]: leases, the EFO lock and the drain around a
//!   map of shard pipelines ([`crate::pipeline`]).
//! - [`reads`]: the Kinesis reads (GetRecords, SubscribeToShard) behind a
//!   trait, and the Kinesis record source of a pipeline.
//! - `efo_pool`: the group's pool of enhanced fan-out consumers.
//! - `discovery`: the stream's shards, parents first.
//! - `events`: the worker's lease and checkpoint events, for observers.

mod discovery;
mod efo_pool;
mod events;
mod holding;
mod mode;
pub mod reads;
mod session;
mod standalone;
mod worker;

pub use discovery::{
    discover_shards, discover_shards_in, list_stream_shards, parents_first, DiscoveryReport,
};
pub use efo_pool::{lock_or_grow, stream_arn, EfoPool, MAX_EFO_CONSUMERS};
pub use events::{Observer, StopReason, WorkerEvent};
pub use session::{ConsumerSession, SessionTick, FULL_SCAN_EVERY};
pub use standalone::StandaloneSession;
pub(crate) use worker::LATEST_REOPEN_MARGIN_MS;
pub use worker::{
    InitialPosition, ShardWorker, WorkerConfig, WorkerReport, SHARD_READ_BYTES_PER_SECOND,
};
