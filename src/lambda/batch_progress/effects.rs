//! Effects written with a batch's progress (see
//! [`crate::processing::stage_effect`]): only over the progress this
//! delivery read or wrote last, so two deliveries of one batch (Lambda's
//! at-least-once invocation) never both write a record's effects.

use super::*;

impl BatchProgressSink<'_> {
    /// The progress to store for `checkpoint`, and how many of the batch's
    /// records it covers (`None`: not a record of the batch).
    pub(super) fn progress_at(
        &mut self,
        checkpoint: &Checkpoint,
    ) -> Option<(BatchProgress, usize)> {
        let Checkpoint::After {
            sequence,
            sub_sequence,
        } = checkpoint
        else {
            return None;
        };
        let from = self
            .committed
            .as_ref()
            .map_or(0, |(_, done)| done.saturating_sub(1));
        let at = self
            .identities
            .position(sequence.as_str(), *sub_sequence, from)?;
        let done = at + 1;
        // What the checkpoint covers need not be remembered past it.
        self.done_after.retain(|(done_sequence, done_sub)| {
            SequenceNumber::new(done_sequence).map_or(true, |s| !checkpoint.covers(&s, *done_sub))
        });
        let prefixes = self.hasher.prefixes(&self.identities, done);
        let mut progress = BatchProgress::new(checkpoint.clone(), prefixes, self.content)
            .with_done_after(self.done_after_stored());
        if let Some(run) = self.run_mark() {
            progress = progress.with_run(run);
        }
        Some((progress, done))
    }

    /// Notes a commit of `checkpoint` (covering the batch's first `done`
    /// records), `stored` if a write was stored.
    pub(super) fn committed_at(&mut self, checkpoint: &Checkpoint, done: usize, stored: bool) {
        if stored {
            self.wrote = Some(self.ending);
            self.has_item = true;
            // (A commit takes the started mark back.)
            self.first_mark_standing = false;
        }
        self.committed = Some((checkpoint.clone(), done));
    }

    /// Notes the progress this delivery stored (`None`: a write that did
    /// not store: what is stored is not known).
    pub(super) fn observe(&mut self, stored: Option<&BatchProgress>) {
        self.observed = stored.map(|p| Some((p.checkpoint.clone(), p.content)));
    }

    /// Stores `checkpoint` with `effects` in one transaction, over the
    /// progress observed last.
    pub(super) async fn commit_with_effects(
        &mut self,
        checkpoint: &Checkpoint,
        effects: Vec<TransactWriteItem>,
    ) -> crate::Result<EffectsOutcome> {
        let Some((progress, done)) = self.progress_at(checkpoint) else {
            return Err(crate::Error::Event(format!(
                "checkpoint {checkpoint} is not a record of the batch"
            )));
        };
        let Some(observed) = self.observed.clone() else {
            return Err(StateError::ProgressMoved {
                key: self.batch.sort_key(),
            }
            .into());
        };
        let write = async {
            let expected = observed.as_ref().map(|(cp, content)| (cp, *content));
            Ok(self
                .store
                .record_state()
                .store_batch_progress_with(
                    &self.batch,
                    &progress,
                    CHECKPOINT_TTL,
                    effects,
                    expected,
                )
                .await?)
        };
        let outcome = within(self.until, "TransactWriteItems", Box::pin(write)).await;
        match &outcome {
            Ok(EffectsOutcome::Stored | EffectsOutcome::Stale { .. }) => {
                self.observe(Some(&progress));
                self.committed_at(
                    checkpoint,
                    done,
                    matches!(outcome, Ok(EffectsOutcome::Stored)),
                );
            }
            Ok(_) => {}
            // Written or not, unknown.
            Err(_) => self.observed = None,
        }
        outcome
    }
}
