//! What a batch leaves for the one Lambda sends next, from the lowest
//! failure it reported: its progress inside a KPL aggregate, and the
//! records done past the failure, stored under that batch's key.

use super::*;

impl BatchProgressSink<'_> {
    /// What the batch Lambda sends next (from the lowest failure reported,
    /// under `ReportBatchItemFailures`) should know, stored under its key:
    /// - after a failure inside a KPL aggregate the progress ends within the
    ///   failed record: the digest of the aggregate's user records done, so
    ///   the retry resumes inside the aggregate instead of repeating its
    ///   first user records;
    /// - the records done past the failure (`ReportAllFailures`, or parked),
    ///   so the retry does not run them again.
    pub(crate) async fn carry_over(&mut self, report: &mut BatchReport) {
        if self.degraded {
            return;
        }
        let Some(lowest) = report
            .failures
            .iter()
            .filter_map(|f| SequenceNumber::new(&f.item_identifier).ok())
            .min()
        else {
            return;
        };
        let inside = match &self.committed {
            Some((cp @ Checkpoint::After { sequence, .. }, done)) if *sequence == lowest => self
                .identities
                .position(sequence.as_str(), 0, 0)
                .map(|start| {
                    let digest = self.identities.digest(start, *done);
                    let prefix = crate::state::PrefixDigest {
                        records: (*done - start) as u32,
                        digest,
                    };
                    (cp.clone(), vec![prefix], digest)
                }),
            _ => None,
        };
        if inside.is_none() && !self.done_past_failure {
            return;
        }
        let (checkpoint, prefixes, content) = inside.unwrap_or((
            Checkpoint::AtSequence(lowest.clone()),
            Vec::new(),
            self.content,
        ));
        let next = BatchKey {
            first: lowest.clone(),
            first_event_id: self.event_id(lowest.as_str()).map(str::to_owned),
            ..self.batch.clone()
        };
        let progress = BatchProgress::new(checkpoint, prefixes, content)
            .with_done_after(self.done_after_stored());
        if let Err(e) = self.store_progress(&next, &progress).await {
            tracing::warn!(error = %e, "the progress for the retry was not stored");
            report.state_errors += 1;
        }
    }

    /// Stores `progress` under `key`, by the deadline.
    pub(super) async fn store_progress(
        &self,
        key: &BatchKey,
        progress: &BatchProgress,
    ) -> crate::Result<CheckpointOutcome> {
        let write = async {
            Ok(self
                .store
                .record_state()
                .store_batch_progress(key, progress, CHECKPOINT_TTL)
                .await?)
        };
        within(self.until, "UpdateItem", Box::pin(write)).await
    }
}
