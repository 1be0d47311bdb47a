//! Accepting what was read: commits (the only thing that saves a position
//! after reading), rewinding to the committed positions, seeking, and the
//! handler loop that commits after each accepted record.

use crate::consumer::InitialPosition;
use crate::ddb_streams::batch::{Batch, PollReport};
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::error::ReaderError;
use crate::ddb_streams::position::ShardPosition;
use crate::ddb_streams::reader::StreamReader;
use crate::ddb_streams::record::ChangeRecord;
use crate::processing::HandlerError;
use crate::state::ShardId;
use std::future::Future;

impl<C: StreamsClient> StreamReader<C> {
    /// Accepts every record of `batch`: each shard's committed position
    /// moves to the batch's end and is saved (one write per shard that
    /// moved). A commit never moves a position back, so committing an older
    /// batch after a newer one changes nothing. A shard read to its end and
    /// committed is finished: its children are read from the next batch.
    pub async fn commit(&mut self, batch: &Batch) -> Result<(), ReaderError> {
        for shard in &batch.shards {
            self.commit_at(&shard.shard_id, &shard.end).await?;
        }
        Ok(())
    }

    /// Accepts `record` and every record of its shard before it.
    pub async fn commit_record(&mut self, record: &ChangeRecord) -> Result<(), ReaderError> {
        let position = ShardPosition::AfterSequence(record.sequence_number.clone());
        self.commit_at(&record.shard_id, &position).await
    }

    async fn commit_at(
        &mut self,
        shard: &ShardId,
        position: &ShardPosition,
    ) -> Result<(), ReaderError> {
        let Some(cursor) = self.cursors.get_mut(shard) else {
            return Ok(()); // removed from the stream meanwhile
        };
        if position.is_behind(&cursor.committed) {
            return Ok(());
        }
        cursor.committed = position.clone();
        if cursor.saved.as_ref() == Some(position) {
            return Ok(());
        }
        if let Some(stored) = position.to_stored(&self.stream_arn, &cursor.spec)? {
            self.store.save_position(&stored).await?;
            cursor.saved = Some(position.clone());
        }
        Ok(())
    }

    /// Forgets what was read and not committed: the next batch reads every
    /// shard again from its committed position.
    pub fn rewind(&mut self) {
        for cursor in self.cursors.values_mut() {
            if cursor.read != cursor.committed {
                let committed = cursor.committed.clone();
                cursor.reset(committed);
            }
        }
    }

    /// Moves every known shard (discovering them first if needed) to
    /// `to`: `TrimHorizon`, `Latest` (the iterators are taken now), or a time
    /// (reads from `TRIM_HORIZON` and skips the records created before it;
    /// DynamoDB Streams has no `AT_TIMESTAMP`). Nothing read before is
    /// committed by a seek; the new position is saved by the next commit
    /// (a time once a record after it is committed), and a child shard still
    /// waits for its parent.
    pub async fn seek(&mut self, to: InitialPosition) -> Result<(), ReaderError> {
        if self.discovered_at.is_none() {
            self.discover().await?;
        }
        let position = ShardPosition::initial(to, self.store.now());
        let ids: Vec<ShardId> = self.cursors.keys().cloned().collect();
        for id in &ids {
            let cursor = self.cursors.get_mut(id).expect("cursor");
            cursor.committed = position.clone();
            cursor.reset(position.clone());
        }
        if matches!(position, ShardPosition::Latest { .. }) {
            for id in &ids {
                self.take_latest(id).await?;
            }
        }
        Ok(())
    }

    /// Reads one batch and hands each record to `handler`, in order; each
    /// shard is committed once its records are accepted (one write per
    /// shard, so a crash in between hands the shard's records out again:
    /// at least once). At the first failure the records before it are
    /// committed, the rest is read again by the next call, and the failure
    /// comes back as [`ReaderError::Handler`].
    pub async fn poll<F, Fut, E>(&mut self, mut handler: F) -> Result<PollReport, ReaderError>
    where
        F: FnMut(ChangeRecord) -> Fut,
        Fut: Future<Output = Result<(), E>>,
        E: Into<HandlerError>,
    {
        let batch = self.next_batch().await?;
        let mut report = PollReport {
            handled: 0,
            discovery: batch.discovery,
            trimmed: batch.trimmed,
            caught_up: batch.caught_up,
        };
        for shard in batch.shards {
            let mut accepted = None;
            for record in shard.records {
                let seq = record.sequence_number.clone();
                if let Err(e) = handler(record).await {
                    if let Some(last) = accepted {
                        let position = ShardPosition::AfterSequence(last);
                        self.commit_at(&shard.shard_id, &position).await?;
                    }
                    self.rewind();
                    return Err(ReaderError::Handler {
                        shard_id: shard.shard_id.to_string(),
                        sequence_number: seq.to_string(),
                        source: e.into(),
                    });
                }
                accepted = Some(seq);
                report.handled += 1;
            }
            self.commit_at(&shard.shard_id, &shard.end).await?;
        }
        Ok(report)
    }
}
