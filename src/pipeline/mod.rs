//! The shard pipeline: how one shard is consumed in every self-managed mode
//! (polling, enhanced fan-out, standalone, the DynamoDB Streams reader).
//! A record source reads the shard from its position, the processing core
//! runs the records, and a checkpointer stores how far they are done.
//!
//! - `source`: the `RecordSource` trait (records from this position).
//! - `checkpoint`: the `Checkpointer` trait (commit this position), the
//!   sink that turns it into the core's [`crate::processing::CheckpointSink`]
//!   with the transient policy, and pacing as a layer around it.
//! - `shard`: `ShardPipeline`, one shard's position, source and report,
//!   and its step.
//! - `map`: `ShardMap`, the pipelines of the shards one consumer reads,
//!   which are due, parent before child.
//! - `end`: where a bounded group (a backfill) stops reading a shard.
//! - `start`: [`InitialPosition`], where a shard with no checkpoint starts,
//!   and the margin of a lost LATEST start.
//! - `report`: [`ShardReport`], what one shard's pipeline did; a worker's and
//!   a reader's reports are sums of them.
//!
//! The shard worker (`worker`) and the DynamoDB Streams reader
//! (`ddb-streams`) each use their own part of it; built with one of them,
//! the other's parts are unused.
#![cfg_attr(
    not(all(feature = "worker", feature = "ddb-streams")),
    allow(dead_code, unused_imports)
)]

mod checkpoint;
mod end;
mod map;
mod report;
mod shard;
mod source;
mod start;

pub(crate) use checkpoint::{Checkpointer, Paced, Pacing, Shared};
pub(crate) use map::ShardMap;
pub use report::ShardReport;
pub(crate) use shard::{ShardPipeline, Step};
pub(crate) use source::{Fetched, RecordSource, SourceBatch};
pub use start::InitialPosition;
pub(crate) use start::{unpinned, LATEST_REOPEN_MARGIN_MS};

#[cfg(test)]
mod tests;
