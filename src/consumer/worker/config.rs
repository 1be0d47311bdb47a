//! How a shard worker reads, and what it reports.

use crate::consumer::EfoPool;
use crate::pipeline::{InitialPosition, ShardReport};
use crate::processing::ProcessingOptions;
use std::time::Duration;

/// Kinesis serves each shard at most this many bytes per second to GetRecords.
pub const SHARD_READ_BYTES_PER_SECOND: u64 = 2 * 1024 * 1024;

/// How the worker reads.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Where shards with no checkpoint start.
    pub initial_position: InitialPosition,
    /// How often the session heartbeats: one write keeps every lease (KCL
    /// renews each lease every ~3.3 s).
    pub renew_every: Duration,
    /// The least time between two GetRecords of one shard (Kinesis allows 5
    /// per second). After a large answer the worker also waits long enough to
    /// stay under `read_bytes_per_second`.
    pub min_poll_interval: Duration,
    /// The read rate one shard is paced to: Kinesis serves
    /// [`SHARD_READ_BYTES_PER_SECOND`] per shard to all its polling readers.
    pub read_bytes_per_second: u64,
    /// How long to wait before polling a shard that returned nothing.
    pub idle_poll_interval: Duration,
    /// Records per GetRecords (at most 10,000).
    pub max_records: i32,
    /// Failure mode, attempts and parking of the processing core.
    pub processing: ProcessingOptions,
    /// At a stop: `true` (default) leaves the group (checkpoint, release,
    /// deregister) so others take over at once; `false` checkpoints and keeps
    /// the leases, for a process that comes back under the same consumer id.
    pub release_on_stop: bool,
    /// Read with enhanced fan-out (SubscribeToShard) through an EFO consumer
    /// locked from this pool, instead of polling. A worker that finds no
    /// free EFO consumer (and the pool at its size) marks itself inactive and
    /// reads nothing until one is free.
    pub enhanced_fan_out: Option<EfoPool>,
    /// How long one subscription is kept before it is renewed from where it
    /// stands (Kinesis ends every subscription after 5 minutes).
    pub subscription_lifetime: Duration,
    /// A shard's checkpoint is written at most this often while records are
    /// processed (one that comes sooner waits, and is written once this has
    /// passed); always at a hand-over, a stop or a drain. A consumer that
    /// crashes or loses a lease is followed by one that runs again at most
    /// this much of its work. `Duration::ZERO`: after every batch.
    pub checkpoint_every: Duration,
    /// Processing of a leased shard stops this long (at most a quarter of
    /// the lease term) before the lease's local expiry (its session's last heartbeat's
    /// send time plus the term): a slow batch is cut there, checkpointed,
    /// and goes on after the next heartbeat.
    pub expiry_margin: Duration,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl WorkerConfig {
    /// Sets [`WorkerConfig::initial_position`](Self::initial_position).
    pub fn initial_position(mut self, initial_position: InitialPosition) -> Self {
        self.initial_position = initial_position;
        self
    }

    /// Sets [`WorkerConfig::renew_every`](Self::renew_every).
    pub fn renew_every(mut self, renew_every: Duration) -> Self {
        self.renew_every = renew_every;
        self
    }

    /// Sets [`WorkerConfig::min_poll_interval`](Self::min_poll_interval).
    pub fn min_poll_interval(mut self, min_poll_interval: Duration) -> Self {
        self.min_poll_interval = min_poll_interval;
        self
    }

    /// Sets [`WorkerConfig::read_bytes_per_second`](Self::read_bytes_per_second).
    pub fn read_bytes_per_second(mut self, read_bytes_per_second: u64) -> Self {
        self.read_bytes_per_second = read_bytes_per_second;
        self
    }

    /// Sets [`WorkerConfig::idle_poll_interval`](Self::idle_poll_interval).
    pub fn idle_poll_interval(mut self, idle_poll_interval: Duration) -> Self {
        self.idle_poll_interval = idle_poll_interval;
        self
    }

    /// Sets [`WorkerConfig::max_records`](Self::max_records).
    pub fn max_records(mut self, max_records: i32) -> Self {
        self.max_records = max_records;
        self
    }

    /// Sets [`WorkerConfig::processing`](Self::processing).
    pub fn processing(mut self, processing: ProcessingOptions) -> Self {
        self.processing = processing;
        self
    }

    /// Sets [`WorkerConfig::release_on_stop`](Self::release_on_stop).
    pub fn release_on_stop(mut self, release_on_stop: bool) -> Self {
        self.release_on_stop = release_on_stop;
        self
    }

    /// Sets [`WorkerConfig::enhanced_fan_out`](Self::enhanced_fan_out).
    pub fn enhanced_fan_out(mut self, enhanced_fan_out: Option<EfoPool>) -> Self {
        self.enhanced_fan_out = enhanced_fan_out;
        self
    }

    /// Sets [`WorkerConfig::subscription_lifetime`](Self::subscription_lifetime).
    pub fn subscription_lifetime(mut self, subscription_lifetime: Duration) -> Self {
        self.subscription_lifetime = subscription_lifetime;
        self
    }

    /// Sets [`WorkerConfig::checkpoint_every`](Self::checkpoint_every).
    pub fn checkpoint_every(mut self, checkpoint_every: Duration) -> Self {
        self.checkpoint_every = checkpoint_every;
        self
    }

    /// Sets [`WorkerConfig::expiry_margin`](Self::expiry_margin).
    pub fn expiry_margin(mut self, expiry_margin: Duration) -> Self {
        self.expiry_margin = expiry_margin;
        self
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            initial_position: InitialPosition::TrimHorizon,
            renew_every: Duration::from_secs(3),
            min_poll_interval: Duration::from_millis(200),
            read_bytes_per_second: SHARD_READ_BYTES_PER_SECOND,
            idle_poll_interval: Duration::from_secs(1),
            max_records: 10_000,
            processing: ProcessingOptions::default(),
            release_on_stop: true,
            enhanced_fan_out: None,
            subscription_lifetime: Duration::from_secs(300),
            checkpoint_every: Duration::from_secs(5),
            expiry_margin: Duration::from_secs(2),
        }
    }
}

/// What the worker did so far: the sum of its shards' reports, and what
/// only the worker does (leases, completions).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkerReport {
    /// What the pipelines of its shards did, summed: reads, records,
    /// checkpoints, and transient failures (the worker's own too: a step
    /// or a stop tried again).
    #[serde(flatten)]
    pub shards: ShardReport,
    /// Shards read to their end and completed.
    pub shards_completed: u64,
    /// Leases lost (the shard stopped at once).
    pub leases_lost: u64,
    /// Leases handed to a claimant at a heartbeat (a rebalance, or this
    /// worker's drain).
    pub handed_off: u64,
    /// Shards still held when the run stopped, released (or checkpointed,
    /// without [`WorkerConfig::release_on_stop`]) then.
    pub held_at_stop: u64,
    /// The largest `MillisBehindLatest` of the last read of each shard.
    pub millis_behind_latest: Option<i64>,
    /// The worker's group is bounded (a backfill) and every shard of it is
    /// read to its end: the run ended before its deadline.
    pub group_finished: bool,
}
