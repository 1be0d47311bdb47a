//! `StreamReader`: reads a DynamoDB stream's shards in order, parents before
//! children, and keeps each shard's position in the state store.
//!
//! Each shard is a shard pipeline ([`crate::pipeline`]), as in the Kinesis
//! worker, kept in a shard map: its position is what the caller committed,
//! its source (`source.rs`) reads it; the calls every shard shares are in
//! `calls.rs`, discovery in `discover.rs`; committing, seeking, rewinding
//! and the handler loop in `accept.rs`; the decisions (what to read, where
//! to reopen) in `tree.rs` and `position.rs`. A shard's position is a
//! [`Checkpoint`].

use crate::ddb_streams::batch::{Batch, ReaderStats};
use crate::ddb_streams::calls::StreamsCalls;
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::config::{ReaderConfig, DISCOVER_EVERY, EMPTY_READS_AT_HEAD};
use crate::ddb_streams::source::StreamsSource;
use crate::pipeline::ShardMap;
use crate::state::instant_now;
use crate::state::{Checkpoint, EpochMillis, ShardId, ShardSpec, StateStore};
use crate::Error;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the reader knows of a shard besides its pipeline: its place in the
/// tree, and the position last saved for it.
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) spec: ShardSpec,
    pub(super) saved: Option<Checkpoint>,
}

/// Reads one DynamoDB stream (self-managed, without an event source
/// mapping): discovers its shard tree, reads each shard from its saved
/// position, a child only after its parent is read to its end, and hands
/// out typed changes. Positions move only when the caller commits what it
/// accepted ([`StreamReader::commit`], or [`StreamReader::poll`] with a
/// handler).
pub struct StreamReader<C> {
    pub(super) calls: Arc<StreamsCalls<C>>,
    pub(super) config: ReaderConfig,
    /// The pipeline of every known shard: its committed position (what the
    /// caller accepted) and its source (what was read).
    pub(super) shards: ShardMap<StreamsSource<C>>,
    pub(super) known: BTreeMap<ShardId, Known>,
    /// Every known shard, parents first.
    pub(super) order: Vec<ShardSpec>,
    pub(super) discovered_at: Option<EpochMillis>,
    pub(super) rediscover: bool,
    pub(super) stats: ReaderStats,
}

impl<C: StreamsClient> StreamReader<C> {
    /// A reader of `stream_arn` keeping its positions in `store` (one group
    /// and stream of the state table; the table must exist).
    pub fn new(client: C, store: StateStore, stream_arn: &str, config: ReaderConfig) -> Self {
        StreamReader {
            calls: Arc::new(StreamsCalls::new(client, store, stream_arn, &config)),
            config,
            shards: ShardMap::default(),
            known: BTreeMap::new(),
            order: Vec::new(),
            discovered_at: None,
            rediscover: false,
            stats: ReaderStats::default(),
        }
    }

    /// The stream read.
    pub fn stream_arn(&self) -> &str {
        &self.calls.stream_arn
    }

    /// The state store the positions are kept in.
    pub fn store(&self) -> &StateStore {
        &self.calls.store
    }

    /// The configuration.
    pub fn config(&self) -> &ReaderConfig {
        &self.config
    }

    /// What the reader did so far.
    pub fn stats(&self) -> ReaderStats {
        let mut stats = self.stats.clone();
        stats.shards.throttled = self.calls.throttled();
        stats
    }

    /// Each known shard's committed position, parents first: `TrimHorizon`,
    /// `Latest`, `AtTimestamp` (after a seek to a time), `AtSequence` (as a
    /// stored position may say) or `After` the last record accepted (its
    /// sub-sequence number 0).
    pub fn positions(&self) -> Vec<(ShardId, Checkpoint)> {
        self.order
            .iter()
            .filter_map(|s| {
                let position = self.shards.get(&s.shard_id)?.position()?;
                Some((s.shard_id.clone(), position.clone()))
            })
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
                .shards
                .pipelines()
                .all(|p| p.finished() || p.source().read_up_to.is_some_and(|t| t >= time))
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
        for id in self.shards.due(instant_now()) {
            let Some(pipeline) = self.shards.get_mut(&id) else {
                continue;
            };
            let from = pipeline
                .position()
                .cloned()
                .unwrap_or(Checkpoint::TrimHorizon);
            let source = pipeline.source_mut();
            let read = source.read(&id, &from, &mut self.stats.shards).await;
            let trimmed = source.take_trimmed();
            self.stats.trimmed_restarts += trimmed.len() as u64;
            batch.trimmed.extend(trimmed);
            if let Some(shard) = read? {
                self.rediscover |= shard.ended;
                batch.shards.push(shard);
            }
        }
        batch.caught_up = self.caught_up();
        Ok(batch)
    }

    /// Every shard is finished, or at its head (the configured number of
    /// empty reads in a row).
    pub(super) fn caught_up(&self) -> bool {
        self.shards.pipelines().all(|p| {
            let source = p.source();
            p.finished() || (!source.ended && source.empty_reads >= EMPTY_READS_AT_HEAD)
        })
    }

    pub(super) fn discovery_due(&self) -> bool {
        match self.discovered_at {
            None => true,
            Some(at) => {
                self.rediscover || self.store().now() - at >= DISCOVER_EVERY.as_millis() as i64
            }
        }
    }
}
