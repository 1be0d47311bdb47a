//! Where an event-source-mapped batch keeps its progress: one item per
//! batch in the state table (see [`BatchKey`]), never a lease item.
//!
//! - What the batch skips: the longest prefix of its own that progress
//!   stored under its key shows done (see `prefix`), so only records a
//!   batch holding them completed.
//! - What it stores: its progress, with the digests of its prefixes.
//! - Attempts and parked records: keyed by the consumer, the stream and
//!   the record's shard (or event id).
//! - A state table that cannot be read or written: the batch goes on
//!   without de-duplication (at-least-once) instead of failing, and says
//!   so once in the log and in its report.

mod carry;
mod effects;

use crate::lambda::prefix::{Digest16, Identities, PrefixHasher};
use crate::processing::options::CHECKPOINT_TTL;
use crate::processing::outcome::BatchReport;
use crate::processing::record::StreamRecord;
use crate::processing::sink::CheckpointSink;
use crate::processing::state_time::within;
use crate::state::{
    BatchKey, BatchProgress, Checkpoint, CheckpointOutcome, EffectsOutcome, RecordKey, RunMark,
    SequenceNumber, ShardId, StateError, StateStore,
};
use aws_sdk_dynamodb::types::TransactWriteItem;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// The progress of one event-source-mapped batch.
pub(crate) struct BatchProgressSink<'a> {
    store: &'a StateStore,
    batch: BatchKey,
    identities: Identities,
    /// The digest of the whole batch, computed once.
    content: Digest16,
    hasher: PrefixHasher,
    /// Each record's event id by sequence number, where the event names no
    /// shard (DynamoDB Streams).
    event_ids: Vec<(Arc<str>, Arc<str>)>,
    /// The last progress committed, and how many records it covers.
    committed: Option<(Checkpoint, usize)>,
    /// The state table failed: no more reads or writes in this batch.
    degraded: bool,
    /// The floor set on the batch's shard at a cut-over from the fleet:
    /// records at or before it are done.
    floor: Option<Checkpoint>,
    /// By when the read before the first record must come back.
    before_records: Option<Instant>,
    /// By when every other state call must come back (the deadline).
    until: Option<Instant>,
    /// The invocation's request id: a record's failure counts once in it,
    /// and the writes of this delivery carry it.
    request_id: Option<Arc<str>>,
    /// An earlier delivery of the batch died in it: each record is marked
    /// before it starts.
    guarded: bool,
    /// The record an earlier (guarded) delivery died in, and that delivery.
    died_in: Option<(SequenceNumber, u64, String)>,
    /// The next commit is the last.
    ending: bool,
    /// This delivery wrote progress or marks, and whether its last write
    /// said it ended.
    wrote: Option<bool>,
    /// Mark the first record this delivery runs (see
    /// [`crate::processing::ProcessingOptions::mark_first_record`]), and
    /// whether it has been.
    mark_first: bool,
    first_marked: bool,
    /// The first record's mark stands and that record is done: the mark
    /// is taken back before the next record starts (a death after it must
    /// not be put down to it).
    first_mark_standing: bool,
    /// Whether the batch has a progress item (read or written by this
    /// delivery): a mark goes on it, or, with none, makes it.
    has_item: bool,
    /// Records done past a failure (stored ones, read with the progress,
    /// and this delivery's): skipped, and written with every commit and
    /// under the key of the batch Lambda sends next.
    done_after: HashSet<(Arc<str>, u64)>,
    /// This delivery added to `done_after`.
    done_past_failure: bool,
    /// The progress stored as this delivery read or wrote it last, with the
    /// digest of the batch that stored it (`Some(None)`: none stored;
    /// `None`: not known, another delivery wrote it). Effects are written
    /// only over it.
    observed: Option<Option<(Checkpoint, Digest16)>>,
}

impl<'a> BatchProgressSink<'a> {
    /// The progress of `batch`, whose records are `identities` (and, where
    /// the event names no shard, whose event ids by sequence number are
    /// `event_ids`).
    pub(crate) fn new(
        store: &'a StateStore,
        batch: BatchKey,
        identities: Identities,
        event_ids: Vec<(Arc<str>, Arc<str>)>,
    ) -> Self {
        BatchProgressSink {
            store,
            batch,
            hasher: PrefixHasher::new(&identities),
            content: identities.content(),
            identities,
            event_ids,
            committed: None,
            degraded: false,
            floor: None,
            before_records: None,
            until: None,
            request_id: crate::processing::RecordContext::current()
                .map(|c| c.request_id)
                .filter(|id| !id.is_empty()),
            guarded: false,
            died_in: None,
            ending: false,
            wrote: None,
            mark_first: false,
            first_marked: false,
            first_mark_standing: false,
            has_item: false,
            done_after: HashSet::new(),
            done_past_failure: false,
            observed: None,
        }
    }

    /// `done_after` as stored (in sequence order, at most
    /// [`crate::state::MAX_DONE_AFTER`] of them).
    fn done_after_stored(&self) -> Vec<(SequenceNumber, u64)> {
        let mut done: Vec<(SequenceNumber, u64)> = self
            .done_after
            .iter()
            .filter_map(|(sequence, sub)| Some((SequenceNumber::new(sequence).ok()?, *sub)))
            .collect();
        done.sort();
        done
    }

    /// The same sink, marking the first record it runs before it starts.
    pub(crate) fn with_first_record_mark(mut self, mark: bool) -> Self {
        self.mark_first = mark;
        self
    }

    /// How this delivery's writes describe it (`None` outside an
    /// invocation: no request id).
    fn run_mark(&self) -> Option<RunMark> {
        let mut mark = RunMark::of(&**self.request_id.as_ref()?);
        mark.ended = self.ending;
        Some(mark)
    }

    /// Notes what an earlier delivery's mark on the stored progress says:
    /// one that wrote, then neither ended nor wrote again, died in the batch.
    fn note_earlier_run(&mut self, progress: &BatchProgress) {
        let (Some(me), Some(run)) = (&self.request_id, &progress.run) else {
            return;
        };
        if run.ended || *run.by == **me {
            return;
        }
        tracing::warn!(
            delivery = %run.by,
            "an earlier delivery of this batch died in it: each record is marked before it starts"
        );
        self.guarded = true;
        self.died_in = run
            .started
            .clone()
            .map(|(sequence, sub)| (sequence, sub, run.by.clone()));
    }

    /// The same sink, its state calls bounded: the read of what is done by
    /// `before_records`, the others by `until` (a call past its bound is
    /// given up, and the batch goes on without its state).
    pub(crate) fn with_times(
        mut self,
        before_records: Option<Instant>,
        until: Option<Instant>,
    ) -> Self {
        self.before_records = before_records;
        self.until = until;
        self
    }

    /// The same sink, with the floor set on the batch's shard (see
    /// [`crate::state::RecordState::shard_floor`]).
    pub(crate) fn with_floor(mut self, floor: Option<Checkpoint>) -> Self {
        self.floor = floor;
        self
    }

    /// How many of the batch's first records the floor covers.
    fn below_floor(&self) -> usize {
        let Some(floor) = &self.floor else {
            return 0;
        };
        let covered = |(sequence, sub): (&str, u64)| {
            let Ok(seq) = SequenceNumber::new(sequence) else {
                return false;
            };
            match floor {
                Checkpoint::ShardEnd => true,
                Checkpoint::After {
                    sequence: f,
                    sub_sequence,
                } => seq < *f || (seq == *f && sub <= *sub_sequence),
                Checkpoint::AtSequence(f) => seq < *f,
                _ => false,
            }
        };
        (0..)
            .map_while(|i| self.identities.get(i))
            .take_while(|id| covered(*id))
            .count()
    }

    fn event_id(&self, sequence: &str) -> Option<&str> {
        self.event_ids
            .iter()
            .find(|(seq, _)| &**seq == sequence)
            .map(|(_, id)| &**id)
    }
}

impl CheckpointSink for BatchProgressSink<'_> {
    async fn stored(&mut self) -> crate::Result<Option<Checkpoint>> {
        if self.degraded {
            return Ok(None);
        }
        let read = async {
            Ok(self
                .store
                .record_state()
                .batch_progress(&self.batch)
                .await?)
        };
        let progress = within(self.before_records, "GetItem", Box::pin(read)).await?;
        self.observed = Some(progress.as_ref().map(|p| (p.checkpoint.clone(), p.content)));
        if let Some(progress) = &progress {
            self.has_item = true;
            self.note_earlier_run(progress);
            self.done_after.extend(
                progress
                    .done_after
                    .iter()
                    .map(|(sequence, sub)| (Arc::from(sequence.as_str()), *sub)),
            );
        }
        let done = progress
            .map_or(0, |p| self.identities.matched(&p.prefixes))
            .max(self.below_floor());
        if done == 0 {
            return Ok(None);
        }
        let (sequence, sub_sequence) = self.identities.get(done - 1).expect("within the batch");
        Ok(Some(Checkpoint::After {
            sequence: SequenceNumber::new(sequence)?,
            sub_sequence,
        }))
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> crate::Result<bool> {
        if self.degraded {
            return Ok(false);
        }
        let Some((progress, done)) = self.progress_at(checkpoint) else {
            return Ok(false);
        };
        let outcome = self.store_progress(&self.batch, &progress).await;
        let stored = matches!(outcome, Ok(CheckpointOutcome::Stored));
        self.observe(stored.then_some(&progress));
        outcome?;
        self.committed_at(checkpoint, done, stored);
        Ok(stored)
    }

    fn takes_effects(&self) -> bool {
        true
    }

    async fn commit_effects(
        &mut self,
        checkpoint: &Checkpoint,
        effects: Vec<TransactWriteItem>,
    ) -> crate::Result<EffectsOutcome> {
        self.commit_with_effects(checkpoint, effects).await
    }

    fn record_key(
        &self,
        record: &StreamRecord,
        sequence: &SequenceNumber,
    ) -> crate::Result<RecordKey> {
        let shard = self
            .batch
            .shard
            .as_ref()
            .map(|_| ShardId::new(&*record.shard_id))
            .transpose()?;
        let event_id = match shard {
            Some(_) => None,
            None => Some(
                self.event_id(&record.sequence_number)
                    .ok_or_else(|| StateError::validation("event id", "the record has none"))?
                    .to_owned(),
            ),
        };
        Ok(RecordKey {
            consumer: Some(self.batch.consumer.clone()),
            source: Some(self.batch.stream.clone()),
            shard_id: shard,
            event_id,
            sequence: sequence.clone(),
            sub_sequence: record.sub_sequence,
        })
    }

    fn calls_until(&self) -> Option<Instant> {
        self.until
    }

    fn attempt(&self) -> Option<&str> {
        self.request_id.as_deref()
    }

    fn done(&self, record: &StreamRecord) -> bool {
        !self.done_after.is_empty()
            && self
                .done_after
                .contains(&(record.sequence_number.clone(), record.sub_sequence))
    }

    fn past_failure(&mut self, record: &StreamRecord) {
        if self.done_after.len() < crate::state::MAX_DONE_AFTER {
            self.done_after
                .insert((record.sequence_number.clone(), record.sub_sequence));
            self.done_past_failure = true;
        }
    }

    fn guarded(&self) -> bool {
        self.guarded && !self.degraded
    }

    fn watches_records(&self) -> bool {
        self.died_in.is_some()
            || self.guarded()
            || (self.mark_first && !self.first_marked)
            || self.first_mark_standing
    }

    async fn before_record(&mut self, record: &StreamRecord) -> crate::Result<Option<String>> {
        let died_in = self.died_in.as_ref().and_then(|(sequence, sub, by)| {
            (*sequence.as_str() == *record.sequence_number && *sub == record.sub_sequence)
                .then(|| by.clone())
        });
        let first = self.mark_first && !self.first_marked;
        self.first_marked = true;
        let Some(me) = self.request_id.clone() else {
            return Ok(died_in);
        };
        if self.degraded {
            return Ok(died_in);
        }
        if !(self.guarded || first) {
            if std::mem::take(&mut self.first_mark_standing) {
                // The first record is done: its mark goes, so a death from
                // here on is no death in it.
                let clear = async {
                    Ok(self
                        .store
                        .record_state()
                        .mark_run(&self.batch, self.content, &me, None, false)
                        .await?)
                };
                within(self.until, "UpdateItem", Box::pin(clear)).await?;
            }
            return Ok(died_in);
        }
        let sequence = SequenceNumber::new(&record.sequence_number)?;
        let started = Some((sequence.clone(), record.sub_sequence));
        let marked = if self.has_item {
            let mark = async {
                Ok(self
                    .store
                    .record_state()
                    .mark_run(
                        &self.batch,
                        self.content,
                        &me,
                        Some((&sequence, record.sub_sequence)),
                        false,
                    )
                    .await?)
            };
            within(self.until, "UpdateItem", Box::pin(mark)).await?
        } else {
            // No progress yet: the mark makes the item, at the record
            // (nothing done), with no prefix.
            let mut run = RunMark::of(&*me);
            run.started = started;
            let progress =
                BatchProgress::new(Checkpoint::AtSequence(sequence), Vec::new(), self.content)
                    .with_run(run);
            let stored =
                self.store_progress(&self.batch, &progress).await? == CheckpointOutcome::Stored;
            self.observe(stored.then_some(&progress));
            stored
        };
        if marked {
            self.wrote = Some(false);
            self.has_item = true;
            self.first_mark_standing = first && !self.guarded;
        }
        Ok(died_in)
    }

    fn ending(&mut self) {
        self.ending = true;
    }

    async fn ended(&mut self) {
        if self.degraded || self.wrote != Some(false) {
            return;
        }
        let Some(me) = self.request_id.clone() else {
            return;
        };
        let mark = async {
            Ok(self
                .store
                .record_state()
                .mark_run(&self.batch, self.content, &me, None, true)
                .await?)
        };
        match within(self.until, "UpdateItem", Box::pin(mark)).await {
            Ok(_) => self.wrote = Some(true),
            Err(e) => {
                tracing::warn!(error = %e, "the delivery's end could not be marked: the next one runs guarded")
            }
        }
    }

    fn unavailable(&mut self, error: crate::Error) -> crate::Result<()> {
        if !self.degraded {
            tracing::warn!(
                error = %error,
                "the state table failed: the rest of the batch runs without de-duplication \
                 (a retry may repeat records), attempts are not counted and nothing is parked"
            );
        }
        self.degraded = true;
        Ok(())
    }

    fn degraded(&self) -> bool {
        self.degraded
    }
}
