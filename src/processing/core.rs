//! The record-processing core: the one loop that every mode (event-source-mapped
//! processors, the shard worker, the DynamoDB Streams reader) runs over a
//! batch of one shard.
//!
//! A mode reads its records into [`Unit`]s and supplies a [`CheckpointSink`];
//! the core owns the rest:
//! - order: units are handled one after another, records of a unit in order;
//! - the duplicate check: a record the sink's stored position covers is skipped;
//! - attempts and parking: each failure is counted in the state store, and a
//!   record that failed `max_attempts` times is parked and passed;
//! - the failure mode: stop at the first failure, or report every failure;
//! - one stop-by instant: no user record starts at or after it, and no
//!   handler runs past it;
//! - progress: the end of the successful (or parked) prefix, committed to
//!   the sink during the batch (every second, or every `checkpoint_records`
//!   records), at its end, and on every way out;
//! - the counters of a [`BatchReport`].

use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::options::{FailureMode, ProcessingOptions, ATTEMPTS_TTL, CHECKPOINT_EVERY};
use crate::processing::outcome::{BatchReport, RecordError, RecordFailure};
use crate::processing::parking::park;
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use crate::state::{
    Checkpoint, RecordKey, Result, SequenceNumber, ShardId, StateError, StateStore,
    MAX_SEQUENCE_DIGITS,
};
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// Where a mode keeps its positions (what is already done, and what a batch
/// made done) and its per-record state.
pub trait CheckpointSink: Send {
    /// The stored position of the batch, if any: the core skips the records
    /// it covers. Read once per batch, before the first record.
    fn stored(&mut self) -> impl Future<Output = Result<Option<Checkpoint>>> + Send;

    /// Stores `checkpoint`: every record of the batch up to it was handled
    /// or parked. Called during the batch and at its end, with progress
    /// that only moves forward. Returns whether a write was stored
    /// (`false`: the stored position was already at or past it). An error
    /// ends the batch.
    fn commit(&mut self, checkpoint: &Checkpoint) -> impl Future<Output = Result<bool>> + Send;

    /// A state-store error of the sink's reads and writes, or of counting a
    /// record's attempts. `Err` ends the batch with it (the default); a
    /// sink that can go on without its state notes it and returns `Ok`,
    /// and from then on ([`CheckpointSink::degraded`]) the core neither
    /// commits nor counts attempts in this batch.
    fn unavailable(&mut self, error: StateError) -> Result<()> {
        Err(error)
    }

    /// `true` once the sink goes on without its state (see
    /// [`CheckpointSink::unavailable`]).
    fn degraded(&self) -> bool {
        false
    }

    /// `true` once the sink can take no more checkpoints (a lease was lost):
    /// the core starts nothing more of the batch.
    fn halted(&self) -> bool {
        false
    }

    /// The key a record's attempts and parked copy are kept under. By
    /// default the record's shard (for modes whose group names the stream).
    fn record_key(&self, record: &StreamRecord, sequence: &SequenceNumber) -> Result<RecordKey> {
        Ok(RecordKey::in_shard(
            ShardId::new(&*record.shard_id)?,
            sequence.clone(),
            record.sub_sequence,
        ))
    }
}

/// A sink that stores nothing and knows of nothing done (processing without
/// a state store).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCheckpoints;

impl CheckpointSink for NoCheckpoints {
    async fn stored(&mut self) -> Result<Option<Checkpoint>> {
        Ok(None)
    }

    async fn commit(&mut self, _: &Checkpoint) -> Result<bool> {
        Ok(false)
    }
}

/// The processing core for one handler and its options; [`Core::run`]
/// processes one batch.
pub struct Core<'p, H> {
    handler: &'p H,
    store: Option<&'p StateStore>,
    options: &'p ProcessingOptions,
}

/// One record waiting in a run for a batched handler: its item identifier
/// and the record.
type Pending = (Arc<str>, StreamRecord);

/// The core's view of one batch in progress.
struct Batch<'s, S> {
    sink: &'s mut S,
    stop_by: Option<Instant>,
    stored: Option<Option<Checkpoint>>,
    /// The last record done (its sequence number, checked, and its
    /// sub-sequence number): the progress, made a checkpoint when committed.
    progress: Option<(Arc<str>, u64)>,
    /// Progress not committed yet.
    dirty: bool,
    since_commit: u64,
    last_commit: Instant,
    /// The instant read last, when nothing was awaited since (the next
    /// check of the stop-by instant takes it instead of reading the clock
    /// again).
    clock: Option<Instant>,
    report: BatchReport,
    failed: bool,
}

fn to_record_error(e: HandlerError, record: &StreamRecord) -> RecordError {
    match e.downcast::<RecordError>() {
        Ok(e) => *e,
        Err(e) => RecordError::Handler {
            sequence_number: record.sequence_number.to_string(),
            sub_sequence: record.sub_sequence,
            error: e.to_string(),
        },
    }
}

/// Awaits `work`, giving up at `stop_by`; `None` if it did not finish.
/// Work that is done at its first poll (most handlers) needs no timer.
async fn bounded<T>(stop_by: Option<Instant>, work: impl Future<Output = T>) -> Option<T> {
    let mut work = std::pin::pin!(work);
    let first = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
    if let Poll::Ready(done) = first {
        return Some(done);
    }
    match stop_by {
        None => Some(work.await),
        Some(t) => tokio::time::timeout_at(t.into(), work).await.ok(),
    }
}

/// Checks that `sequence` is a sequence number (what [`SequenceNumber::new`]
/// accepts) without making one; the error is `SequenceNumber::new`'s.
fn check_sequence(sequence: &str) -> Result<()> {
    let plain = !sequence.is_empty()
        && sequence.len() <= MAX_SEQUENCE_DIGITS
        && sequence.bytes().all(|b| b.is_ascii_digit());
    if plain {
        Ok(())
    } else {
        SequenceNumber::new(sequence).map(drop)
    }
}

impl<'p, H: RecordHandler> Core<'p, H> {
    /// A core running `handler` with `options`; `store` counts attempts and
    /// parks records in the state table (without one nothing is parked).
    pub fn new(
        handler: &'p H,
        store: Option<&'p StateStore>,
        options: &'p ProcessingOptions,
    ) -> Self {
        Core {
            handler,
            store,
            options,
        }
    }

    /// Processes one batch: each item is a record's item identifier (what a
    /// failure is reported as) and its unit. No user record starts at or
    /// after `stop_by`, and a handler still running at `stop_by` is given up
    /// ([`RecordError::Timeout`]); the records left are reported as
    /// [`RecordError::Deadline`] failures. Progress is committed to `sink`
    /// during the batch, at its end and before an error comes back
    /// (counted in [`BatchReport::checkpoints`] when a write was stored).
    ///
    /// The error is for what cannot be reported per record: the state store
    /// failing, or a sequence number that is not one.
    pub async fn run<S: CheckpointSink>(
        &self,
        items: impl IntoIterator<Item = (Arc<str>, Unit)>,
        stop_by: Option<Instant>,
        sink: &mut S,
    ) -> Result<BatchReport> {
        let mut batch = Batch {
            sink,
            stop_by,
            stored: None,
            progress: None,
            dirty: false,
            since_commit: 0,
            last_commit: Instant::now(),
            clock: None,
            report: BatchReport::default(),
            failed: false,
        };
        let items: Vec<_> = items.into_iter().collect();
        let done = if H::BATCHED {
            self.run_batched(&mut batch, items).await
        } else {
            self.run_records(&mut batch, items).await
        };
        match done {
            Ok(()) => batch.commit().await?,
            Err(e) => {
                // Best effort on the way out: what was done stays done.
                if !batch.sink.halted() {
                    if let Err(c) = batch.commit().await {
                        tracing::warn!(error = %c, "checkpoint on the way out failed");
                    }
                }
                return Err(e);
            }
        }
        Ok(batch.report)
    }

    fn stopped<S: CheckpointSink>(&self, batch: &Batch<'_, S>) -> bool {
        (batch.failed && self.options.mode == FailureMode::StopAtFirstFailure)
            || batch.sink.halted()
    }

    /// The record-at-a-time path.
    async fn run_records<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        items: Vec<(Arc<str>, Unit)>,
    ) -> Result<()> {
        let total = items.len();
        for (index, (item, unit)) in items.into_iter().enumerate() {
            if self.stopped(batch) {
                batch.report.not_attempted = (total - index) as u64;
                break;
            }
            if batch.out_of_time() {
                batch.deadline(&item);
                continue;
            }
            self.unit(batch, &item, unit).await?;
        }
        Ok(())
    }

    /// The batched path: runs of consecutive readable records go to
    /// `handle_batch` together; a broken or unreadable record between them
    /// is handled alone, as on the record-at-a-time path.
    async fn run_batched<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        items: Vec<(Arc<str>, Unit)>,
    ) -> Result<()> {
        let mut items = items.into_iter().peekable();
        while let Some((item, unit)) = items.next() {
            if self.stopped(batch) {
                batch.report.not_attempted += 1 + items.len() as u64;
                break;
            }
            if !unit.is_ready() {
                if batch.out_of_time() {
                    batch.deadline(&item);
                } else {
                    self.unit(batch, &item, unit).await?;
                }
                continue;
            }
            let mut run = Vec::new();
            batch.keep_new(&item, unit, &mut run).await?;
            while let Some((item, unit)) = items.next_if(|(_, unit)| unit.is_ready()) {
                batch.keep_new(&item, unit, &mut run).await?;
            }
            self.run_of_records(batch, run).await?;
        }
        Ok(())
    }

    /// Hands `run` to `handle_batch` (again for what it left unattempted,
    /// while the batch goes on) and maps each result back to its record.
    async fn run_of_records<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        mut run: Vec<Pending>,
    ) -> Result<()> {
        while !run.is_empty() {
            if self.stopped(batch) {
                batch.report.not_attempted += distinct_items(&run).len() as u64;
                return Ok(());
            }
            if batch.out_of_time() {
                for item in distinct_items(&run) {
                    batch.deadline(item);
                }
                return Ok(());
            }
            let records = run.iter().map(|(_, r)| r.clone()).collect();
            let Some(results) = bounded(batch.stop_by, self.handler.handle_batch(records)).await
            else {
                // Given up at the stop-by instant: none of the run counts.
                let (item, record) = &run[0];
                batch.failed = true;
                batch.fail(item, RecordError::timeout(record));
                return Ok(());
            };
            if results.is_empty() {
                let (item, record) = &run[0];
                let error = RecordError::Handler {
                    sequence_number: record.sequence_number.to_string(),
                    sub_sequence: record.sub_sequence,
                    error: "the batch handler returned no result for it".to_owned(),
                };
                batch.failed = true;
                batch.fail(item, error);
                return Ok(());
            }
            let mut answered = 0;
            for (result, (item, record)) in results.into_iter().zip(&run) {
                answered += 1;
                match result {
                    Ok(()) => {
                        batch.report.processed += 1;
                        batch.arrived(record);
                        batch.advance(record);
                    }
                    Err(e) => {
                        let error = to_record_error(e, record);
                        if !self.failed_record(batch, item, record, error).await? {
                            batch.failed = true;
                            if self.stopped(batch) {
                                break;
                            }
                        }
                    }
                }
            }
            run.drain(..answered);
            batch.maybe_commit(self.options).await?;
        }
        Ok(())
    }

    async fn unit<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        item: &str,
        unit: Unit,
    ) -> Result<()> {
        match unit {
            Unit::Unreadable(item, error) => {
                batch.failed = true;
                batch.fail(&item, error);
            }
            Unit::Broken(record, error) => {
                check_sequence(&record.sequence_number)?;
                if !self.failed_record(batch, item, &record, error).await? {
                    batch.failed = true;
                }
            }
            Unit::Record(record) => {
                self.record(batch, item, record).await?;
            }
            Unit::Records(records) => {
                for record in records {
                    if !self.record(batch, item, record).await? {
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Handles one user record of `item`'s unit; `false` if the unit ends
    /// here (out of time, halted, or a failure that is not parked).
    async fn record<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        item: &str,
        record: StreamRecord,
    ) -> Result<bool> {
        check_sequence(&record.sequence_number)?;
        if batch.covered(&record).await? {
            batch.report.duplicates_skipped += 1;
            return Ok(true);
        }
        if batch.out_of_time() || batch.sink.halted() {
            // Inside an aggregate: its item is read again, and
            // the checkpoint resumes after the last user record.
            batch.deadline(item);
            return Ok(false);
        }
        let handled = bounded(batch.stop_by, self.handler.handle(record.clone())).await;
        let result = match handled {
            Some(result) => result.map_err(|e| to_record_error(e, &record)),
            None => Err(RecordError::timeout(&record)),
        };
        match result {
            Ok(()) => {
                batch.report.processed += 1;
                batch.arrived(&record);
                batch.advance(&record);
            }
            Err(error) => {
                if !self.failed_record(batch, item, &record, error).await? {
                    batch.failed = true;
                    return Ok(false);
                }
            }
        }
        batch.maybe_commit(self.options).await?;
        Ok(true)
    }

    /// A record failed: count the attempt; park it once it has failed
    /// `max_attempts` times (then it counts as done), else report it (as
    /// `item`). A park that fails leaves the record failed (reported, the
    /// prefix before it kept). Returns `true` if it was parked.
    async fn failed_record<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        item: &str,
        record: &StreamRecord,
        error: RecordError,
    ) -> Result<bool> {
        if let Some(store) = self.store.filter(|_| !batch.sink.degraded()) {
            let sequence = SequenceNumber::new(&record.sequence_number)?;
            let key = batch.sink.record_key(record, &sequence)?;
            let attempts = match store
                .record_state()
                .record_attempt(&key, ATTEMPTS_TTL)
                .await
            {
                Ok(attempts) => attempts,
                Err(e) => {
                    batch.unavailable(e)?;
                    0
                }
            };
            if attempts >= self.options.max_attempts && !batch.sink.degraded() {
                match park(
                    &self.options.parking,
                    Some(store),
                    &key,
                    record,
                    &error,
                    attempts,
                )
                .await
                {
                    Ok(true) => {
                        tracing::warn!(
                            shard = %record.shard_id,
                            sequence_number = %record.sequence_number,
                            sub_sequence = record.sub_sequence,
                            attempts,
                            %error,
                            "poison record parked; the shard moves on"
                        );
                        batch.report.parked += 1;
                        batch.advance(record);
                        return Ok(true);
                    }
                    Ok(false) => {}
                    Err(park_error) => {
                        tracing::error!(
                            sequence_number = %record.sequence_number,
                            sub_sequence = record.sub_sequence,
                            error = %park_error,
                            "parking failed; the record is reported as failed"
                        );
                        batch.report.park_failures += 1;
                    }
                }
            }
        }
        batch.fail(item, error);
        Ok(false)
    }
}

/// The items the records of `run` belong to, each once (a KPL aggregate's
/// user records share one).
fn distinct_items(run: &[Pending]) -> Vec<&str> {
    let mut items: Vec<&str> = run.iter().map(|(item, _)| &**item).collect();
    items.dedup();
    items
}

impl<S: CheckpointSink> Batch<'_, S> {
    /// True if no user record may start now: the stop-by instant is past.
    fn out_of_time(&mut self) -> bool {
        let clock = self.clock.take();
        self.stop_by
            .is_some_and(|t| clock.unwrap_or_else(Instant::now) >= t)
    }

    /// Notes the arrival time of a handled record (for the age metric).
    fn arrived(&mut self, record: &StreamRecord) {
        if let Some(t) = record.approximate_arrival {
            let newest = self.report.newest_arrival.get_or_insert(t);
            *newest = (*newest).max(t);
        }
    }

    /// Reports a unit that cannot start before the stop-by instant.
    fn deadline(&mut self, item: &str) {
        self.failed = true;
        let error = RecordError::Deadline {
            sequence_number: item.to_owned(),
        };
        self.fail(item, error);
    }

    /// Adds the records of a ready unit that the stored position does not
    /// cover to `run` (the others are counted as duplicates). A unit that
    /// is not ready has none.
    async fn keep_new(
        &mut self,
        item: &Arc<str>,
        unit: Unit,
        run: &mut Vec<Pending>,
    ) -> Result<()> {
        match unit {
            Unit::Record(record) => self.keep_if_new(item, record, run).await,
            Unit::Records(records) => {
                for record in records {
                    self.keep_if_new(item, record, run).await?;
                }
                Ok(())
            }
            Unit::Broken(..) | Unit::Unreadable(..) => Ok(()),
        }
    }

    /// Adds `record` to `run` unless the stored position covers it (then it
    /// is counted as a duplicate).
    async fn keep_if_new(
        &mut self,
        item: &Arc<str>,
        record: StreamRecord,
        run: &mut Vec<Pending>,
    ) -> Result<()> {
        check_sequence(&record.sequence_number)?;
        if self.covered(&record).await? {
            self.report.duplicates_skipped += 1;
        } else {
            run.push((item.clone(), record));
        }
        Ok(())
    }

    fn fail(&mut self, item: &str, error: RecordError) {
        tracing::warn!(item, %error, "record failed");
        self.report.failures.push(RecordFailure {
            item_identifier: item.to_owned(),
            error,
        });
    }

    /// True if the stored position covers the record (its sequence number
    /// checked).
    async fn covered(&mut self, record: &StreamRecord) -> Result<bool> {
        if self.stored.is_none() {
            self.clock = None;
            let stored = match self.sink.stored().await {
                Ok(stored) => stored,
                Err(e) => {
                    self.unavailable(e)?;
                    None
                }
            };
            self.stored = Some(stored);
        }
        match self.stored.as_ref().and_then(Option::as_ref) {
            None => Ok(false),
            Some(cp) => {
                let sequence = SequenceNumber::new(&record.sequence_number)?;
                Ok(cp.covers(&sequence, record.sub_sequence))
            }
        }
    }

    /// Moves the progress past a record, unless a failure came first (then
    /// nothing after it may be checkpointed).
    fn advance(&mut self, record: &StreamRecord) {
        if !self.failed {
            self.progress = Some((record.sequence_number.clone(), record.sub_sequence));
            self.dirty = true;
            self.since_commit += 1;
        }
    }

    /// Commits the progress when enough time or records have gone by. The
    /// clock read here is the next check of the stop-by instant's.
    async fn maybe_commit(&mut self, options: &ProcessingOptions) -> Result<()> {
        let now = Instant::now();
        self.clock = Some(now);
        let due = now.saturating_duration_since(self.last_commit) >= CHECKPOINT_EVERY
            || options
                .checkpoint_records
                .is_some_and(|n| self.since_commit >= n);
        if self.dirty && due {
            self.commit().await?;
        }
        Ok(())
    }

    /// The sink's state failed: the batch ends with the error, or goes on
    /// without it (counted) where the sink allows.
    fn unavailable(&mut self, error: StateError) -> Result<()> {
        self.sink.unavailable(error)?;
        self.report.state_errors += 1;
        self.report.deduplication_off = true;
        Ok(())
    }

    /// Commits the progress not committed yet.
    async fn commit(&mut self) -> Result<()> {
        if !self.dirty || self.sink.halted() || self.sink.degraded() {
            return Ok(());
        }
        if let Some((sequence, sub_sequence)) = &self.progress {
            let cp = Checkpoint::After {
                sequence: SequenceNumber::new(sequence)?,
                sub_sequence: *sub_sequence,
            };
            self.clock = None;
            match self.sink.commit(&cp).await {
                Ok(true) => self.report.checkpoints += 1,
                Ok(false) => {}
                Err(e) => self.unavailable(e)?,
            }
        }
        self.dirty = false;
        self.since_commit = 0;
        self.last_commit = Instant::now();
        self.clock = Some(self.last_commit);
        Ok(())
    }
}
