//! The core's path for records of different keys at once
//! ([`ProcessingOptions::concurrency`] above 1):
//! - a record's key is its partition key (a KPL user record's own; a
//!   DynamoDB change's item keys); a record starts once the record before
//!   it of its key is done, and at most `concurrency` run at once, the
//!   lowest waiting record first;
//! - the progress is the low watermark: the last record before the first
//!   one not done; a record done past it is told to the sink
//!   ([`CheckpointSink::past_failure`]), which remembers it, so a retry
//!   or a later batch skips it;
//! - `StopAtFirstFailure` stops the failing key: its later records are not
//!   attempted, other keys go on; an unreadable record (no key known)
//!   stops every record after it; `ReportAllFailures` stops nothing;
//! - no record starts more than [`LOOKAHEAD`] records past the watermark
//!   (what the sink remembers of a batch is bounded);
//! - no record starts at or after the stop-by instant, and one still
//!   running then is given up; the records not started are reported as
//!   [`RecordError::Deadline`] failures;
//! - while the sink watches records (a guarded delivery, a first record to
//!   mark), records start one at a time, each after the sink was told.

use super::*;
use crate::state::instant_now;
use futures_util::stream::{FuturesUnordered, StreamExt};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

/// How far past the watermark a record may start: as many records as a
/// batch's progress remembers done past its checkpoint
/// ([`crate::state::MAX_DONE_AFTER`]).
pub(crate) const LOOKAHEAD: usize = crate::state::MAX_DONE_AFTER;

/// One record of the batch, as the concurrent path tracks it.
struct Slot {
    item: Arc<str>,
    work: Work,
    state: State,
}

/// What a slot holds.
enum Work {
    Record(StreamRecord),
    /// A record that cannot be handled (its error, until reported).
    Broken(StreamRecord, Option<RecordError>),
    /// A record with no key known (its error, until reported).
    Unreadable(Option<RecordError>),
}

impl Work {
    fn record(&self) -> Option<&StreamRecord> {
        match self {
            Work::Record(r) | Work::Broken(r, _) => Some(r),
            Work::Unreadable(_) => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not looked at yet, or waiting for its key.
    Waiting,
    Running,
    /// Handled or parked: the progress may move past it.
    Done,
    /// Skipped as a duplicate (done before this batch).
    Skipped,
    /// Failed and reported.
    Failed,
    /// After a failure of its key (or an unreadable record): not attempted.
    Blocked,
}

/// The records of one key not started yet.
#[derive(Default)]
struct KeyLine {
    busy: bool,
    stopped: bool,
    waiting: VecDeque<usize>,
}

/// How a record's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    Done,
    Parked,
    Failed,
}

impl<H: RecordHandler> Core<'_, H> {
    /// Runs `items` with up to `concurrency` records of different keys at
    /// once (see the module doc).
    pub(super) async fn run_concurrent<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        items: Vec<(Arc<str>, Unit)>,
    ) -> Result<()> {
        let mut slots = slots(items);
        let stop_key = self.options.mode == FailureMode::StopAtFirstFailure;
        let mut keys: HashMap<Arc<str>, KeyLine> = HashMap::new();
        let mut freed: BinaryHeap<Reverse<usize>> = BinaryHeap::new();
        let mut running = FuturesUnordered::new();
        let mut next = 0;
        let mut low = 0;
        // Records done past the watermark.
        let mut ahead = BTreeSet::new();
        // An unreadable record stopped the batch here.
        let mut halted_at = None;
        let mut out_of_time = false;
        loop {
            // Start what may start.
            while !out_of_time {
                let limit = if batch.sink.watches_records() {
                    1
                } else {
                    self.options.concurrency.max(1)
                };
                if running.len() >= limit {
                    break;
                }
                let looked_at = halted_at.is_none() && next < slots.len() && next < low + LOOKAHEAD;
                let index = match freed.peek() {
                    Some(&Reverse(f)) if !looked_at || f < next => f,
                    _ if looked_at => next,
                    _ => break,
                };
                if batch.out_of_time() {
                    out_of_time = true;
                    break;
                }
                if index == next {
                    next += 1;
                    // A new record: skipped, stopped, queued behind its key,
                    // or started.
                    let slot = &mut slots[index];
                    let Some(record) = slot.work.record() else {
                        let Work::Unreadable(error) = &mut slot.work else {
                            unreachable!("a slot without a record is unreadable")
                        };
                        slot.state = State::Failed;
                        batch.failed = true;
                        let error = error.take().expect("reported once");
                        batch.fail(&slot.item, error);
                        if stop_key {
                            halted_at = Some(index);
                        }
                        continue;
                    };
                    check_sequence(&record.sequence_number)?;
                    if matches!(slot.work, Work::Record(_)) && batch.covered(record).await? {
                        batch.report.duplicates_skipped += 1;
                        slot.state = State::Skipped;
                        low = self.watermark(batch, &slots, low);
                        continue;
                    }
                    let line = keys.entry(record.partition_key.clone()).or_default();
                    if line.stopped {
                        slot.state = State::Blocked;
                        continue;
                    }
                    if line.busy || !line.waiting.is_empty() {
                        line.waiting.push_back(index);
                        continue;
                    }
                } else {
                    freed.pop();
                }
                // Start it.
                let record = slots[index].work.record().expect("a keyed record").clone();
                keys.entry(record.partition_key.clone()).or_default().busy = true;
                slots[index].state = State::Running;
                let broken = match &mut slots[index].work {
                    Work::Broken(_, error) => error.take(),
                    _ => None,
                };
                if let Some(error) = broken {
                    // Nothing to run: it fails now.
                    let finish = self.finished(batch, &mut slots, index, Err(error)).await?;
                    self.release(&mut keys, &mut slots, &mut freed, &record, finish, stop_key);
                    if finish != Finish::Failed {
                        ahead.insert(index);
                    }
                    low = self.settle(batch, &slots, &mut ahead, low, finish).await?;
                    continue;
                }
                if batch.sink.watches_records() {
                    // (Boxed: the marks' state calls stay off the future of every record.)
                    if Box::pin(self.before_record(batch, &record)).await? {
                        // Parked instead of run: the progress moved past it.
                        slots[index].state = State::Done;
                        let finish = Finish::Parked;
                        self.release(&mut keys, &mut slots, &mut freed, &record, finish, stop_key);
                        low = self.watermark(batch, &slots, low);
                        batch.maybe_commit(self.options).await?;
                        continue;
                    }
                }
                let labels = batch.labelling.labels(|| CallLabels::record(&record));
                let call = labels.label(self.handler.handle(record));
                let stop_by = batch.stop_by;
                running.push(async move {
                    let began = instant_now();
                    let handled = bounded(stop_by, CatchUnwind(Box::pin(call))).await;
                    (index, began.elapsed(), handled)
                });
            }
            // Wait for the next call to finish.
            let Some((index, took, handled)) = running.next().await else {
                break;
            };
            batch.clock = None;
            batch
                .report
                .handler_durations
                .add(took.as_secs_f64() * 1000.0);
            let record = slots[index].work.record().expect("a run record").clone();
            let result = match handled {
                Some(Ok(result)) => result.map_err(|e| to_record_error(e, &record)),
                Some(Err(panic)) => Err(RecordError::panic(&record, &*panic)),
                None => Err(RecordError::timeout(&record)),
            };
            let finish = self.finished(batch, &mut slots, index, result).await?;
            self.release(&mut keys, &mut slots, &mut freed, &record, finish, stop_key);
            if finish != Finish::Failed {
                ahead.insert(index);
            }
            low = self.settle(batch, &slots, &mut ahead, low, finish).await?;
        }
        tell_ahead(batch, &slots, &ahead);
        // What never started: past the stop-by instant it is reported (the
        // lowest such record is where a retry starts); otherwise it waits
        // behind a failure, which is reported.
        let mut last_item: Option<&str> = None;
        for slot in &mut slots {
            if !matches!(slot.state, State::Waiting | State::Blocked) {
                continue;
            }
            if last_item == Some(&*slot.item) {
                continue;
            }
            last_item = Some(&*slot.item);
            if out_of_time && slot.state == State::Waiting {
                batch.deadline(&slot.item);
            } else {
                batch.report.not_attempted += 1;
            }
        }
        Ok(())
    }

    /// Notes how the call of `slots[index]` went: `Ok` done (counted), or
    /// a failure counted, then parked (done) or reported.
    async fn finished<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        slots: &mut [Slot],
        index: usize,
        result: std::result::Result<(), RecordError>,
    ) -> Result<Finish> {
        let slot = &mut slots[index];
        let record = slot.work.record().expect("a run record");
        let finish = match result {
            Ok(()) => {
                batch.report.processed += 1;
                batch.report.bytes_processed += record.data.len() as u64;
                batch.arrived(record);
                Finish::Done
            }
            Err(error) => {
                if self.count_failure(batch, &slot.item, record, error).await? {
                    Finish::Parked
                } else {
                    batch.failed = true;
                    Finish::Failed
                }
            }
        };
        slot.state = if finish == Finish::Failed {
            State::Failed
        } else {
            State::Done
        };
        Ok(finish)
    }

    /// The key of `record` is free again: its next record is freed to
    /// start, unless the record failed and failures stop the key (then the
    /// key's later records are not attempted).
    fn release(
        &self,
        keys: &mut HashMap<Arc<str>, KeyLine>,
        slots: &mut [Slot],
        freed: &mut BinaryHeap<Reverse<usize>>,
        record: &StreamRecord,
        finish: Finish,
        stop_key: bool,
    ) {
        let line = keys.get_mut(&record.partition_key).expect("a started key");
        line.busy = false;
        if finish == Finish::Failed && stop_key {
            line.stopped = true;
            for index in line.waiting.drain(..) {
                slots[index].state = State::Blocked;
            }
        } else if let Some(index) = line.waiting.pop_front() {
            freed.push(Reverse(index));
        }
    }

    /// After a record finished: the watermark moves over what is done, and
    /// the progress is committed when due, and at once after a park (as on
    /// the one-at-a-time path). Records done past the watermark are told to
    /// the sink before a commit (so it stores them with it). Returns the
    /// new watermark.
    async fn settle<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        slots: &[Slot],
        ahead: &mut BTreeSet<usize>,
        low: usize,
        finish: Finish,
    ) -> Result<usize> {
        let low = self.watermark(batch, slots, low);
        *ahead = ahead.split_off(&low);
        if (finish == Finish::Parked && batch.dirty) || batch.commit_due(self.options) {
            tell_ahead(batch, slots, ahead);
            batch.commit().await?;
        }
        Ok(low)
    }

    /// Moves the progress over the records done from `low` on; returns the
    /// first record not done.
    fn watermark<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        slots: &[Slot],
        mut low: usize,
    ) -> usize {
        while let Some(slot) = slots.get(low) {
            match slot.state {
                State::Done => batch.progress_to(slot.work.record().expect("a done record")),
                State::Skipped => {}
                _ => break,
            }
            low += 1;
        }
        low
    }
}

/// Tells the sink of the records done past the watermark (it remembers
/// them as done; what a checkpoint covers it may forget).
fn tell_ahead<S: CheckpointSink>(
    batch: &mut Batch<'_, S>,
    slots: &[Slot],
    ahead: &BTreeSet<usize>,
) {
    for &index in ahead {
        if let Some(record) = slots[index].work.record() {
            batch.sink.past_failure(record);
        }
    }
}

/// The batch's records, each a slot (a KPL aggregate's user records each
/// one of their own, under the aggregate's item).
fn slots(items: Vec<(Arc<str>, Unit)>) -> Vec<Slot> {
    let mut slots = Vec::with_capacity(items.len());
    let slot = |item: &Arc<str>, work| Slot {
        item: item.clone(),
        work,
        state: State::Waiting,
    };
    for (item, unit) in items {
        match unit {
            Unit::Record(record) => slots.push(slot(&item, Work::Record(record))),
            Unit::Records(records) => {
                slots.extend(records.into_iter().map(|r| slot(&item, Work::Record(r))))
            }
            Unit::Broken(record, error) => {
                slots.push(slot(&item, Work::Broken(*record, Some(error))))
            }
            Unit::Unreadable(item, error) => {
                slots.push(slot(&Arc::from(item), Work::Unreadable(Some(error))))
            }
        }
    }
    slots
}
