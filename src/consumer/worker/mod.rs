//! The self-managed shard worker: holds the leases the rebalancer gives it
//! (or, standalone, every shard), and consumes each shard it holds with a
//! shard pipeline ([`crate::pipeline`]): a Kinesis record source (GetRecords
//! polling, or SubscribeToShard through an enhanced fan-out consumer locked
//! from the group's pool), the processing core, and fenced checkpoints. The
//! same code runs in a Lambda invocation (bounded by its deadline) and in a
//! long-running process (bounded by a stop signal).
//!
//! - `mod.rs`: the worker, its step, its session's ticks and the shards it gains, loses
//!   and completes.
//! - `run`: the run until a stop or deadline, and leaving.
//! - `together`: a step reading every due shard at once (concurrency above 1).
//! - `efo`: its enhanced fan-out consumer lock.
//! - `config`: how it reads, and what it reports.
//! - `pacing`: writing the checkpoints its pacing deferred, at heartbeats.

mod busy;
mod config;
mod efo;
mod pacing;
mod run;
mod together;

pub use config::{WorkerConfig, WorkerReport, SHARD_READ_BYTES_PER_SECOND};

use crate::consumer::leases::{Mode, ModeCheckpoints};
use crate::consumer::list_stream_shards;
use crate::consumer::retrieval::{KinesisReads, KinesisSource, ReadError, ReadSettings, SdkReads};
use crate::consumer::ConsumerSession;
use crate::consumer::StandaloneSession;
use crate::consumer::{Observer, StopReason, WorkerEvent};
use crate::pipeline::{Paced, Pacing, ShardMap, ShardPipeline, Step};
use crate::processing::{Core, RecordHandler};
use crate::state::instant_now;
use crate::state::{Checkpoint, EfoLock, EpochMillis, ShardId, ShardScope, StateStore};
use crate::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Attempts at checkpointing and leaving when a run stops, through transient
/// failures.
const STOP_ATTEMPTS: u32 = 4;

/// A shard worker: one consumer instance.
pub struct ShardWorker<H> {
    mode: Mode,
    store: StateStore,
    kinesis: aws_sdk_kinesis::Client,
    reads: Arc<dyn KinesisReads>,
    handler: H,
    config: WorkerConfig,
    /// The pipeline of each shard held.
    pipelines: ShardMap<KinesisSource>,
    /// Shards gained whose pipeline is not open yet (their state not read):
    /// kept until it is, so a failure in between never strands a lease.
    pending: BTreeSet<ShardId>,
    next_beat: Instant,
    report: WorkerReport,
    observer: Option<Observer>,
    efo_lock: Option<EfoLock>,
    efo_recheck: bool,
    /// Time spent processing since the last heartbeat (reported as the
    /// handler's load, in all and per shard).
    busy: busy::Busy,
    /// From when the consumer hands its leases to others (see
    /// [`ShardWorker::drain_at`]), and whether it has started to.
    drain_at: Option<Instant>,
    draining: bool,
    /// When each shard's checkpoint was last written.
    pacing: Pacing,
    /// When an idle worker of a bounded group looks next whether the group
    /// is finished.
    next_finish_check: Instant,
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
        Self::with_mode(Mode::Group(session), store, kinesis, handler, config)
    }

    /// A standalone worker: reads every shard with its own checkpoints (with
    /// enhanced fan-out: those of the EFO consumer it locks).
    pub fn standalone(
        reader: StandaloneSession,
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        handler: H,
        config: WorkerConfig,
    ) -> Self {
        Self::with_mode(Mode::Standalone(reader), store, kinesis, handler, config)
    }

    fn with_mode(
        mode: Mode,
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        handler: H,
        config: WorkerConfig,
    ) -> Self {
        let mut mode = mode;
        // A group worker's calls are bounded by the lease term, as its
        // session's are: the loop is seen again before the session's pulse
        // gives its leases up.
        let store = match &mode {
            Mode::Group(session) => store.with_call_limit(session.lease_term()),
            Mode::Standalone(_) => store,
        };
        if config.enhanced_fan_out.is_some() {
            // Nothing to read with until an EFO consumer is locked.
            mode.set_efo_lock(None);
        }
        // The store's retry policy is the one budget of the worker's
        // Kinesis calls; the reads are sent once (a shard backs off alone).
        let kinesis = crate::state::own_kinesis_client(&kinesis, &store.config().timeouts);
        let reads = Arc::new(SdkReads::new(kinesis.clone()));
        ShardWorker {
            mode,
            store,
            kinesis,
            reads,
            handler,
            config,
            pipelines: ShardMap::default(),
            pending: BTreeSet::new(),
            next_beat: instant_now(),
            report: WorkerReport::default(),
            observer: None,
            efo_lock: None,
            efo_recheck: false,
            busy: busy::Busy::new(),
            drain_at: None,
            draining: false,
            pacing: Pacing::default(),
            next_finish_check: instant_now(),
        }
    }

    /// From `at` on, the consumer leaves while it still reads: it is marked
    /// inactive, the rebalancer moves its leases to active consumers by
    /// claims, and it honours each at its next heartbeat (checkpoint, then
    /// hand-off), so its shards go to readers already running instead of
    /// waiting for its end. Set it some heartbeats and rebalancer ticks before
    /// the deadline given to [`ShardWorker::run_until`].
    pub fn drain_at(mut self, at: Instant) -> Self {
        self.drain_at = Some(at);
        self
    }

    /// Reports every lease and checkpoint event to `observer`.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Reads shards through `reads` instead of the Kinesis client (the
    /// client still lists shards and manages the EFO pool).
    pub fn with_reads(mut self, reads: Arc<dyn KinesisReads>) -> Self {
        self.reads = reads;
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
            at: instant_now(),
        });
    }

    /// Stops reading `shard`: its lease is gone (lost, handed off, or
    /// released while the worker goes on).
    async fn drop_shard(&mut self, shard: &ShardId, why: StopReason) {
        self.pending.remove(shard);
        self.pacing.forget(shard);
        if self.pipelines.close(shard).is_some() {
            match why {
                StopReason::Lost => self.report.leases_lost += 1,
                StopReason::HandedOff => self.report.handed_off += 1,
                _ => {}
            }
            self.stopped(shard, why);
            self.handler.lease_lost(shard).await;
        }
    }

    /// What the worker did so far.
    pub fn report(&self) -> &WorkerReport {
        &self.report
    }

    /// The shards it holds now.
    pub fn shards(&self) -> Vec<ShardId> {
        self.pipelines.shards().to_vec()
    }

    /// The enhanced fan-out consumer it has locked (when reading with EFO).
    pub fn efo_lock(&self) -> Option<&EfoLock> {
        self.efo_lock.as_ref()
    }

    /// `MillisBehindLatest` of the last read of each held shard.
    pub fn millis_behind_latest(&self) -> BTreeMap<ShardId, i64> {
        self.pipelines.millis_behind()
    }

    /// Where each held shard stands, for checkpoints at a hand-over or a
    /// stop (see [`ShardPipeline::handover_position`]).
    fn positions(&self) -> BTreeMap<ShardId, (Checkpoint, Option<EpochMillis>)> {
        self.pipelines.handover_positions()
    }

    /// One step: the session's tick when due, then one read of each shard that is due
    /// (a GetRecords, or the events a subscription has delivered). Returns
    /// whether any shard was read.
    pub async fn step(&mut self) -> Result<bool> {
        self.mode.alive();
        if instant_now() >= self.next_beat {
            self.beat().await?;
        }
        let now = instant_now();
        let due = self.pipelines.due(now);
        if self.config.processing.concurrency > 1 && due.len() > 1 {
            // (Boxed: the steps of every shard at once make a deep future,
            // which a crate awaiting the worker would otherwise have to lay
            // out within its default `recursion_limit`.)
            return Box::pin(self.read_together(&due)).await;
        }
        let mut read = false;
        for shard in &due {
            self.mode.alive();
            // Heartbeats keep their schedule while slow shards are processed.
            if instant_now() >= self.next_beat {
                self.beat().await?;
            }
            read |= self.read(shard).await?;
        }
        Ok(read)
    }

    async fn beat(&mut self) -> Result<()> {
        let efo = self.config.enhanced_fan_out.is_some();
        if efo && (self.efo_lock.is_none() || self.efo_recheck) {
            self.lock_efo().await?;
        }
        let (per_mille, loads) = self.busy.report(self.pipelines.shards());
        self.mode.set_busy(per_mille, loads);
        if !self.draining && self.drain_at.is_some_and(|at| instant_now() >= at) {
            self.mode.drain().await?;
            self.draining = true;
            tracing::info!(consumer = %self.mode.id(), "draining: its leases go to the consumers that stay");
        }
        let positions = self.positions();
        let tick = self
            .mode
            .tick(&|shard| positions.get(shard).cloned())
            .await?;
        self.next_beat = instant_now() + self.config.renew_every;
        for shard in &tick.lost {
            self.drop_shard(shard, StopReason::Lost).await;
        }
        for (shard, _) in &tick.handed_off {
            self.drop_shard(shard, StopReason::HandedOff).await;
        }
        self.pending.extend(tick.gained);
        if efo && tick.registered {
            // (Re-)registered: a lock taken before, or released by a reaper
            // that removed this consumer, is checked again, and the active
            // flag set now that the consumer exists.
            self.lock_efo().await?;
        }
        if efo && self.efo_lock.is_none() && !(self.pipelines.is_empty() && self.pending.is_empty())
        {
            // No EFO consumer to read with: hand the leases back.
            let positions = self.positions();
            self.mode
                .release_all(&|shard| positions.get(shard).cloned())
                .await?;
            self.pending.clear();
            for shard in self.shards() {
                self.drop_shard(&shard, StopReason::Released).await;
            }
        }
        self.write_deferred().await?;
        self.open_pending().await
    }

    /// Opens a pipeline at the stored checkpoint of each shard gained.
    async fn open_pending(&mut self) -> Result<()> {
        let efo = self.config.enhanced_fan_out.is_some();
        while let Some(shard) = self.pending.first().cloned() {
            // Every read first: a shard leaves the gained set only once
            // nothing can fail before its pipeline opens (a read that fails
            // leaves it for the next step, never held and unread).
            let state = self.store.shards().get(&self.mode.scope(), &shard).await?;
            // A bounded group (a backfill) reads the shard up to its end.
            let end = match state.end.clone() {
                Some(end) => Some(end),
                None => self.store.group_end().await?,
            };
            self.pending.remove(&shard);
            self.emit(WorkerEvent::Gained {
                shard: shard.clone(),
                position: state.checkpoint.clone(),
                at: instant_now(),
            });
            self.handler
                .shard_gained(&shard, state.checkpoint.as_ref())
                .await;
            // A child shard with no progress starts at its first record,
            // whatever the initial position (as KCL does): its records are
            // all newer than the parent's, and LATEST would skip them.
            let start = state.checkpoint.or_else(|| {
                (!state.parents.is_empty()).then_some(crate::state::Checkpoint::TrimHorizon)
            });
            let source = KinesisSource::new(
                self.reads.clone(),
                self.store.config().stream.clone(),
                ReadSettings::from(&self.config),
                efo,
                self.efo_lock.as_ref().map(|l| l.arn.clone()),
                self.store.clone(),
            );
            let pipeline =
                ShardPipeline::new(shard.clone(), start, state.checkpoint_arrival, source)
                    .ending_at(end);
            self.pipelines.open(pipeline, state.parents.clone());
        }
        Ok(())
    }

    /// Reads the shard once and processes what came. Whether anything was read.
    async fn read(&mut self, shard: &ShardId) -> Result<bool> {
        let mut stop_by = self.stop_by(shard);
        if matches!(self.mode, Mode::Group(_)) && stop_by.is_none() {
            // No lease in the session for a shard still being read: nothing
            // of it may be processed.
            self.drop_shard(shard, StopReason::Lost).await;
            return Ok(false);
        }
        if stop_by.is_some_and(|t| instant_now() >= t) {
            // The window since the last heartbeat ran out (a long batch):
            // the session beats now, right before this read, so the shard
            // is never starved by the others.
            self.beat().await?;
            if !self.pipelines.contains(shard) {
                return Ok(false);
            }
            stop_by = self.stop_by(shard);
            if stop_by.is_some_and(|t| instant_now() >= t) {
                tracing::debug!(%shard, "beat, and still no time left to process: not read");
                return Ok(false);
            }
        }
        let Some(pipeline) = self.pipelines.get_mut(shard) else {
            return Ok(false);
        };
        let core = Core::new(&self.handler, Some(&self.store), &self.config.processing);
        let mut checkpointer = Paced {
            inner: ModeCheckpoints {
                mode: &mut self.mode,
                observer: self.observer.as_ref(),
            },
            pacing: &mut self.pacing,
            every: self.config.checkpoint_every,
        };
        let started = instant_now();
        let step = pipeline
            .step(&core, &mut checkpointer, stop_by, &mut self.report.shards)
            .await;
        self.busy.add_overall(started.elapsed());
        self.busy.add(shard, started.elapsed());
        self.stepped(shard, step).await
    }

    /// What a step of `shard` leads to: a shard read to its end is
    /// completed, a lost one dropped, an enhanced fan-out consumer gone is
    /// dealt with. Whether anything was read.
    async fn stepped(
        &mut self,
        shard: &ShardId,
        step: std::result::Result<Step, ReadError>,
    ) -> Result<bool> {
        match step {
            Ok(Step::Idle) => Ok(false),
            Ok(Step::Processed { ended, .. }) => {
                self.report.millis_behind_latest =
                    self.pipelines.millis_behind().into_values().max();
                if ended {
                    self.complete(shard).await?;
                }
                Ok(true)
            }
            Ok(Step::Lost) => {
                self.drop_shard(shard, StopReason::Lost).await;
                // A standalone EFO consumer's checkpoints are fenced by its
                // EFO lock: check the lock at the next tick.
                self.efo_recheck = self.config.enhanced_fan_out.is_some();
                Ok(false)
            }
            Err(ReadError::ConsumerGone(why)) if self.efo_lock.is_some() => {
                self.efo_consumer_gone(&why).await?;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The worker's group is bounded (a backfill) and finished: every shard
    /// of it read to its end. Looked at only while the worker holds nothing,
    /// at most once a heartbeat interval (one read of the group).
    pub(super) async fn group_finished(&mut self) -> Result<bool> {
        if !self.pipelines.is_empty()
            || !self.pending.is_empty()
            || instant_now() < self.next_finish_check
        {
            return Ok(false);
        }
        self.next_finish_check =
            instant_now() + self.config.renew_every.max(Duration::from_secs(1));
        if self.store.group_end().await?.is_none() {
            return Ok(false);
        }
        let snapshot = self.store.load_group().await?;
        let shards: Vec<crate::state::ShardState> = match self.mode.scope() {
            ShardScope::Group => snapshot.shards,
            ShardScope::Consumer(c) => snapshot
                .own_shards
                .into_iter()
                .filter(|(o, _)| *o == c)
                .map(|(_, s)| s)
                .collect(),
            ShardScope::Efo(e) => snapshot
                .efo_shards
                .into_iter()
                .filter(|(o, _)| *o == e)
                .map(|(_, s)| s)
                .collect(),
        };
        let finished = !shards.is_empty() && shards.iter().all(|s| s.depleted);
        self.report.group_finished = finished;
        Ok(finished)
    }

    /// When processing of `shard` must stop: the lease's local expiry less
    /// the margin (at most a quarter of the term), `None` without a lease
    /// (standalone).
    fn stop_by(&self, shard: &ShardId) -> Option<Instant> {
        self.mode
            .local_expiry(shard)
            .map(|(t, term)| t - self.config.expiry_margin.min(term / 4))
    }

    /// The shard is read to its end: deplete it so its children become leasable.
    async fn complete(&mut self, shard: &ShardId) -> Result<()> {
        let config = self.store.config();
        let (specs, _) = list_stream_shards(&self.kinesis, &config.stream, &config.retry).await?;
        let children: Vec<_> = specs
            .into_iter()
            .filter(|s| s.parents.contains(shard))
            .collect();
        // Announced before the write, stamped with its send time: the
        // children cannot be leased before the write lands, and a worker
        // stopped while the write is in flight still leaves the completion
        // on record. A write refused for a lost lease is followed by `Lost`.
        self.emit(WorkerEvent::Stopped {
            shard: shard.clone(),
            why: StopReason::Completed,
            at: instant_now(),
        });
        match self.mode.complete_shard(shard, &children).await {
            Ok(_) => {
                self.report.shards_completed += 1;
                self.handler.shard_ended(shard).await;
            }
            Err(e) if e.is_lease_lost() => {
                self.report.leases_lost += 1;
                self.stopped(shard, StopReason::Lost);
                self.handler.lease_lost(shard).await;
            }
            Err(e) => return Err(e),
        }
        self.pipelines.close(shard);
        Ok(())
    }
}
