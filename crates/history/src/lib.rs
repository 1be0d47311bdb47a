//! shardkeeper-history: a consumer system's history (records produced and processed, every
//! handler call, every worker's lease and checkpoint events, kills, the
//! shard lineage) and the checker that proves a run kept the toolkit's
//! guarantees. The demo and the stress run record one and check it; the
//! checker is pure.

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

mod check;
mod produce;
mod record;

pub use check::{check, lease_expiries, Call, Intrusion, Overlap, Verification};
pub use produce::{produce_numbered, NumberedLoad};
pub use record::{recording_handler, recording_observer};

use shardkeeper::consumer::WorkerEvent;
use shardkeeper::state::{SequenceNumber, ShardId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A record a producer wrote (Kinesis accepted it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Partition key.
    pub key: String,
    /// Position of the record among its key's records (0, 1, 2, ...).
    pub n: u64,
}

/// A record a handler processed successfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processed {
    /// The consumer that processed it.
    pub consumer: String,
    /// Its shard.
    pub shard: ShardId,
    /// Partition key.
    pub key: String,
    /// Position among its key's records.
    pub n: u64,
    /// Its sequence number (and sub-sequence inside a KPL aggregate).
    pub sequence: SequenceNumber,
    /// Its sub-sequence number (0 unless aggregated).
    pub sub_sequence: u64,
    /// When.
    pub at: Instant,
}

/// One call of a consumer's handler on one shard: a per-record
/// [`RecordHandler::handle`](shardkeeper::processing::RecordHandler::handle),
/// or a batch handler's `handle_batch` (one span for each shard of its
/// records; a batch is of one shard). It runs from the call's first poll to
/// its return, or to the instant it was dropped unfinished (cut off at its
/// stop-by instant, or its task aborted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The consumer (process) that ran it.
    pub consumer: String,
    /// The shard of its records.
    pub shard: ShardId,
    /// When it started.
    pub start: Instant,
    /// When it returned, or was dropped.
    pub end: Instant,
}

/// Everything that happened, in the order it happened.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Records written.
    pub produced: Vec<Produced>,
    /// Records processed, in processing order.
    pub processed: Vec<Processed>,
    /// Every handler call, in the order they ended.
    pub spans: Vec<Span>,
    /// Each worker's lease and checkpoint events, by consumer.
    pub events: Vec<(String, WorkerEvent)>,
    /// Consumers killed (no release, no more heartbeats), and when.
    pub killed: Vec<(String, Instant)>,
    /// Each shard's parents (from the stream's shard list at the end).
    pub parents: BTreeMap<ShardId, Vec<ShardId>>,
    /// An operator's moves of the group's positions back (a rewind, a
    /// forced reset): from when the move was started to when it returned.
    /// Accepted checkpoints may go back across one; nothing else changes.
    pub moved_back: Vec<(Instant, Instant)>,
}

impl History {
    /// The history's first instant: the earliest it records (of its
    /// processed records, handler calls, worker events and kills). The
    /// checker reports times as offsets from it.
    pub fn origin(&self) -> Option<Instant> {
        let events = self.events.iter().map(|(_, e)| match e {
            WorkerEvent::Gained { at, .. }
            | WorkerEvent::Processing { at, .. }
            | WorkerEvent::Stopped { at, .. } => *at,
            WorkerEvent::Checkpointed { sent, .. } => *sent,
        });
        self.processed
            .iter()
            .map(|p| p.at)
            .chain(self.spans.iter().map(|s| s.start))
            .chain(self.killed.iter().map(|(_, at)| *at))
            .chain(events)
            .min()
    }
}

/// A history shared by every task of a run.
pub type SharedHistory = Arc<Mutex<History>>;
