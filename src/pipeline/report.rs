//! What one shard's pipeline did: its reads and its records. Reports add
//! up: a worker's or a reader's is the sum of its shards'.

use crate::processing::BatchReport;
use std::ops::AddAssign;

/// What the pipeline of one shard (or, summed, of many) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ShardReport {
    /// GetRecords calls.
    pub polls: u64,
    /// SubscribeToShard subscriptions opened.
    pub subscriptions: u64,
    /// Subscriptions refused because one was still open for the shard.
    pub subscriptions_refused: u64,
    /// Expired iterators refreshed at the checkpoint.
    pub iterators_refreshed: u64,
    /// Throttled reads backed off.
    pub throttled: u64,
    /// Transient failures ridden out (throttling past the retries, AWS
    /// internal errors, connection failures): a read backed off, or a
    /// checkpoint left to the next one.
    pub transient_errors: u64,
    /// User records handled successfully.
    pub processed: u64,
    /// User records skipped as already checkpointed.
    pub duplicates_skipped: u64,
    /// Records parked.
    pub parked: u64,
    /// Checkpoints stored.
    pub checkpoints: u64,
    /// Payload bytes of the user records handled.
    pub bytes_processed: u64,
    /// How long each handler call took (ms).
    #[serde(skip)]
    pub handler_durations: crate::metrics::Distribution,
}

impl ShardReport {
    /// Adds what one batch of the core did.
    pub(crate) fn add_batch(&mut self, batch: &BatchReport) {
        self.processed += batch.processed;
        self.duplicates_skipped += batch.duplicates_skipped;
        self.parked += batch.parked;
        self.checkpoints += batch.checkpoints;
        self.bytes_processed += batch.bytes_processed;
        self.handler_durations.merge(&batch.handler_durations);
    }
}

impl AddAssign<&ShardReport> for ShardReport {
    fn add_assign(&mut self, other: &ShardReport) {
        let ShardReport {
            polls,
            subscriptions,
            subscriptions_refused,
            iterators_refreshed,
            throttled,
            transient_errors,
            processed,
            duplicates_skipped,
            parked,
            checkpoints,
            bytes_processed,
            handler_durations,
        } = other;
        self.polls += polls;
        self.subscriptions += subscriptions;
        self.subscriptions_refused += subscriptions_refused;
        self.iterators_refreshed += iterators_refreshed;
        self.throttled += throttled;
        self.transient_errors += transient_errors;
        self.processed += processed;
        self.duplicates_skipped += duplicates_skipped;
        self.parked += parked;
        self.checkpoints += checkpoints;
        self.bytes_processed += bytes_processed;
        self.handler_durations.merge(handler_durations);
    }
}
