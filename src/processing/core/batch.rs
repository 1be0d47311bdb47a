//! The core's view of one batch in progress: the stored position and the
//! duplicate check, the progress and its commits, the stop-by instant, and
//! the report.

use super::effects::{Conflict, Waiting};
use super::Pending;
use crate::processing::labels::Labelling;
use crate::processing::options::{ProcessingOptions, CHECKPOINT_EVERY};
use crate::processing::outcome::{BatchReport, RecordError, RecordFailure};
use crate::processing::record::StreamRecord;
use crate::processing::redact::LoggedError;
use crate::processing::sink::CheckpointSink;
use crate::processing::unit::Unit;
use crate::state::instant_now;
use crate::state::{Checkpoint, SequenceNumber, MAX_SEQUENCE_DIGITS};
use crate::Result;
use std::sync::Arc;
use std::time::Instant;

/// The core's view of one batch in progress.
pub(super) struct Batch<'s, S> {
    pub(super) sink: &'s mut S,
    pub(super) stop_by: Option<Instant>,
    pub(super) stored: Option<Option<Checkpoint>>,
    /// The last record done (its sequence number, checked, and its
    /// sub-sequence number): the progress, made a checkpoint when committed.
    pub(super) progress: Option<(Arc<str>, u64)>,
    /// Progress not committed yet.
    pub(super) dirty: bool,
    pub(super) since_commit: u64,
    pub(super) last_commit: Instant,
    /// The instant read last, when nothing was awaited since (the next
    /// check of the stop-by instant takes it instead of reading the clock
    /// again).
    pub(super) clock: Option<Instant>,
    pub(super) report: BatchReport,
    /// The last checkpoint the sink was given (stored or not).
    pub(super) committed: Option<Checkpoint>,
    pub(super) failed: bool,
    /// Log lines quote payload values (`ProcessingOptions::log_values`).
    pub(super) log_values: bool,
    /// How handler calls are labelled in the log.
    pub(super) labelling: Labelling,
    /// Records done whose effects wait for a commit (`None`: effects are
    /// not collected).
    pub(super) effects: Option<Vec<Waiting>>,
    /// A record whose effects' condition failed at the last commit.
    pub(super) conflict: Option<Conflict>,
}

/// Checks that `sequence` is a sequence number (what [`SequenceNumber::new`]
/// accepts) without making one; the error is `SequenceNumber::new`'s.
pub(super) fn check_sequence(sequence: &str) -> Result<()> {
    let plain = !sequence.is_empty()
        && sequence.len() <= MAX_SEQUENCE_DIGITS
        && sequence.bytes().all(|b| b.is_ascii_digit());
    if plain {
        Ok(())
    } else {
        Ok(SequenceNumber::new(sequence).map(drop)?)
    }
}

impl<S: CheckpointSink> Batch<'_, S> {
    /// True if no user record may start now: the stop-by instant is past.
    pub(super) fn out_of_time(&mut self) -> bool {
        let clock = self.clock.take();
        self.stop_by
            .is_some_and(|t| clock.unwrap_or_else(instant_now) >= t)
    }

    /// Notes the arrival time of a handled record (for the age metric).
    pub(super) fn arrived(&mut self, record: &StreamRecord) {
        if let Some(t) = record.approximate_arrival {
            let newest = self.report.newest_arrival.get_or_insert(t);
            *newest = (*newest).max(t);
        }
    }

    /// Reports a unit that cannot start before the stop-by instant.
    pub(super) fn deadline(&mut self, item: &str) {
        self.failed = true;
        let error = RecordError::Deadline {
            sequence_number: item.to_owned(),
        };
        self.fail(item, error);
    }

    /// Adds the records of a ready unit that the stored position does not
    /// cover to `run` (the others are counted as duplicates). A unit that
    /// is not ready has none.
    pub(super) async fn keep_new(
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
    pub(super) async fn keep_if_new(
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

    pub(super) fn fail(&mut self, item: &str, error: RecordError) {
        let logged = LoggedError {
            error: &error,
            values: self.log_values,
        };
        tracing::warn!(item, error = %logged, "record failed");
        self.report.failures.push(RecordFailure {
            item_identifier: item.to_owned(),
            error,
        });
    }

    /// True if the stored position covers the record (its sequence number
    /// checked).
    pub(super) async fn covered(&mut self, record: &StreamRecord) -> Result<bool> {
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
        let covered = match self.stored.as_ref().and_then(Option::as_ref) {
            None => false,
            Some(cp) => {
                let sequence = SequenceNumber::new(&record.sequence_number)?;
                cp.covers(&sequence, record.sub_sequence)
            }
        };
        Ok(covered || self.sink.done(record))
    }

    /// Moves the progress past a record, unless a failure came first (then
    /// nothing after it may be checkpointed).
    pub(super) fn advance(&mut self, record: &StreamRecord) {
        if !self.failed {
            self.progress_to(record);
        } else {
            self.sink.past_failure(record);
        }
    }

    /// Moves the progress to `record`: it and every record before it are
    /// done.
    pub(super) fn progress_to(&mut self, record: &StreamRecord) {
        self.progress = Some((record.sequence_number.clone(), record.sub_sequence));
        self.dirty = true;
        self.since_commit += 1;
    }

    /// Commits the progress when enough time or records have gone by. The
    /// clock read here is the next check of the stop-by instant's.
    pub(super) async fn maybe_commit(&mut self, options: &ProcessingOptions) -> Result<()> {
        if self.commit_due(options) {
            self.commit().await?;
        }
        Ok(())
    }

    /// True if progress waits to be committed and enough time or records
    /// have gone by. The clock read here is the next check of the stop-by
    /// instant's.
    pub(super) fn commit_due(&mut self, options: &ProcessingOptions) -> bool {
        let now = instant_now();
        self.clock = Some(now);
        let due = now.saturating_duration_since(self.last_commit) >= CHECKPOINT_EVERY
            || options
                .checkpoint_records
                .is_some_and(|n| self.since_commit >= n);
        self.dirty && due
    }

    /// The sink's state failed: the batch ends with the error, or goes on
    /// without it (counted) where the sink allows and no effects wait
    /// (from then on none are collected).
    pub(super) fn unavailable(&mut self, error: crate::Error) -> Result<()> {
        if self.effects_wait() {
            // Effects are written with the progress or not at all.
            return Err(error);
        }
        self.sink.unavailable(error)?;
        self.report.state_errors += 1;
        self.report.deduplication_off = true;
        Ok(())
    }

    /// Commits the progress not committed yet.
    pub(super) async fn commit(&mut self) -> Result<()> {
        if !self.dirty || self.sink.degraded() {
            return Ok(());
        }
        if self.effects_wait() {
            // (Boxed: off the future of every record.)
            return Box::pin(self.commit_effects()).await;
        }
        if let Some((sequence, sub_sequence)) = &self.progress {
            let cp = Checkpoint::After {
                sequence: SequenceNumber::new(sequence)?,
                sub_sequence: *sub_sequence,
            };
            self.clock = None;
            let committed = self.sink.commit(&cp).await;
            self.committed = Some(cp);
            match committed {
                Ok(true) => self.report.checkpoints += 1,
                Ok(false) => {}
                Err(e) if e.is_lease_lost() => return Err(e),
                Err(e) => self.unavailable(e)?,
            }
        }
        self.dirty = false;
        self.since_commit = 0;
        self.last_commit = instant_now();
        self.clock = Some(self.last_commit);
        Ok(())
    }
}
