//! What the demo's producer, handlers and workers did, appended as it
//! happens (one lock; the demo's rates are far below where that matters).

use shardkeeper::state::ShardId;
use shardkeeper::worker_events::WorkerEvent;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// A record the producer wrote (Kinesis accepted it).
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
    /// When.
    pub at: Instant,
}

/// Everything that happened, in the order it happened.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Records written.
    pub produced: Vec<Produced>,
    /// Records processed, in processing order.
    pub processed: Vec<Processed>,
    /// Each worker's lease and checkpoint events, by consumer.
    pub events: Vec<(String, WorkerEvent)>,
    /// Consumers killed (no release, no more heartbeats), and when.
    pub killed: Vec<(String, Instant)>,
}

/// The history, shared by every task of the demo.
pub type SharedHistory = Arc<Mutex<History>>;
