//! The self-managed shard worker (polling): holds the leases the rebalancer
//! gives it, reads each leased shard with `GetRecords`, hands the records to
//! the same processing core as the event-source-mapped handlers, and writes
//! fenced checkpoints. The same code runs in a Lambda invocation (bounded by
//! its deadline) and in a long-running process (bounded by a stop signal).

use crate::discovery::list_stream_shards;
use crate::membership::Membership;
use crate::processing::core::{Run, Unit};
use crate::processing::kinesis::record_unit;
use crate::processing::{ProcessingOptions, RecordHandler, StreamRecord};
use crate::session::ConsumerSession;
use crate::standalone::StandaloneReader;
use crate::state::{
    is_throttling_code, Checkpoint, CheckpointOutcome, EpochMillis, Result, ShardId, StateError,
    StateStore,
};
use crate::worker_events::{Observer, StopReason, WorkerEvent};
use aws_sdk_kinesis::types::ShardIteratorType;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Where a shard with no checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// The oldest record still in the shard.
    #[default]
    TrimHorizon,
    /// Only records that arrive from now on.
    Latest,
    /// The first record at or after this time (ms).
    AtTimestamp(EpochMillis),
}

/// How the worker reads.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Where shards with no checkpoint start.
    pub initial_position: InitialPosition,
    /// How often the session heartbeats and renews (KCL renews every ~3.3 s).
    pub renew_every: Duration,
    /// The least time between two GetRecords of one shard (Kinesis allows 5 per second).
    pub min_poll_interval: Duration,
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
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            initial_position: InitialPosition::TrimHorizon,
            renew_every: Duration::from_secs(3),
            min_poll_interval: Duration::from_millis(200),
            idle_poll_interval: Duration::from_secs(1),
            max_records: 10_000,
            processing: ProcessingOptions::default(),
            release_on_stop: true,
        }
    }
}

/// What the worker did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerReport {
    /// GetRecords calls.
    pub polls: u64,
    /// User records handled successfully.
    pub processed: u64,
    /// User records skipped as already checkpointed.
    pub duplicates_skipped: u64,
    /// Records parked.
    pub parked: u64,
    /// Fenced checkpoints stored.
    pub checkpoints: u64,
    /// Shards read to their end and completed.
    pub shards_completed: u64,
    /// Leases lost (the shard stopped at once).
    pub leases_lost: u64,
    /// Expired iterators refreshed at the checkpoint.
    pub iterators_refreshed: u64,
    /// Throttled reads backed off.
    pub throttled: u64,
}

struct Cursor {
    iterator: Option<String>,
    position: Option<Checkpoint>,
    arrival: Option<EpochMillis>,
    next_poll: Instant,
}

/// A polling shard worker: one consumer instance.
pub struct ShardWorker<H> {
    membership: Membership,
    store: StateStore,
    kinesis: aws_sdk_kinesis::Client,
    handler: H,
    config: WorkerConfig,
    cursors: BTreeMap<ShardId, Cursor>,
    next_renew: Instant,
    report: WorkerReport,
    observer: Option<Observer>,
}

impl<H: RecordHandler> ShardWorker<H> {
    /// A worker for the session's consumer, reading the store's stream.
    pub fn new(
        session: ConsumerSession,
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        handler: H,
        config: WorkerConfig,
    ) -> Self {
        Self::with_membership(Membership::Group(session), store, kinesis, handler, config)
    }

    /// A standalone worker: reads every shard with its own checkpoints.
    pub fn standalone(
        reader: StandaloneReader,
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        handler: H,
        config: WorkerConfig,
    ) -> Self {
        Self::with_membership(
            Membership::Standalone(reader),
            store,
            kinesis,
            handler,
            config,
        )
    }

    fn with_membership(
        membership: Membership,
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        handler: H,
        config: WorkerConfig,
    ) -> Self {
        ShardWorker {
            membership,
            store,
            kinesis,
            handler,
            config,
            cursors: BTreeMap::new(),
            next_renew: Instant::now(),
            report: WorkerReport::default(),
            observer: None,
        }
    }

    /// Reports every lease and checkpoint event to `observer`.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    fn emit(&self, event: WorkerEvent) {
        if let Some(observer) = &self.observer {
            observer(event);
        }
    }

    fn stopped(&self, shard: &ShardId, why: StopReason) {
        self.emit(WorkerEvent::Stopped {
            shard: shard.clone(),
            why,
            at: Instant::now(),
        });
    }

    /// What the worker did so far.
    pub fn report(&self) -> &WorkerReport {
        &self.report
    }

    /// The shards it holds now.
    pub fn shards(&self) -> Vec<ShardId> {
        self.cursors.keys().cloned().collect()
    }

    /// Steps until `stop()` says so or `deadline` (an invocation's deadline
    /// minus a margin) passes; then checkpoints every shard and, by default
    /// ([`WorkerConfig::release_on_stop`]), leaves the group: leases released
    /// (claimants get theirs) so others take over at once.
    pub async fn run_until(
        &mut self,
        deadline: Option<Instant>,
        stop: impl Fn() -> bool,
    ) -> Result<&WorkerReport> {
        while !stop() && deadline.is_none_or(|d| Instant::now() < d) {
            let polled = self.step().await?;
            if !polled {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if self.config.release_on_stop {
            self.leave().await?;
        } else {
            let positions = self.positions();
            self.membership
                .checkpoint_all(&|shard| positions.get(shard).cloned())
                .await?;
        }
        Ok(&self.report)
    }

    /// Stops at the current progress: a group member leaves the group (see
    /// [`ConsumerSession::leave`]); a standalone worker checkpoints.
    pub async fn leave(&mut self) -> Result<()> {
        let positions = self.positions();
        self.membership
            .leave(&|shard| positions.get(shard).cloned())
            .await?;
        for shard in std::mem::take(&mut self.cursors).into_keys() {
            self.stopped(&shard, StopReason::Released);
        }
        Ok(())
    }

    fn positions(&self) -> BTreeMap<ShardId, (Checkpoint, Option<EpochMillis>)> {
        self.cursors
            .iter()
            .filter_map(|(s, c)| {
                c.position
                    .clone()
                    .filter(Checkpoint::has_progress)
                    .map(|p| (s.clone(), (p, c.arrival)))
            })
            .collect()
    }

    /// One step: renew when due, then one GetRecords for each shard that is
    /// due. Returns whether any shard was polled.
    pub async fn step(&mut self) -> Result<bool> {
        if Instant::now() >= self.next_renew {
            self.renew().await?;
        }
        let due: Vec<ShardId> = self
            .cursors
            .iter()
            .filter(|(_, c)| c.next_poll <= Instant::now())
            .map(|(s, _)| s.clone())
            .collect();
        for shard in &due {
            self.poll(shard).await?;
        }
        Ok(!due.is_empty())
    }

    async fn renew(&mut self) -> Result<()> {
        let positions = self.positions();
        let tick = self
            .membership
            .tick(&|shard| positions.get(shard).cloned())
            .await?;
        self.next_renew = Instant::now() + self.config.renew_every;
        for shard in &tick.lost {
            if self.cursors.remove(shard).is_some() {
                self.report.leases_lost += 1;
                self.stopped(shard, StopReason::Lost);
            }
        }
        for (shard, _) in &tick.handed_off {
            if self.cursors.remove(shard).is_some() {
                self.stopped(shard, StopReason::HandedOff);
            }
        }
        for shard in tick.gained {
            let state = self
                .store
                .get_shard(&self.membership.scope(), &shard)
                .await?;
            self.emit(WorkerEvent::Gained {
                shard: shard.clone(),
                position: state.checkpoint.clone(),
                at: Instant::now(),
            });
            self.cursors.insert(
                shard,
                Cursor {
                    iterator: None,
                    position: state.checkpoint,
                    arrival: state.checkpoint_arrival,
                    next_poll: Instant::now(),
                },
            );
        }
        Ok(())
    }

    async fn iterator(
        &self,
        shard: &ShardId,
        position: Option<&Checkpoint>,
    ) -> Result<Option<String>> {
        let stream = self.store.config().stream.as_str();
        let mut req = self
            .kinesis
            .get_shard_iterator()
            .stream_name(stream)
            .shard_id(shard.as_str());
        req = match position {
            // Resume at the checkpointed record: the processing core skips
            // what the checkpoint covers (and resumes inside a KPL aggregate).
            Some(Checkpoint::After { sequence, .. }) | Some(Checkpoint::AtSequence(sequence)) => {
                req.shard_iterator_type(ShardIteratorType::AtSequenceNumber)
                    .starting_sequence_number(sequence.as_str())
            }
            Some(Checkpoint::ShardEnd) => return Ok(None),
            Some(Checkpoint::Latest) => req.shard_iterator_type(ShardIteratorType::Latest),
            Some(Checkpoint::AtTimestamp(t)) => req
                .shard_iterator_type(ShardIteratorType::AtTimestamp)
                .timestamp(aws_smithy_types::DateTime::from_millis(*t)),
            Some(Checkpoint::TrimHorizon) => {
                req.shard_iterator_type(ShardIteratorType::TrimHorizon)
            }
            None => match self.config.initial_position {
                InitialPosition::TrimHorizon => {
                    req.shard_iterator_type(ShardIteratorType::TrimHorizon)
                }
                InitialPosition::Latest => req.shard_iterator_type(ShardIteratorType::Latest),
                InitialPosition::AtTimestamp(t) => req
                    .shard_iterator_type(ShardIteratorType::AtTimestamp)
                    .timestamp(aws_smithy_types::DateTime::from_millis(t)),
            },
        };
        let out =
            crate::state::call_kinesis(&self.store.config().retry, "GetShardIterator", || {
                req.clone().send()
            })
            .await?;
        Ok(out.shard_iterator)
    }

    async fn poll(&mut self, shard: &ShardId) -> Result<()> {
        let Some(cursor) = self.cursors.get(shard) else {
            return Ok(());
        };
        let iterator = match &cursor.iterator {
            Some(it) => it.clone(),
            None => match self.iterator(shard, cursor.position.as_ref()).await? {
                Some(it) => it,
                None => return Ok(()),
            },
        };
        self.report.polls += 1;
        let sent = self
            .kinesis
            .get_records()
            .shard_iterator(&iterator)
            .limit(self.config.max_records)
            .send()
            .await;
        let out = match sent {
            Ok(out) => out,
            Err(err) => {
                let code = err.code().unwrap_or_default().to_owned();
                let cursor = self.cursors.get_mut(shard).expect("cursor");
                if code == "ExpiredIteratorException" {
                    // Refresh at the checkpoint, never at LATEST (that would skip records).
                    cursor.iterator = None;
                    self.report.iterators_refreshed += 1;
                    return Ok(());
                }
                if is_throttling_code(&code) {
                    self.report.throttled += 1;
                    cursor.next_poll = Instant::now()
                        + Duration::from_secs(1)
                        + Duration::from_millis(fastrand::u64(0..500));
                    return Ok(());
                }
                return Err(StateError::Sdk {
                    service: crate::state::Service::Kinesis,
                    operation: "GetRecords",
                    code: Some(code).filter(|c| !c.is_empty()),
                    message: err.to_string(),
                });
            }
        };
        let records = out.records();
        let arn = None;
        let units: Vec<Unit> = records
            .iter()
            .map(|r| {
                let base = StreamRecord {
                    shard_id: shard.as_str().into(),
                    sequence_number: r.sequence_number().into(),
                    sub_sequence: 0,
                    aggregated: false,
                    partition_key: r.partition_key().unwrap_or_default().into(),
                    explicit_hash_key: None,
                    data: Bytes::new(),
                    approximate_arrival: r
                        .approximate_arrival_timestamp()
                        .and_then(|t| t.to_millis().ok()),
                    event_source_arn: arn.clone(),
                };
                record_unit(base, r.data().as_ref())
            })
            .collect();
        let last_arrival = records
            .last()
            .and_then(|r| r.approximate_arrival_timestamp())
            .and_then(|t| t.to_millis().ok());
        let cursor = self.cursors.get(shard).expect("cursor");
        let mut run = Run::new(
            &self.handler,
            Some(&self.store),
            &self.config.processing,
            None,
        );
        run.preload(shard.as_str(), cursor.position.clone());
        for unit in units {
            if run.stopped() {
                break;
            }
            run.unit(unit).await?;
        }
        let failed = run.stopped() || !run.report.failures.is_empty();
        let (report, progress) = run.into_parts(0);
        self.report.processed += report.processed;
        self.report.duplicates_skipped += report.duplicates_skipped;
        self.report.parked += report.parked;
        if let Some(cp) = progress.get(shard.as_str()) {
            let sent = Instant::now();
            match self.membership.checkpoint(shard, cp, last_arrival).await {
                Ok(outcome) => {
                    self.report.checkpoints += 1;
                    if outcome == CheckpointOutcome::Stored {
                        self.emit(WorkerEvent::Checkpointed {
                            shard: shard.clone(),
                            checkpoint: cp.clone(),
                            sent,
                        });
                    }
                }
                Err(e) if e.is_lease_lost() => {
                    tracing::warn!(%shard, error = %e, "lease lost: the shard stops here");
                    self.cursors.remove(shard);
                    self.report.leases_lost += 1;
                    self.stopped(shard, StopReason::Lost);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
            let cursor = self.cursors.get_mut(shard).expect("cursor");
            cursor.position = Some(cp.clone());
            cursor.arrival = last_arrival;
        }
        let cursor = self.cursors.get_mut(shard).expect("cursor");
        if failed {
            // Re-read from the failed record at the next poll.
            cursor.iterator = None;
            cursor.next_poll = Instant::now() + self.config.idle_poll_interval;
            return Ok(());
        }
        cursor.iterator = out.next_shard_iterator().map(str::to_owned);
        cursor.next_poll = Instant::now()
            + if records.is_empty() {
                self.config.idle_poll_interval
            } else {
                self.config.min_poll_interval
            };
        if cursor.iterator.is_none() {
            self.complete(shard).await?;
        }
        Ok(())
    }

    /// The shard is read to its end: deplete it so its children become leasable.
    async fn complete(&mut self, shard: &ShardId) -> Result<()> {
        let stream = self.store.config().stream.as_str().to_owned();
        let (specs, _) =
            list_stream_shards(&self.kinesis, &stream, &self.store.config().retry).await?;
        let children: Vec<_> = specs
            .into_iter()
            .filter(|s| s.parents.contains(shard))
            .collect();
        match self.membership.complete_shard(shard, &children).await {
            Ok(_) => {
                self.report.shards_completed += 1;
                self.stopped(shard, StopReason::Completed);
            }
            Err(e) if e.is_lease_lost() => {
                self.report.leases_lost += 1;
                self.stopped(shard, StopReason::Lost);
            }
            Err(e) => return Err(e),
        }
        self.cursors.remove(shard);
        Ok(())
    }
}
