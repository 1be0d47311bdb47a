//! One shard's pipeline: its position and its record source, and the step
//! that reads it once and runs what came through the core to the
//! checkpointer.

use super::checkpoint::{DoneAhead, PipelineSink};
use super::end;
use super::start::unpinned;
use crate::pipeline::{Checkpointer, Fetched, RecordSource, ShardReport, SourceBatch};
use crate::processing::{Core, Ran, RecordFailure, RecordHandler};
use crate::state::{Checkpoint, Clock as _, EpochMillis, SequenceNumber, ShardId, SystemClock};
use std::time::Instant;

/// How a step went.
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing to process now.
    Idle,
    /// A batch was processed (all of it, or up to a failure read again).
    Processed {
        /// The shard is read to its end: every record of it processed.
        ended: bool,
        /// The records that failed (the first stops the shard, or each is
        /// reported, as the failure mode says).
        failures: Vec<RecordFailure>,
    },
    /// The checkpointer refused for a lost lease: the shard stops here.
    Lost,
}

/// One shard consumed: read from its position by its source, run through
/// the core, committed to a checkpointer.
#[derive(Debug)]
pub(crate) struct ShardPipeline<S> {
    shard: ShardId,
    /// How far the shard is processed, or its pin while nothing is.
    position: Option<Checkpoint>,
    /// Arrival time of the last processed record.
    arrival: Option<EpochMillis>,
    /// The position is a LATEST start's pin not stored yet.
    pin_unstored: bool,
    /// `MillisBehindLatest` of the last read.
    millis_behind: Option<i64>,
    /// Where a bounded group stops reading the shard (see `end`).
    end: Option<Checkpoint>,
    /// Records done past the position (run past a failure, or ahead of a
    /// record of another key still running): the next batch skips them.
    done_ahead: DoneAhead,
    source: S,
}

impl<S: RecordSource> ShardPipeline<S> {
    /// A pipeline for `shard`, starting at `position` (its stored
    /// checkpoint; `None`: the source's initial position).
    pub fn new(
        shard: ShardId,
        position: Option<Checkpoint>,
        arrival: Option<EpochMillis>,
        source: S,
    ) -> Self {
        ShardPipeline {
            shard,
            position,
            arrival,
            pin_unstored: false,
            millis_behind: None,
            end: None,
            done_ahead: DoneAhead::default(),
            source,
        }
    }

    /// The same pipeline, reading the shard only up to `end` (a bounded
    /// group's end; `None`: to the shard's end).
    pub fn ending_at(mut self, end: Option<Checkpoint>) -> Self {
        self.end = end;
        self
    }

    /// Everything before the end of a bounded group is read.
    fn at_end(&self) -> bool {
        self.end
            .as_ref()
            .is_some_and(|end| end::reached(end, self.position.as_ref()))
    }

    /// Due to be read now.
    pub fn due(&self, now: Instant) -> bool {
        self.source.due(now)
    }

    /// The shard.
    pub fn shard(&self) -> &ShardId {
        &self.shard
    }

    /// How far the shard is processed (or its pin while nothing is).
    pub fn position(&self) -> Option<&Checkpoint> {
        self.position.as_ref()
    }

    /// Moves the position to `position`: a caller that takes the records
    /// from the source itself committed them (a manual checkpointer), or
    /// moved the shard (a seek).
    pub fn set_position(&mut self, position: Checkpoint) {
        self.position = Some(position);
        self.done_ahead = DoneAhead::default();
    }

    /// Read to its end, and all of it committed.
    pub fn finished(&self) -> bool {
        self.source.finished(self.position.as_ref())
    }

    /// The source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The source, to tell it of a change of how it reads.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// `MillisBehindLatest` of the last read.
    pub fn millis_behind(&self) -> Option<i64> {
        self.millis_behind
    }

    /// Where the shard stands, for a checkpoint at a hand-over or a stop:
    /// its progress, or, with none yet, its pin (the first record read, or
    /// the time a LATEST start was pinned to before anything came), so the
    /// next holder starts there and skips nothing. `None` when there is
    /// nothing to store.
    pub fn handover_position(&self) -> Option<(Checkpoint, Option<EpochMillis>)> {
        self.position
            .clone()
            .filter(|p| {
                p.has_progress()
                    || matches!(p, Checkpoint::AtSequence(_) | Checkpoint::AtTimestamp(_))
            })
            .map(|p| (p, self.arrival))
    }

    /// Reads the shard once and runs what came through `core`, committing
    /// to `checkpointer`; no record starts at or after `stop_by`. What it
    /// did is counted in `report` (the shards of one consumer count into
    /// one). The error is the source's (beyond what it rides out itself) or
    /// the state store's; the batch's progress is kept either way.
    pub async fn step<H: RecordHandler, C: Checkpointer>(
        &mut self,
        core: &Core<'_, H>,
        checkpointer: &mut C,
        stop_by: Option<Instant>,
        report: &mut ShardReport,
    ) -> Result<Step, S::Error> {
        if self.at_end() {
            return Ok(Step::Processed {
                ended: true,
                failures: Vec::new(),
            });
        }
        let fetched = self
            .source
            .fetch(&self.shard, self.position.as_ref(), report)
            .await;
        if let Some(pin) = self.source.take_pin() {
            if unpinned(self.position.as_ref()) {
                self.position = Some(pin);
                self.pin_unstored = true;
            }
        }
        if self.store_pin(checkpointer, report).await? {
            return Ok(Step::Lost);
        }
        match fetched? {
            Fetched::Nothing => Ok(Step::Idle),
            Fetched::Batch(mut batch) => {
                if let Some(end) = &self.end {
                    if let Some(past) = batch
                        .units
                        .iter()
                        .position(|(seq, unit)| end::past_end(end, seq, unit))
                    {
                        batch.units.truncate(past);
                        batch.ends_shard = true;
                    } else if batch.units.is_empty()
                        && end::caught_up_past(end, batch.millis_behind, SystemClock.now_millis())
                    {
                        batch.ends_shard = true;
                    }
                }
                Ok(self
                    .process(batch, core, checkpointer, stop_by, report)
                    .await?)
            }
        }
    }

    /// A LATEST start pinned to a time is stored at once (and again at each
    /// read until that succeeds), so a successor after a crash starts there
    /// too, not at a new LATEST that would skip what arrived in between.
    /// Returns `true` if a lost lease refused it.
    async fn store_pin<C: Checkpointer>(
        &mut self,
        checkpointer: &mut C,
        report: &mut ShardReport,
    ) -> crate::Result<bool> {
        let pin = match &self.position {
            Some(pin @ Checkpoint::AtTimestamp(_)) if self.pin_unstored => pin.clone(),
            _ => return Ok(false),
        };
        match checkpointer.checkpoint(&self.shard, &pin, None).await {
            Ok(_) => self.pin_unstored = false,
            Err(e) if e.is_lease_lost() => {
                tracing::warn!(shard = %self.shard, error = %e, "lease lost: the shard stops here");
                return Ok(true);
            }
            Err(e) if e.is_transient() => {
                report.transient_errors += 1;
                tracing::warn!(shard = %self.shard, error = %e, "storing a LATEST start's pin failed; a hand-over stores it");
            }
            Err(e) => return Err(e),
        }
        Ok(false)
    }

    async fn process<H: RecordHandler, C: Checkpointer>(
        &mut self,
        batch: SourceBatch,
        core: &Core<'_, H>,
        checkpointer: &mut C,
        stop_by: Option<Instant>,
        report: &mut ShardReport,
    ) -> crate::Result<Step> {
        tracing::trace!(shard = %self.shard, records = batch.units.len(), "read");
        checkpointer.batch_starts(&self.shard);
        // A shard with nothing processed (started at TRIM_HORIZON, LATEST
        // or a time) is pinned to the first record it read: a failed or cut
        // batch is read again from there, never from LATEST again.
        if let Some((first, _)) = batch.units.first() {
            let pinned = self
                .position
                .as_ref()
                .is_some_and(|p| p.has_progress() || matches!(p, Checkpoint::AtSequence(_)));
            if !pinned {
                self.position = Some(Checkpoint::AtSequence(SequenceNumber::new(first)?));
            }
        }
        let mut sink = PipelineSink {
            shard: &self.shard,
            position: self.position.clone(),
            arrival: batch.last_arrival,
            checkpointer,
            transient_errors: &mut report.transient_errors,
            done_ahead: &mut self.done_ahead,
        };
        let mut ran = Ran::default();
        let run = core
            .run_into(batch.units, stop_by, &mut sink, &mut ran)
            .await;
        report.add_batch(&ran.report);
        self.millis_behind = batch.millis_behind.or(self.millis_behind);
        // What the batch processed stays processed: reading carries on
        // after the last record committed (the core commits on every way
        // out), not again from where the batch started.
        if let Some(committed) = ran.committed {
            self.done_ahead.forget_covered(&committed);
            self.position = Some(committed);
            self.arrival = batch.last_arrival;
        }
        match run {
            Err(e) if e.is_lease_lost() => {
                tracing::warn!(shard = %self.shard, error = %e, "lease lost: the shard stops here");
                Ok(Step::Lost)
            }
            Err(e) => {
                self.source.processed(false);
                Err(e)
            }
            Ok(()) => {
                let ok = ran.report.failures.is_empty();
                self.source.processed(ok);
                Ok(Step::Processed {
                    ended: ok && (batch.ends_shard || self.at_end()),
                    failures: ran.report.failures,
                })
            }
        }
    }
}
