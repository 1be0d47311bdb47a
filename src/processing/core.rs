//! The record-processing core: the one loop that every mode (event-source-mapped
//! processors, the shard worker) runs over a batch of one scope.
//!
//! A mode reads its records into [`Unit`]s and supplies a [`CheckpointSink`];
//! the core owns the rest:
//! - order: units are handled one after another, records of a unit in order;
//! - the duplicate check: a record the sink's stored position covers is skipped;
//! - attempts and parking: each failure is counted in the state store, and a
//!   record that failed `max_attempts` times is parked and passed;
//! - the failure mode: stop at the first failure, or report every failure;
//! - one stop-by instant: no unit starts at or after it, the rest is reported;
//! - progress: the end of the successful (or parked) prefix, committed to the
//!   sink once at the end of the batch;
//! - the counters of a [`BatchReport`].

use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::options::{FailureMode, ProcessingOptions};
use crate::processing::outcome::{BatchReport, RecordError, RecordFailure};
use crate::processing::parking::park;
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use crate::state::{Checkpoint, RecordKey, Result, SequenceNumber, ShardId, StateStore};
use std::future::Future;
use std::time::Instant;

/// Where a mode keeps its positions: what is already done, and what a batch
/// made done.
pub trait CheckpointSink: Send {
    /// The stored position of the batch's scope, if any: the core skips the
    /// records it covers. Read once per batch.
    fn stored(&mut self) -> impl Future<Output = Result<Option<Checkpoint>>> + Send;

    /// Stores `checkpoint`: every record of the batch up to it was handled
    /// or parked. Called once, at the end of a batch that made progress.
    /// Returns whether a write was stored (`false`: the stored position was
    /// already at or past it).
    fn commit(&mut self, checkpoint: &Checkpoint) -> impl Future<Output = Result<bool>> + Send;
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

/// The core's view of one batch in progress.
struct Batch<'s, S> {
    scope: &'s ShardId,
    sink: &'s mut S,
    stored: Option<Option<Checkpoint>>,
    progress: Option<Checkpoint>,
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

    /// Processes one batch of `scope` (a shard, or whatever the mode keeps
    /// one position for): each item is a record's item identifier (what a
    /// failure is reported as) and its unit. Nothing starts at or after
    /// `stop_by`: those units are reported as [`RecordError::Deadline`]
    /// failures. The end of the successful prefix is committed to `sink`
    /// (counted in [`BatchReport::checkpoints`] when a write was stored).
    ///
    /// The error is for what cannot be reported per record: the state store
    /// failing, or a sequence number that is not one.
    pub async fn run<S: CheckpointSink>(
        &self,
        scope: &ShardId,
        items: impl IntoIterator<Item = (String, Unit)>,
        stop_by: Option<Instant>,
        sink: &mut S,
    ) -> Result<BatchReport> {
        let mut batch = Batch {
            scope,
            sink,
            stored: None,
            progress: None,
            report: BatchReport::default(),
            failed: false,
        };
        let items: Vec<_> = items.into_iter().collect();
        if H::BATCHED {
            self.run_batched(&mut batch, items, stop_by).await?;
        } else {
            let total = items.len();
            for (index, (item, unit)) in items.into_iter().enumerate() {
                if self.stopped(&batch) {
                    batch.report.not_attempted = (total - index) as u64;
                    break;
                }
                if stop_by.is_some_and(|t| Instant::now() >= t) {
                    batch.out_of_time(&item);
                    continue;
                }
                self.unit(&mut batch, unit).await?;
            }
        }
        if let Some(cp) = batch.progress.take() {
            if batch.sink.commit(&cp).await? {
                batch.report.checkpoints += 1;
            }
        }
        Ok(batch.report)
    }

    fn stopped<S>(&self, batch: &Batch<'_, S>) -> bool {
        batch.failed && self.options.mode == FailureMode::StopAtFirstFailure
    }

    /// The batched path: runs of consecutive readable records go to
    /// `handle_batch` together; a broken or unreadable record between them
    /// is handled alone, as on the record-at-a-time path.
    async fn run_batched<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        items: Vec<(String, Unit)>,
        stop_by: Option<Instant>,
    ) -> Result<()> {
        let mut items = items.into_iter().peekable();
        while let Some((item, unit)) = items.next() {
            if self.stopped(batch) {
                batch.report.not_attempted += 1 + items.len() as u64;
                break;
            }
            let Unit::Records(records) = unit else {
                if stop_by.is_some_and(|t| Instant::now() >= t) {
                    batch.out_of_time(&item);
                } else {
                    self.unit(batch, unit).await?;
                }
                continue;
            };
            let mut run = Vec::new();
            batch.keep_new(&item, records, &mut run).await?;
            while let Some((_, Unit::Records(_))) = items.peek() {
                let Some((item, Unit::Records(records))) = items.next() else {
                    unreachable!("peeked");
                };
                batch.keep_new(&item, records, &mut run).await?;
            }
            self.run_of_records(batch, run, stop_by).await?;
        }
        Ok(())
    }

    /// Hands `run` to `handle_batch` (again for what it left unattempted,
    /// while the batch goes on) and maps each result back to its record.
    async fn run_of_records<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        mut run: Vec<(String, StreamRecord, SequenceNumber)>,
        stop_by: Option<Instant>,
    ) -> Result<()> {
        while !run.is_empty() {
            if self.stopped(batch) {
                batch.report.not_attempted += distinct_items(&run);
                return Ok(());
            }
            if stop_by.is_some_and(|t| Instant::now() >= t) {
                let mut last: Option<&str> = None;
                for (item, _, _) in &run {
                    if last != Some(item.as_str()) {
                        batch.out_of_time(item);
                    }
                    last = Some(item);
                }
                return Ok(());
            }
            let records = run.iter().map(|(_, r, _)| r.clone()).collect();
            let results = self.handler.handle_batch(records).await;
            if results.is_empty() {
                let (item, record, _) = &run[0];
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
            for (result, (_, record, sequence)) in results.into_iter().zip(&run) {
                answered += 1;
                match result {
                    Ok(()) => {
                        batch.report.processed += 1;
                        batch.advance(sequence.clone(), record.sub_sequence);
                    }
                    Err(e) => {
                        let error = to_record_error(e, record);
                        if !self.failed_record(batch, record, error).await? {
                            batch.failed = true;
                            if self.stopped(batch) {
                                break;
                            }
                        }
                    }
                }
            }
            run.drain(..answered);
        }
        Ok(())
    }

    async fn unit<S: CheckpointSink>(&self, batch: &mut Batch<'_, S>, unit: Unit) -> Result<()> {
        match unit {
            Unit::Unreadable(item, error) => {
                batch.failed = true;
                batch.fail(&item, error);
            }
            Unit::Broken(record, error) => {
                if !self.failed_record(batch, &record, error).await? {
                    batch.failed = true;
                }
            }
            Unit::Records(records) => {
                for record in records {
                    let sequence = SequenceNumber::new(&record.sequence_number)?;
                    if batch.covered(&sequence, record.sub_sequence).await? {
                        batch.report.duplicates_skipped += 1;
                        continue;
                    }
                    match self.handler.handle(record.clone()).await {
                        Ok(()) => {
                            batch.report.processed += 1;
                            batch.advance(sequence, record.sub_sequence);
                        }
                        Err(e) => {
                            let error = to_record_error(e, &record);
                            if !self.failed_record(batch, &record, error).await? {
                                batch.failed = true;
                                return Ok(());
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A record failed: count the attempt; park it once it has failed
    /// `max_attempts` times (then it counts as done), else report it.
    /// Returns `true` if it was parked.
    async fn failed_record<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        record: &StreamRecord,
        error: RecordError,
    ) -> Result<bool> {
        if let Some(store) = self.store {
            let key = RecordKey {
                shard_id: batch.scope.clone(),
                sequence: SequenceNumber::new(&record.sequence_number)?,
                sub_sequence: record.sub_sequence,
            };
            let attempts = store
                .record_attempt(&key, self.options.attempts_ttl)
                .await?;
            if attempts >= self.options.max_attempts
                && park(
                    &self.options.parking,
                    Some(store),
                    &key,
                    record,
                    &error,
                    attempts,
                )
                .await?
            {
                tracing::warn!(
                    scope = %batch.scope,
                    sequence_number = %record.sequence_number,
                    sub_sequence = record.sub_sequence,
                    attempts,
                    %error,
                    "poison record parked; the shard moves on"
                );
                batch.report.parked += 1;
                batch.advance(key.sequence, record.sub_sequence);
                return Ok(true);
            }
        }
        batch.fail(&record.sequence_number, error);
        Ok(false)
    }
}

/// How many items the records of `run` belong to (a KPL aggregate's user
/// records share one).
fn distinct_items(run: &[(String, StreamRecord, SequenceNumber)]) -> u64 {
    let mut count = 0;
    let mut last: Option<&str> = None;
    for (item, _, _) in run {
        if last != Some(item.as_str()) {
            count += 1;
        }
        last = Some(item);
    }
    count
}

impl<S: CheckpointSink> Batch<'_, S> {
    /// Reports a unit that cannot start before the stop-by instant.
    fn out_of_time(&mut self, item: &str) {
        self.failed = true;
        let error = RecordError::Deadline {
            sequence_number: item.to_owned(),
        };
        self.fail(item, error);
    }

    /// Adds the records of a unit that the stored position does not cover
    /// to `run` (the others are counted as duplicates).
    async fn keep_new(
        &mut self,
        item: &str,
        records: Vec<StreamRecord>,
        run: &mut Vec<(String, StreamRecord, SequenceNumber)>,
    ) -> Result<()> {
        for record in records {
            let sequence = SequenceNumber::new(&record.sequence_number)?;
            if self.covered(&sequence, record.sub_sequence).await? {
                self.report.duplicates_skipped += 1;
            } else {
                run.push((item.to_owned(), record, sequence));
            }
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

    /// True if the stored position covers the record.
    async fn covered(&mut self, sequence: &SequenceNumber, sub_sequence: u64) -> Result<bool> {
        if self.stored.is_none() {
            self.stored = Some(self.sink.stored().await?);
        }
        Ok(self
            .stored
            .as_ref()
            .and_then(Option::as_ref)
            .is_some_and(|cp| cp.covers(sequence, sub_sequence)))
    }

    /// Moves the progress past a record, unless a failure came first (then
    /// nothing after it may be checkpointed).
    fn advance(&mut self, sequence: SequenceNumber, sub_sequence: u64) {
        if !self.failed {
            self.progress = Some(Checkpoint::After {
                sequence,
                sub_sequence,
            });
        }
    }
}
