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

mod batch;
mod concurrent;
mod effects;
mod failure;
#[cfg(test)]
mod tests;

use crate::processing::effects::{collecting, Effects};
use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::labels::{CallLabels, Labelling};
use crate::processing::options::{FailureMode, ProcessingOptions};
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::panic::CatchUnwind;
use crate::processing::parking::{park_at_limit, AtLimit};
use crate::processing::record::StreamRecord;
use crate::processing::redact::LoggedError;
use crate::processing::sink::CheckpointSink;
use crate::processing::unit::Unit;
use crate::state::instant_now;
use crate::state::{Checkpoint, SequenceNumber, StateStore};
use crate::Result;
use batch::{check_sequence, Batch};
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

/// The processing core for one handler and its options; [`Core::run`]
/// processes one batch.
pub struct Core<'p, H> {
    handler: &'p H,
    store: Option<&'p StateStore>,
    options: &'p ProcessingOptions,
}

/// One record waiting in a run for a batched handler: its item identifier
/// and the record.
pub(super) type Pending = (Arc<str>, StreamRecord);

/// What a batch did: its report, and the last checkpoint it committed (where
/// reading carries on from).
#[derive(Debug, Default)]
pub(crate) struct Ran {
    pub report: BatchReport,
    pub committed: Option<Checkpoint>,
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
        let mut ran = Ran::default();
        self.run_into(items, stop_by, sink, &mut ran).await?;
        Ok(ran.report)
    }

    /// [`Core::run`], keeping what the batch did in `ran` whatever the
    /// outcome: a shard pipeline counts the records of a batch that broke
    /// off, and carries on after its last commit.
    pub(crate) async fn run_into<S: CheckpointSink>(
        &self,
        items: impl IntoIterator<Item = (Arc<str>, Unit)>,
        stop_by: Option<Instant>,
        sink: &mut S,
        ran: &mut Ran,
    ) -> Result<()> {
        let mut batch = Batch {
            sink,
            stop_by,
            stored: None,
            progress: None,
            dirty: false,
            since_commit: 0,
            last_commit: instant_now(),
            clock: None,
            report: BatchReport::default(),
            committed: None,
            failed: false,
            log_values: self.options.log_values,
            labelling: Labelling::of(self.options),
            effects: None,
            conflict: None,
        };
        // Effects are collected one record a call, at concurrency 1.
        if batch.sink.takes_effects() && !H::BATCHED && self.options.concurrency <= 1 {
            batch.effects = Some(Vec::new());
        }
        let items: Vec<_> = items.into_iter().collect();
        if H::PREPARES {
            let records: Vec<&StreamRecord> =
                items.iter().flat_map(|(_, u)| u.ready_records()).collect();
            self.handler.before_batch(&records).await;
        }
        let done = if H::BATCHED {
            self.run_batched(&mut batch, items).await
        } else if self.options.concurrency > 1 {
            // (Boxed: one allocation a batch keeps the calls in flight off
            // the future of every mode that runs a batch.)
            Box::pin(self.run_concurrent(&mut batch, items)).await
        } else {
            self.run_records(&mut batch, items).await
        };
        // The last commit says the delivery ended (it did not die here).
        batch.sink.ending();
        let done = match done {
            Ok(()) => self.commit(&mut batch).await.map(drop),
            Err(e) => {
                // Best effort on the way out: what was done stays done
                // (unless the lease is gone: then nothing may be).
                if !e.is_lease_lost() {
                    if let Err(c) = batch.commit().await {
                        tracing::warn!(error = %c, "checkpoint on the way out failed");
                    }
                }
                Err(e)
            }
        };
        batch.sink.ended().await;
        ran.report = batch.report;
        ran.committed = batch.committed;
        done
    }

    fn stopped<S: CheckpointSink>(&self, batch: &Batch<'_, S>) -> bool {
        batch.failed && self.options.mode == FailureMode::StopAtFirstFailure
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
        // After a panic, or in a delivery guarded against a death, one
        // record a call: the record that panics, or kills the process, is
        // found.
        let mut singles = batch.sink.guarded();
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
            let size = if singles { 1 } else { run.len() };
            if singles
                && batch.sink.watches_records()
                && Box::pin(self.before_record(batch, &run[0].1)).await?
            {
                run.drain(..1);
                batch.maybe_commit(self.options).await?;
                continue;
            }
            let records: Vec<StreamRecord> = run[..size].iter().map(|(_, r)| r.clone()).collect();
            let labels = batch.labelling.labels(|| CallLabels::records(&records));
            let call = labels.label(self.handler.handle_batch(records));
            let began = instant_now();
            let called = CatchUnwind(Box::pin(call));
            let results = bounded(batch.stop_by, called).await;
            batch.report.handler_durations.add(millis(began));
            let results = match results {
                Some(Ok(results)) => results,
                // Given up at the stop-by instant: none of the run counts.
                None => {
                    let (item, record) = &run[0];
                    batch.failed = true;
                    batch.fail(item, RecordError::timeout(record));
                    return Ok(());
                }
                // A panic in the batch handler: the run goes again one
                // record a call, and the record whose call panics is the one
                // failed (counted, parked at its limit), as a bisecting
                // mapping would find it.
                Some(Err(_)) if size > 1 => {
                    singles = true;
                    continue;
                }
                Some(Err(panic)) => {
                    let (item, record) = &run[0];
                    let error = RecordError::panic(record, &*panic);
                    if !self.failed_record(batch, item, record, error).await? {
                        batch.failed = true;
                        if self.stopped(batch) {
                            return Ok(());
                        }
                    }
                    run.drain(..1);
                    batch.maybe_commit(self.options).await?;
                    continue;
                }
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
                        batch.report.bytes_processed += record.data.len() as u64;
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
        if batch.out_of_time() {
            // Inside an aggregate: its item is read again, and
            // the checkpoint resumes after the last user record.
            batch.deadline(item);
            return Ok(false);
        }
        // (Boxed: the marks' state calls stay off the future of every record.)
        if batch.sink.watches_records() && Box::pin(self.before_record(batch, &record)).await? {
            return self.maybe_commit(batch).await;
        }
        let labels = batch.labelling.labels(|| CallLabels::record(&record));
        let call = labels.label(self.handler.handle(record.clone()));
        // Without its state the sink cannot write effects: none are collected.
        let collect = batch.effects.is_some() && !batch.sink.degraded();
        let call = async move {
            if collect {
                collecting(call).await
            } else {
                (call.await, Effects::default())
            }
        };
        let began = instant_now();
        let called = CatchUnwind(Box::pin(call));
        let handled = bounded(batch.stop_by, called).await;
        batch.report.handler_durations.add(millis(began));
        let (result, staged) = match handled {
            Some(Ok((result, staged))) => (result.map_err(|e| to_record_error(e, &record)), staged),
            Some(Err(panic)) => (
                Err(RecordError::panic(&record, &*panic)),
                Effects::default(),
            ),
            None => (Err(RecordError::timeout(&record)), Effects::default()),
        };
        match result {
            Ok(()) => {
                batch.report.processed += 1;
                batch.report.bytes_processed += record.data.len() as u64;
                batch.arrived(&record);
                batch.done_with(item, &record, staged);
            }
            Err(error) => {
                if !self.failed_record(batch, item, &record, error).await? {
                    batch.failed = true;
                    return Ok(false);
                }
            }
        }
        self.maybe_commit(batch).await
    }
}

/// The items the records of `run` belong to, each once (a KPL aggregate's
/// user records share one).
fn distinct_items(run: &[Pending]) -> Vec<&str> {
    let mut items: Vec<&str> = run.iter().map(|(item, _)| &**item).collect();
    items.dedup();
    items
}

/// Milliseconds since `began`.
fn millis(began: Instant) -> f64 {
    began.elapsed().as_secs_f64() * 1000.0
}
