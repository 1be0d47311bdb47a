//! The self-managed shard worker: holds the leases the rebalancer gives it,
//! reads each leased shard (GetRecords polling, or SubscribeToShard through
//! an enhanced fan-out consumer locked from the group's pool), hands the
//! records to the same processing core as the event-source-mapped handlers,
//! and writes fenced checkpoints. The same code runs in a Lambda invocation
//! (bounded by its deadline) and in a long-running process (bounded by a
//! stop signal).

mod config;
mod feed;

pub(crate) use config::LATEST_REOPEN_MARGIN_MS;
pub use config::{InitialPosition, WorkerConfig, WorkerReport, SHARD_READ_BYTES_PER_SECOND};

use crate::consumer::list_stream_shards;
use crate::consumer::lock_or_grow;
use crate::consumer::mode::Mode;
use crate::consumer::reads::{KinesisReads, ReadError, SdkReads};
use crate::consumer::ConsumerSession;
use crate::consumer::StandaloneSession;
use crate::consumer::{Observer, StopReason, WorkerEvent};
use crate::processing::{CheckpointSink, Core, RecordHandler, StreamRecord, Unit};
use crate::state::{
    Checkpoint, CheckpointOutcome, EfoLock, EpochMillis, Result, SequenceNumber, ShardId,
    StateError, StateStore,
};
use feed::{Batch, Cursor, FetchNotes, Fetched};
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
    cursors: BTreeMap<ShardId, Cursor>,
    /// Shards gained whose cursor is not open yet (their state not read):
    /// kept until it is, so a failure in between never strands a lease.
    pending: BTreeSet<ShardId>,
    next_renew: Instant,
    report: WorkerReport,
    observer: Option<Observer>,
    efo_lock: Option<EfoLock>,
    efo_recheck: bool,
    /// Time spent processing since `busy_since` (reported as the handler's
    /// load at each renewal).
    busy: Duration,
    busy_since: Instant,
    /// From when the consumer hands its leases to others (see
    /// [`ShardWorker::drain_at`]), and whether it has started to.
    drain_at: Option<Instant>,
    draining: bool,
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
        if config.enhanced_fan_out.is_some() {
            // Nothing to read with until an EFO consumer is locked.
            mode.set_efo_lock(None);
        }
        let reads = Arc::new(SdkReads::new(kinesis.clone(), store.config().retry));
        ShardWorker {
            mode,
            store,
            kinesis,
            reads,
            handler,
            config,
            cursors: BTreeMap::new(),
            pending: BTreeSet::new(),
            next_renew: Instant::now(),
            report: WorkerReport::default(),
            observer: None,
            efo_lock: None,
            efo_recheck: false,
            busy: Duration::ZERO,
            busy_since: Instant::now(),
            drain_at: None,
            draining: false,
        }
    }

    /// From `at` on, the consumer leaves while it still reads: it is marked
    /// inactive, the rebalancer moves its leases to active consumers by
    /// claims, and it honours each at its next renewal (checkpoint, then
    /// hand-off), so its shards go to readers already running instead of
    /// waiting for its end. Set it some renewals and rebalancer ticks before
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
            at: Instant::now(),
        });
    }

    /// Stops reading `shard`: its lease is gone (lost, handed off, or
    /// released while the worker goes on).
    async fn drop_shard(&mut self, shard: &ShardId, why: StopReason) {
        self.pending.remove(shard);
        if self.cursors.remove(shard).is_some() {
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
        self.cursors.keys().cloned().collect()
    }

    /// The enhanced fan-out consumer it has locked (when reading with EFO).
    pub fn efo_lock(&self) -> Option<&EfoLock> {
        self.efo_lock.as_ref()
    }

    /// `MillisBehindLatest` of the last read of each held shard.
    pub fn millis_behind_latest(&self) -> BTreeMap<ShardId, i64> {
        self.cursors
            .iter()
            .filter_map(|(s, c)| c.millis_behind.map(|m| (s.clone(), m)))
            .collect()
    }

    /// Steps until `stop()` says so or `deadline` (an invocation's deadline
    /// minus a margin) passes; then checkpoints every shard and, by default
    /// ([`WorkerConfig::release_on_stop`]), leaves the group: leases released
    /// (claimants get theirs) so others take over at once.
    ///
    /// Transient failures ([`StateError::is_transient`]: throttling past the
    /// retries, AWS internal errors, a table or stream endpoint that does not
    /// answer) are ridden out: the step is tried again after a capped,
    /// growing pause and counted in [`WorkerReport::transient_errors`]. While
    /// renewals fail nothing is read, so no shard is processed past the
    /// lease term of its last renewal; a lease taken meanwhile is found lost
    /// at the next renewal. Any other error ends the run.
    pub async fn run_until(
        &mut self,
        deadline: Option<Instant>,
        stop: impl Fn() -> bool,
    ) -> Result<&WorkerReport> {
        let mut failures = 0;
        while !stop() && deadline.is_none_or(|d| Instant::now() < d) {
            match self.step().await {
                Ok(read) => {
                    failures = 0;
                    if !read {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                Err(e) if e.is_transient() => {
                    failures += 1;
                    self.transient(&e, "step failed; trying again");
                    let pause = self.store.config().retry.backoff_cap(failures);
                    let pause = deadline.map_or(pause, |d| {
                        pause.min(d.saturating_duration_since(Instant::now()))
                    });
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.handler.shutdown_requested().await;
        self.report.held_at_stop = self.cursors.len() as u64;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let stopped = if self.config.release_on_stop {
                self.leave().await
            } else {
                let positions = self.positions();
                self.mode
                    .checkpoint_all(&|shard| positions.get(shard).cloned())
                    .await
            };
            match stopped {
                Ok(_) => return Ok(&self.report),
                Err(e) if e.is_transient() && attempt < STOP_ATTEMPTS => {
                    self.transient(&e, "stopping failed; trying again");
                    tokio::time::sleep(self.store.config().retry.backoff_cap(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn transient(&mut self, error: &StateError, what: &str) {
        self.report.transient_errors += 1;
        tracing::warn!(consumer = %self.mode.id(), %error, "{what}");
    }

    /// Stops at the current progress: a group consumer leaves the group (see
    /// [`ConsumerSession::leave`]); a standalone worker checkpoints. An EFO
    /// consumer held is released for the next worker.
    pub async fn leave(&mut self) -> Result<()> {
        let positions = self.positions();
        self.mode
            .leave(&|shard| positions.get(shard).cloned())
            .await?;
        self.pending.clear();
        for shard in std::mem::take(&mut self.cursors).into_keys() {
            self.stopped(&shard, StopReason::Released);
        }
        if let Some(lock) = self.efo_lock.take() {
            self.store.efo_consumers().release(&lock).await?;
            self.mode.set_efo_lock(None);
        }
        Ok(())
    }

    /// Where each held shard stands, for checkpoints at a hand-over or a
    /// stop: its progress, or, with none yet, the first record it read (a
    /// start at LATEST or a time pinned to a sequence number), or the time
    /// a LATEST start was pinned to before anything came, so the next holder
    /// starts there and skips nothing.
    fn positions(&self) -> BTreeMap<ShardId, (Checkpoint, Option<EpochMillis>)> {
        self.cursors
            .iter()
            .filter_map(|(s, c)| {
                c.position
                    .clone()
                    .filter(|p| {
                        p.has_progress()
                            || matches!(p, Checkpoint::AtSequence(_) | Checkpoint::AtTimestamp(_))
                    })
                    .map(|p| (s.clone(), (p, c.arrival)))
            })
            .collect()
    }

    /// One step: renew when due, then one read of each shard that is due
    /// (a GetRecords, or the events a subscription has delivered). Returns
    /// whether any shard was read.
    pub async fn step(&mut self) -> Result<bool> {
        if Instant::now() >= self.next_renew {
            self.renew().await?;
        }
        let now = Instant::now();
        let due: Vec<ShardId> = self
            .cursors
            .iter()
            .filter(|(_, c)| c.due(now))
            .map(|(s, _)| s.clone())
            .collect();
        let mut read = false;
        for shard in &due {
            // Renewals keep their schedule while slow shards are processed.
            if Instant::now() >= self.next_renew {
                self.renew().await?;
            }
            read |= self.read(shard).await?;
        }
        Ok(read)
    }

    /// Locks an EFO consumer from the pool (or keeps the one held); without
    /// one, a group consumer gives up its leases (it is marked inactive, so the
    /// rebalancer gives it no more) and a standalone one reads nothing.
    async fn lock_efo(&mut self) -> Result<()> {
        let Some(pool) = &self.config.enhanced_fan_out else {
            return Ok(());
        };
        let lock = lock_or_grow(&self.store, &self.kinesis, self.mode.id(), pool).await?;
        self.efo_recheck = false;
        if lock == self.efo_lock {
            return Ok(());
        }
        tracing::info!(consumer = %self.mode.id(), efo = ?lock.as_ref().map(|l| l.name.as_str()), "enhanced fan-out consumer");
        self.efo_lock = lock.clone();
        for cursor in self.cursors.values_mut() {
            cursor.unsubscribe();
        }
        for shard in self.mode.set_efo_lock(lock) {
            self.drop_shard(&shard, StopReason::Released).await;
        }
        Ok(())
    }

    /// The EFO consumer this worker holds is gone from Kinesis (deregistered
    /// under the pool): its pool entry is retired (no other worker locks it
    /// again; the reaper finishes the retirement) and this worker locks
    /// another, or grows the pool, and subscribes again from its positions.
    async fn efo_consumer_gone(&mut self, why: &str) -> Result<()> {
        let Some(lock) = self.efo_lock.clone() else {
            return Ok(());
        };
        tracing::warn!(consumer = %self.mode.id(), efo = %lock.name, %why, "enhanced fan-out consumer gone from Kinesis");
        self.store.efo_consumers().retire_lent(&lock).await?;
        self.efo_lock = None;
        self.efo_recheck = true;
        self.lock_efo().await
    }

    async fn renew(&mut self) -> Result<()> {
        let efo = self.config.enhanced_fan_out.is_some();
        if efo && (self.efo_lock.is_none() || self.efo_recheck) {
            self.lock_efo().await?;
        }
        let elapsed = self.busy_since.elapsed().max(Duration::from_millis(1));
        let per_mille = (self.busy.as_micros() * 1000 / elapsed.as_micros()).min(1000) as u16;
        self.mode.set_busy(per_mille);
        self.busy = Duration::ZERO;
        self.busy_since = Instant::now();
        if !self.draining && self.drain_at.is_some_and(|at| Instant::now() >= at) {
            self.mode.drain().await?;
            self.draining = true;
            tracing::info!(consumer = %self.mode.id(), "draining: its leases go to the consumers that stay");
        }
        let positions = self.positions();
        let tick = self
            .mode
            .tick(&|shard| positions.get(shard).cloned())
            .await?;
        self.next_renew = Instant::now() + self.config.renew_every;
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
        if efo && self.efo_lock.is_none() && !(self.cursors.is_empty() && self.pending.is_empty()) {
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
        self.open_pending().await
    }

    /// Opens a cursor at the stored checkpoint of each shard gained.
    async fn open_pending(&mut self) -> Result<()> {
        let efo = self.config.enhanced_fan_out.is_some();
        while let Some(shard) = self.pending.first().cloned() {
            let state = self.store.shards().get(&self.mode.scope(), &shard).await?;
            self.pending.remove(&shard);
            self.emit(WorkerEvent::Gained {
                shard: shard.clone(),
                position: state.checkpoint.clone(),
                at: Instant::now(),
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
            self.cursors
                .insert(shard, Cursor::new(start, state.checkpoint_arrival, efo));
        }
        Ok(())
    }

    /// Reads the shard once and processes what came. Whether anything was read.
    async fn read(&mut self, shard: &ShardId) -> Result<bool> {
        let stop_by = self.stop_by(shard);
        if matches!(self.mode, Mode::Group(_)) && stop_by.is_none() {
            // No lease in the session for a shard still being read: nothing
            // of it may be processed.
            self.drop_shard(shard, StopReason::Lost).await;
            return Ok(false);
        }
        if stop_by.is_some_and(|t| Instant::now() >= t) {
            // The window since the last renewal ran out (a slow round of
            // renewals, a long batch): renew this lease alone, right before
            // its read, so the shard is never starved by the others.
            match self.mode.renew_one(shard).await {
                Ok(()) => {}
                Err(e) if e.is_lease_lost() => {
                    self.drop_shard(shard, StopReason::Lost).await;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
            if self.stop_by(shard).is_some_and(|t| Instant::now() >= t) {
                tracing::debug!(%shard, "renewed, and still no time left to process: not read");
                return Ok(false);
            }
        }
        let Some(cursor) = self.cursors.get_mut(shard) else {
            return Ok(false);
        };
        let mut notes = FetchNotes::default();
        let stream = &self.store.config().stream;
        let arn = self.efo_lock.as_ref().map(|l| l.arn.as_str());
        let fetched = cursor
            .fetch(&*self.reads, stream, shard, arn, &self.config, &mut notes)
            .await;
        // A LATEST start pinned to a time (its first iterator opened) is
        // stored at once (and again at each read until that succeeds), so a
        // successor after a crash starts there too, not at a new LATEST that
        // would skip what arrived in between.
        let pin = cursor
            .position
            .clone()
            .filter(|p| cursor.pin_unstored && matches!(p, Checkpoint::AtTimestamp(_)));
        self.report.polls += u64::from(notes.polled);
        self.report.subscriptions += u64::from(notes.subscribed);
        self.report.subscriptions_refused += u64::from(notes.refused);
        self.report.throttled += u64::from(notes.throttled);
        self.report.iterators_refreshed += u64::from(notes.refreshed);
        self.report.transient_errors += u64::from(notes.failed);
        if let Some(pin) = pin {
            match self.mode.checkpoint(shard, &pin, None).await {
                Ok(_) => {
                    if let Some(cursor) = self.cursors.get_mut(shard) {
                        cursor.pin_unstored = false;
                    }
                }
                Err(e) if e.is_lease_lost() => {
                    self.drop_shard(shard, StopReason::Lost).await;
                    return Ok(false);
                }
                Err(e) if e.is_transient() => self.transient(
                    &e,
                    "storing a LATEST start's pin failed; a hand-over stores it",
                ),
                Err(e) => return Err(e),
            }
        }
        match fetched {
            Ok(Fetched::Batch(batch)) => {
                tracing::trace!(%shard, records = batch.records.len(), "read");
                self.process(shard, batch).await?;
                Ok(true)
            }
            Ok(Fetched::Nothing) => Ok(false),
            Err(ReadError::ConsumerGone(why)) if self.efo_lock.is_some() => {
                self.efo_consumer_gone(&why).await?;
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn process(&mut self, shard: &ShardId, batch: Batch) -> Result<()> {
        let started = Instant::now();
        let out = self.process_batch(shard, batch).await;
        self.busy += started.elapsed();
        out
    }

    async fn process_batch(&mut self, shard: &ShardId, batch: Batch) -> Result<()> {
        let shard_arc: Arc<str> = shard.as_str().into();
        let items = batch.records.iter().map(|r| {
            let sequence_number: Arc<str> = r.sequence_number.as_str().into();
            let base = StreamRecord {
                shard_id: shard_arc.clone(),
                sequence_number: sequence_number.clone(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: r.partition_key.as_str().into(),
                explicit_hash_key: None,
                data: bytes::Bytes::new(),
                approximate_arrival: r.arrival,
                event_source_arn: None,
            };
            (sequence_number, Unit::kinesis(base, r.data.clone()))
        });
        let cursor = self.cursors.get_mut(shard).expect("cursor");
        // A shard with nothing processed (started at TRIM_HORIZON, LATEST
        // or a time) is pinned to the first record it read: a failed or cut
        // batch is read again from there, never from LATEST again.
        if let Some(first) = batch.records.first() {
            let pinned = cursor
                .position
                .as_ref()
                .is_some_and(|p| p.has_progress() || matches!(p, Checkpoint::AtSequence(_)));
            if !pinned {
                cursor.position = Some(Checkpoint::AtSequence(SequenceNumber::new(
                    &first.sequence_number,
                )?));
            }
        }
        let position = cursor.position.clone();
        let last_arrival = batch.records.last().and_then(|r| r.arrival);
        let stop_by = self.stop_by(shard);
        if let Some((lease_expiry, _)) = self.mode.local_expiry(shard) {
            self.emit(WorkerEvent::Processing {
                shard: shard.clone(),
                at: Instant::now(),
                lease_expiry,
            });
        }
        let mut sink = LeaseCheckpoints {
            mode: &mut self.mode,
            shard,
            position,
            arrival: last_arrival,
            written: Vec::new(),
            last: None,
            transient: Vec::new(),
            lost: None,
        };
        let core = Core::new(&self.handler, Some(&self.store), &self.config.processing);
        let run = core.run(items, stop_by, &mut sink).await;
        let LeaseCheckpoints {
            written,
            last,
            transient,
            lost,
            ..
        } = sink;
        for (checkpoint, sent, outcome) in written {
            self.report.checkpoints += 1;
            if outcome == CheckpointOutcome::Stored {
                self.emit(WorkerEvent::Checkpointed {
                    shard: shard.clone(),
                    checkpoint,
                    sent,
                });
            }
        }
        let report = match run {
            Ok(report) => report,
            Err(e) => {
                // The batch broke off (a state call failed): what it
                // processed stays processed. Reading carries on after the
                // last record done (the core committed it on its way out),
                // not again from where the batch started.
                let position = last.map(|cp| (cp, last_arrival));
                let cursor = self.cursors.get_mut(shard).expect("cursor");
                cursor.processed(batch, false, position, &self.config);
                return Err(e);
            }
        };
        let failed = !report.failures.is_empty();
        self.report.processed += report.processed;
        self.report.duplicates_skipped += report.duplicates_skipped;
        self.report.parked += report.parked;
        // The records are processed: reading carries on after them (not
        // again within this lease) and the next checkpoint, a hand-over or
        // leaving stores the position.
        for e in &transient {
            self.transient(e, "checkpoint failed; the next one covers these records");
        }
        if let Some(e) = lost {
            tracing::warn!(%shard, error = %e, "lease lost: the shard stops here");
            self.drop_shard(shard, StopReason::Lost).await;
            // A standalone EFO consumer's checkpoints are fenced by its EFO
            // lock: check the lock at the next renewal.
            self.efo_recheck = self.config.enhanced_fan_out.is_some();
            return Ok(());
        }
        let position = last.map(|cp| (cp, last_arrival));
        let ends = !failed && batch.ends_shard();
        let cursor = self.cursors.get_mut(shard).expect("cursor");
        cursor.processed(batch, !failed, position, &self.config);
        self.report.millis_behind_latest =
            self.cursors.values().filter_map(|c| c.millis_behind).max();
        if ends {
            self.complete(shard).await?;
        }
        Ok(())
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
            at: Instant::now(),
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
        self.cursors.remove(shard);
        Ok(())
    }
}

/// The worker's checkpoint sink: the cursor's position is what is done; a
/// commit is a fenced checkpoint through the lease (or, standalone, in the
/// consumer's own scope). Its outcomes are the worker's to handle after the
/// batch: a lost lease halts the batch, a transient failure is left to the
/// next checkpoint.
struct LeaseCheckpoints<'a> {
    mode: &'a mut Mode,
    shard: &'a ShardId,
    position: Option<Checkpoint>,
    arrival: Option<EpochMillis>,
    /// Checkpoints written, with when each request was sent (what the
    /// worker's events report) and what it did.
    written: Vec<(Checkpoint, Instant, CheckpointOutcome)>,
    /// The last checkpoint committed: where reading carries on from.
    last: Option<Checkpoint>,
    transient: Vec<StateError>,
    lost: Option<StateError>,
}

impl CheckpointSink for LeaseCheckpoints<'_> {
    async fn stored(&mut self) -> Result<Option<Checkpoint>> {
        Ok(self.position.clone())
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> Result<bool> {
        self.last = Some(checkpoint.clone());
        let sent = Instant::now();
        match self
            .mode
            .checkpoint(self.shard, checkpoint, self.arrival)
            .await
        {
            Ok(outcome) => {
                let stored = outcome == CheckpointOutcome::Stored;
                self.written.push((checkpoint.clone(), sent, outcome));
                Ok(stored)
            }
            Err(e) if e.is_lease_lost() => {
                self.lost = Some(e);
                Ok(false)
            }
            Err(e) if e.is_transient() => {
                self.transient.push(e);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn halted(&self) -> bool {
        self.lost.is_some()
    }
}
