//! `StreamReader`: reads a DynamoDB stream's shards in order, parents before
//! children, and keeps each shard's position in the state store.
//!
//! The read path is in `read.rs`, discovery in `discover.rs`; committing,
//! seeking, rewinding and the handler loop in `accept.rs`; the decisions
//! (what to read, where to reopen) in `tree.rs` and `position.rs`. A
//! shard's position is a [`Checkpoint`].

use crate::ddb_streams::batch::{Batch, ReaderStats};
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::config::{ReaderConfig, DISCOVER_EVERY, EMPTY_READS_AT_HEAD};
use crate::ddb_streams::error::StreamsError;
use crate::ddb_streams::tree;
use crate::state::{
    retry_throttled, Checkpoint, EpochMillis, Retried, ShardId, ShardSpec, StateStore,
};
use crate::Error;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// One shard's reading state.
#[derive(Debug, Clone)]
pub(super) struct Cursor {
    pub(super) spec: ShardSpec,
    /// Accepted by the caller (committed).
    pub(super) committed: Checkpoint,
    /// Last written to the state store.
    pub(super) saved: Option<Checkpoint>,
    /// After the last record handed out.
    pub(super) read: Checkpoint,
    /// When the `LATEST` iterator of a `Latest` position was taken (ms): a
    /// `LATEST` reopened later reads from `TRIM_HORIZON`, skipping the
    /// records created before this time (see `position.rs`).
    pub(super) latest_at: EpochMillis,
    pub(super) iterator: Option<String>,
    /// Records created before this are skipped (a seek, a reopened `LATEST`).
    pub(super) skipping: Option<EpochMillis>,
    pub(super) ended: bool,
    pub(super) empty_reads: u32,
    /// Every record created before this time (ms) has been read: the newest
    /// record read, or the start of a read that confirmed the shard's head.
    pub(super) read_up_to: Option<EpochMillis>,
    /// Handler failures in a row (`poll`), and when the shard is read again.
    pub(super) failures: u32,
    pub(super) retry_after: Option<EpochMillis>,
}

impl Cursor {
    pub(super) fn new(spec: ShardSpec, position: Checkpoint, latest_at: EpochMillis) -> Self {
        Cursor {
            spec,
            committed: position.clone(),
            saved: None,
            read: position,
            latest_at,
            iterator: None,
            skipping: None,
            ended: false,
            empty_reads: 0,
            read_up_to: None,
            failures: 0,
            retry_after: None,
        }
    }

    /// Read to its end and everything read committed.
    pub(super) fn finished(&self) -> bool {
        self.ended && self.committed == self.read
    }

    /// Reads again from `position` with a new iterator.
    pub(super) fn reset(&mut self, position: Checkpoint) {
        self.read = position;
        self.iterator = None;
        self.skipping = None;
        self.ended = false;
        self.empty_reads = 0;
        self.read_up_to = None;
    }
}

/// Reads one DynamoDB stream (self-managed, without an event source
/// mapping): discovers its shard tree, reads each shard from its saved
/// position, a child only after its parent is read to its end, and hands
/// out typed changes. Positions move only when the caller commits what it
/// accepted ([`StreamReader::commit`], or [`StreamReader::poll`] with a
/// handler).
pub struct StreamReader<C> {
    pub(super) client: C,
    pub(super) store: StateStore,
    pub(super) stream_arn: String,
    pub(super) config: ReaderConfig,
    pub(super) cursors: BTreeMap<ShardId, Cursor>,
    /// Every known shard, parents first.
    pub(super) order: Vec<ShardSpec>,
    pub(super) discovered_at: Option<EpochMillis>,
    pub(super) rediscover: bool,
    pub(super) stats: ReaderStats,
    /// Throttled answers, counted while `self` is shared with a call.
    pub(super) throttled: AtomicU64,
}

impl<C: StreamsClient> StreamReader<C> {
    /// A reader of `stream_arn` keeping its positions in `store` (one group
    /// and stream of the state table; the table must exist).
    pub fn new(client: C, store: StateStore, stream_arn: &str, config: ReaderConfig) -> Self {
        StreamReader {
            client,
            store,
            stream_arn: stream_arn.to_owned(),
            config,
            cursors: BTreeMap::new(),
            order: Vec::new(),
            discovered_at: None,
            rediscover: false,
            stats: ReaderStats::default(),
            throttled: AtomicU64::new(0),
        }
    }

    /// The stream read.
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// The state store the positions are kept in.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// The configuration.
    pub fn config(&self) -> &ReaderConfig {
        &self.config
    }

    /// What the reader did so far.
    pub fn stats(&self) -> ReaderStats {
        let mut stats = self.stats.clone();
        stats.shards.throttled = self.throttled.load(Ordering::Relaxed);
        stats
    }

    /// Each known shard's committed position, parents first: `TrimHorizon`,
    /// `Latest`, `AtTimestamp` (after a seek to a time), `AtSequence` (as a
    /// stored position may say) or `After` the last record accepted (its
    /// sub-sequence number 0).
    pub fn positions(&self) -> Vec<(ShardId, Checkpoint)> {
        self.order
            .iter()
            .filter_map(|s| self.cursors.get(&s.shard_id))
            .map(|c| (c.spec.shard_id.clone(), c.committed.clone()))
            .collect()
    }

    /// `true` once every change made before `time` (ms, by the store's
    /// clock) has been handed out: each shard is finished, or handed out a
    /// record created at or after `time`, or confirmed its head (the
    /// configured number of empty reads) in a read that started at or after
    /// `time`. Unlike [`Batch::caught_up`] this is reached under a steady
    /// write load too. Record times come from the service's clock: a reader
    /// whose clock runs behind it can see this a little early.
    pub fn read_past(&self, time: EpochMillis) -> bool {
        self.discovered_at.is_some()
            && self
                .cursors
                .values()
                .all(|c| c.finished() || c.read_up_to.is_some_and(|t| t >= time))
    }

    /// Reads every shard that may be read now (one GetRecords each, parents
    /// before children), discovering the shards first when due. The records
    /// are handed out; [`StreamReader::commit`] accepts them. After an
    /// error, reading resumes at the committed positions.
    pub async fn next_batch(&mut self) -> Result<Batch, Error> {
        let result = self.read_all().await;
        if result.is_err() {
            self.rewind();
        }
        result
    }

    async fn read_all(&mut self) -> Result<Batch, Error> {
        let mut batch = Batch::default();
        if self.discovery_due() {
            batch.discovery = Some(self.discover().await?);
        }
        let cursors = &self.cursors;
        let now = self.store.now();
        let to_read = tree::readable(&self.order, |id| cursors.get(id).map(Cursor::finished));
        for id in to_read {
            if self.cursors[&id].retry_after.is_some_and(|t| t > now) {
                continue; // backing off after a handler failure
            }
            if let Some(shard) = self.read_shard(&id, &mut batch.trimmed).await? {
                batch.shards.push(shard);
            }
        }
        let at_head = EMPTY_READS_AT_HEAD;
        batch.caught_up = self
            .cursors
            .values()
            .all(|c| c.finished() || (!c.ended && c.empty_reads >= at_head));
        Ok(batch)
    }

    fn discovery_due(&self) -> bool {
        match self.discovered_at {
            None => true,
            Some(at) => {
                self.rediscover || self.store.now() - at >= DISCOVER_EVERY.as_millis() as i64
            }
        }
    }

    /// One DynamoDB Streams call, retried with the store's retry policy when
    /// throttled or failed in passing (a server fault, no answer); an expired
    /// iterator is the reader's to renew. The client sends each request once
    /// (see `sdk`), so this is the call's one retry budget.
    pub(super) async fn call<T, F, Fut>(&self, operation: &'static str, send: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StreamsError>>,
    {
        let retryable = |e: &StreamsError| {
            let throttled = e.is_throttled();
            self.throttled
                .fetch_add(u64::from(throttled), Ordering::Relaxed);
            e.is_transient() && !matches!(e, StreamsError::ExpiredIterator(_))
        };
        let retry = &self.store.config().retry;
        retry_throttled(retry, operation, retryable, || false, send)
            .await
            .map_err(|e| match e {
                Retried::Failed { error, attempts } => Error::Streams {
                    operation,
                    attempts,
                    error,
                },
                Retried::Stopped => Error::State(crate::state::StateError::Stopped),
            })
    }
}
