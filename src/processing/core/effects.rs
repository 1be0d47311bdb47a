//! The core's effects (writes a record's call staged, see
//! [`crate::processing::stage_effect`]): kept per record once its call
//! succeeded, and written with the commit that covers the record.
//! - A commit with effects waiting sends them with the progress, in as few
//!   transactions as DynamoDB's limits allow, split between records; each
//!   transaction's checkpoint is the progress up to the first record it
//!   leaves for the next.
//! - A condition of an effect that fails fails its record (counted, parked
//!   at its limit, reported) after the records before it are committed.
//!   Parked, it is done without its effects and the records after it are
//!   committed; else they are dropped and run again, as everything after a
//!   failure does.
//! - A state-store error while effects wait ends the batch: the records
//!   not committed run again. A sink that goes on without its state
//!   collects no more (a record that stages one fails).

use super::batch::Batch;
use super::Core;
use crate::processing::effects::{next_transaction, Effects};
use crate::processing::handler::RecordHandler;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::sink::CheckpointSink;
use crate::state::instant_now;
use crate::state::{Checkpoint, EffectsOutcome, SequenceNumber};
use crate::Result;
use std::sync::Arc;

/// A record done, and the effects its call staged, waiting for a commit.
pub(super) struct Waiting {
    item: Arc<str>,
    record: StreamRecord,
    /// The progress before the record was done.
    before: Option<(Arc<str>, u64)>,
    effects: Effects,
}

/// A record whose effects' condition failed at a commit.
pub(super) struct Conflict {
    item: Arc<str>,
    record: StreamRecord,
    error: RecordError,
    /// The progress the commit was for.
    target: Option<(Arc<str>, u64)>,
}

impl<S: CheckpointSink> Batch<'_, S> {
    /// Moves the progress past a record whose call succeeded, keeping the
    /// effects it staged for the commit that covers it. Past a failure a
    /// record with effects is not done: it runs again.
    pub(super) fn done_with(&mut self, item: &str, record: &StreamRecord, effects: Effects) {
        if effects.is_empty() {
            return self.advance(record);
        }
        if self.failed {
            return;
        }
        let before = self.progress.clone();
        self.progress_to(record);
        if let Some(waiting) = self.effects.as_mut() {
            waiting.push(Waiting {
                item: item.into(),
                record: record.clone(),
                before,
                effects,
            });
        }
    }

    /// True if effects wait for a commit.
    pub(super) fn effects_wait(&self) -> bool {
        self.effects.as_ref().is_some_and(|w| !w.is_empty())
    }

    /// Commits the progress with the effects waiting, in transactions
    /// split between records. Stops at a record whose effects' condition
    /// failed (`conflict`), with the progress before it.
    pub(super) async fn commit_effects(&mut self) -> Result<()> {
        let Some(target) = self.progress.clone() else {
            return Ok(());
        };
        // How many records the next transaction may take at most (a
        // conflict first commits the records before the one it names).
        let mut limit = None;
        while self.effects_wait() {
            let waiting = self.effects.as_deref().unwrap_or_default();
            let fits = next_transaction(waiting.iter().map(|w| &w.effects)).unwrap_or(1);
            let n = limit.map_or(fits, |l: usize| fits.min(l));
            // The transaction's checkpoint: the progress up to the first
            // record it leaves (done after every record it takes).
            let (sequence, sub_sequence) = match waiting.get(n) {
                Some(next) => next.before.clone().unwrap_or_else(|| target.clone()),
                None => target.clone(),
            };
            let cp = Checkpoint::After {
                sequence: SequenceNumber::new(&sequence)?,
                sub_sequence,
            };
            let items: Vec<_> = waiting[..n]
                .iter()
                .flat_map(|w| w.effects.items.iter().cloned())
                .collect();
            let count = items.len() as u64;
            let owners: Vec<usize> = waiting[..n]
                .iter()
                .enumerate()
                .flat_map(|(i, w)| std::iter::repeat_n(i, w.effects.items.len()))
                .collect();
            self.clock = None;
            let conflict = match self.sink.commit_effects(&cp, items).await? {
                EffectsOutcome::Stored => {
                    self.report.checkpoints += 1;
                    self.report.effects_written += count;
                    None
                }
                EffectsOutcome::Conflict { index, code } => Some((index, code)),
                // Stale: an earlier attempt wrote these records' effects.
                _ => None,
            };
            let waiting = self.effects.get_or_insert_default();
            let Some((index, code)) = conflict else {
                waiting.drain(..n);
                self.committed = Some(cp);
                limit = None;
                continue;
            };
            let culprit = match index {
                Some(i) => owners.get(i).copied().unwrap_or(n - 1),
                None if n == 1 => 0,
                // Not named: one record a transaction finds it.
                None => {
                    limit = Some(1);
                    continue;
                }
            };
            if culprit > 0 {
                // The records before it first.
                limit = Some(culprit);
                continue;
            }
            let first = waiting.remove(0);
            self.progress = first.before;
            self.dirty = true;
            self.conflict = Some(Conflict {
                item: first.item,
                error: RecordError::Effect {
                    sequence_number: first.record.sequence_number.to_string(),
                    sub_sequence: first.record.sub_sequence,
                    error: code,
                },
                record: first.record,
                target: Some(target),
            });
            return Ok(());
        }
        self.dirty = false;
        self.since_commit = 0;
        self.last_commit = instant_now();
        self.clock = Some(self.last_commit);
        Ok(())
    }
}

impl<H: RecordHandler> Core<'_, H> {
    /// Commits the progress, with the effects waiting for it. A record
    /// whose effects' condition failed is failed as a handler's error is;
    /// returns `false` if it was not parked (the unit ends there).
    pub(super) async fn commit<S: CheckpointSink>(&self, batch: &mut Batch<'_, S>) -> Result<bool> {
        loop {
            batch.commit().await?;
            let Some(conflict) = batch.conflict.take() else {
                return Ok(true);
            };
            let rest = batch.effects.as_mut().map(std::mem::take);
            let error = conflict.error;
            if !self
                .failed_record(batch, &conflict.item, &conflict.record, error)
                .await?
            {
                // The records after it run again.
                batch.failed = true;
                return Ok(false);
            }
            // Parked: done without its effects; the records after it go on.
            batch.effects = rest;
            batch.progress = conflict.target;
            batch.dirty = true;
        }
    }

    /// Commits when enough time or records have gone by (see
    /// [`Core::commit`]).
    pub(super) async fn maybe_commit<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
    ) -> Result<bool> {
        if batch.commit_due(self.options) {
            self.commit(batch).await
        } else {
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processing::effects::stage_effect;
    use crate::processing::options::{FailureMode, ProcessingOptions};
    use crate::processing::unit::Unit;
    use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem};
    use std::collections::HashSet;

    /// A sink that applies each transaction whole, or not at all when one
    /// of its effects checks the table `fails`, and keeps what it applied.
    #[derive(Default)]
    struct Transacting {
        /// Each transaction applied: its checkpoint and its effects' keys.
        applied: Vec<(Checkpoint, Vec<String>)>,
        done: HashSet<(Arc<str>, u64)>,
    }

    impl CheckpointSink for Transacting {
        async fn stored(&mut self) -> Result<Option<Checkpoint>> {
            Ok(None)
        }

        async fn commit(&mut self, checkpoint: &Checkpoint) -> Result<bool> {
            self.applied.push((checkpoint.clone(), Vec::new()));
            Ok(true)
        }

        fn takes_effects(&self) -> bool {
            true
        }

        async fn commit_effects(
            &mut self,
            checkpoint: &Checkpoint,
            effects: Vec<TransactWriteItem>,
        ) -> Result<EffectsOutcome> {
            if let Some(index) = effects.iter().position(|e| {
                e.condition_check()
                    .is_some_and(|c| c.table_name() == "fails")
            }) {
                return Ok(EffectsOutcome::Conflict {
                    index: Some(index),
                    code: "ConditionalCheckFailed".to_owned(),
                });
            }
            let keys = effects
                .iter()
                .filter_map(|e| e.put())
                .map(|p| p.item()["pk"].as_s().unwrap().clone())
                .collect();
            self.applied.push((checkpoint.clone(), keys));
            Ok(EffectsOutcome::Stored)
        }

        fn done(&self, record: &StreamRecord) -> bool {
            self.done
                .contains(&(record.sequence_number.clone(), record.sub_sequence))
        }

        fn past_failure(&mut self, record: &StreamRecord) {
            self.done
                .insert((record.sequence_number.clone(), record.sub_sequence));
        }
    }

    fn record(n: u64) -> StreamRecord {
        StreamRecord {
            shard_id: "shardId-000000000000".into(),
            sequence_number: format!("{:020}", 1000 + n).into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "k".into(),
            explicit_hash_key: None,
            data: bytes::Bytes::from(n.to_string()),
            approximate_arrival: None,
            event_source_arn: None,
            change: None,
        }
    }

    fn batch(n: u64) -> Vec<(Arc<str>, Unit)> {
        (0..n)
            .map(|i| (record(i).sequence_number.clone(), Unit::Record(record(i))))
            .collect()
    }

    fn number(r: &StreamRecord) -> u64 {
        std::str::from_utf8(&r.data).unwrap().parse().unwrap()
    }

    fn put(key: String) -> TransactWriteItem {
        let put = Put::builder()
            .table_name("t")
            .item("pk", AttributeValue::S(key))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    fn failing_check() -> TransactWriteItem {
        let check = ConditionCheck::builder()
            .table_name("fails")
            .key("pk", AttributeValue::S("x".into()))
            .condition_expression("attribute_exists(pk)")
            .build()
            .unwrap();
        TransactWriteItem::builder().condition_check(check).build()
    }

    fn after(n: u64) -> Checkpoint {
        Checkpoint::After {
            sequence: SequenceNumber::new(&format!("{:020}", 1000 + n)).unwrap(),
            sub_sequence: 0,
        }
    }

    /// Record `n` stages `per` effects (`n/0`, `n/1`, ...).
    async fn staging(r: StreamRecord, per: usize) -> Result<(), crate::processing::HandlerError> {
        let n = number(&r);
        for i in 0..per {
            stage_effect(put(format!("{n}/{i}")))?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn effects_are_written_with_the_checkpoint_that_covers_them_split_between_records() {
        // 60 effects a record: two records would be 120 items, over a
        // transaction's 100, so each record goes alone, and every
        // transaction's checkpoint is its own record.
        let handler = |r: StreamRecord| staging(r, 60);
        let options = ProcessingOptions::default();
        let mut sink = Transacting::default();
        let report = Core::new(&handler, None, &options)
            .run(batch(3), None, &mut sink)
            .await
            .unwrap();
        assert_eq!(report.processed, 3);
        assert_eq!(report.effects_written, 180);
        let checkpoints: Vec<_> = sink.applied.iter().map(|(cp, _)| cp.clone()).collect();
        assert_eq!(checkpoints, [after(0), after(1), after(2)]);
        for (n, (_, keys)) in sink.applied.iter().enumerate() {
            assert_eq!(keys.len(), 60);
            assert!(keys.iter().all(|k| k.starts_with(&format!("{n}/"))));
        }
    }

    #[tokio::test]
    async fn a_failed_condition_fails_its_record_and_the_records_before_it_are_written() {
        let handler = |r: StreamRecord| async move {
            staging(r.clone(), 1).await?;
            if number(&r) == 2 {
                stage_effect(failing_check())?;
            }
            Ok::<_, crate::processing::HandlerError>(())
        };
        // One commit at the end of the batch: the conflict is found there.
        let options = ProcessingOptions::default().mode(FailureMode::StopAtFirstFailure);
        let mut sink = Transacting::default();
        let report = Core::new(&handler, None, &options)
            .run(batch(5), None, &mut sink)
            .await
            .unwrap();
        let written: Vec<String> = sink.applied.iter().flat_map(|(_, k)| k.clone()).collect();
        assert_eq!(written, ["0/0", "1/0"]);
        assert_eq!(sink.applied.last().unwrap().0, after(1));
        assert_eq!(report.failures.len(), 1);
        assert_eq!(report.failures[0].item_identifier, format!("{:020}", 1002));
        assert!(matches!(
            &report.failures[0].error,
            RecordError::Effect { error, .. } if error == "ConditionalCheckFailed"
        ));
        // Nothing after it is done: it all runs again.
        assert!(sink.done.is_empty());
    }

    #[tokio::test]
    async fn a_record_done_past_a_failure_keeps_no_effects_and_runs_again() {
        let handler = |r: StreamRecord| async move {
            staging(r.clone(), 1).await?;
            if number(&r) == 1 {
                return Err("record 1 fails".into());
            }
            Ok::<_, crate::processing::HandlerError>(())
        };
        let options = ProcessingOptions::default().mode(FailureMode::ReportAllFailures);
        let mut sink = Transacting::default();
        let report = Core::new(&handler, None, &options)
            .run(batch(3), None, &mut sink)
            .await
            .unwrap();
        assert_eq!(report.failures.len(), 1);
        // Record 0's effect only (record 1's call failed: its staged effect
        // is dropped; record 2 is past the failure).
        let written: Vec<String> = sink.applied.iter().flat_map(|(_, k)| k.clone()).collect();
        assert_eq!(written, ["0/0"]);
        assert!(!sink.done.contains(&(record(2).sequence_number, 0)));
    }

    /// A sink whose state failed at the first read and goes on without it.
    #[derive(Default)]
    struct Stateless {
        degraded: bool,
    }

    impl CheckpointSink for Stateless {
        async fn stored(&mut self) -> Result<Option<Checkpoint>> {
            Err(crate::Error::Event("the state table is down".to_owned()))
        }

        async fn commit(&mut self, _: &Checkpoint) -> Result<bool> {
            Ok(false)
        }

        fn unavailable(&mut self, _: crate::Error) -> Result<()> {
            self.degraded = true;
            Ok(())
        }

        fn degraded(&self) -> bool {
            self.degraded
        }

        fn takes_effects(&self) -> bool {
            true
        }
    }

    #[tokio::test]
    async fn a_sink_without_its_state_collects_no_effects_and_their_records_fail() {
        let handler = |r: StreamRecord| staging(r, 1);
        let options = ProcessingOptions::default().mode(FailureMode::ReportAllFailures);
        let mut sink = Stateless::default();
        let report = Core::new(&handler, None, &options)
            .run(batch(2), None, &mut sink)
            .await
            .unwrap();
        assert!(report.deduplication_off);
        assert_eq!(report.processed, 0);
        assert_eq!(report.failures.len(), 2);
        assert_eq!(report.effects_written, 0);
    }

    #[tokio::test]
    async fn nothing_is_collected_at_concurrency_above_one() {
        let handler = |r: StreamRecord| staging(r, 1);
        let options = ProcessingOptions::default().concurrency(4);
        let mut sink = Transacting::default();
        let report = Core::new(&handler, None, &options)
            .run(batch(2), None, &mut sink)
            .await
            .unwrap();
        assert_eq!(report.processed, 0);
        assert!(report.failures[0]
            .error
            .to_string()
            .contains("no effects are collected here"));
    }
}
