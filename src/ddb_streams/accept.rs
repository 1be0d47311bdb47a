//! Accepting what was read: commits (the only thing that saves a position
//! after reading), rewinding to the committed positions, seeking, and
//! `poll`, which runs a batch through the processing core shard by shard.

use crate::consumer::InitialPosition;
use crate::ddb_streams::batch::{Batch, PollReport};
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::config::FAILURE_BACKOFF;
use crate::ddb_streams::error::ReaderError;
use crate::ddb_streams::position::ShardPosition;
use crate::ddb_streams::reader::StreamReader;
use crate::ddb_streams::record::ChangeRecord;
use crate::processing::{CheckpointSink, Core, RecordHandler, Unit};
use crate::state::{Checkpoint, Result as StateResult, ShardId};
use std::sync::Arc;
use std::time::Instant;

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
        Ok(self.commit_at(&record.shard_id, &position).await?)
    }

    async fn commit_at(&mut self, shard: &ShardId, position: &ShardPosition) -> StateResult<()> {
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
            self.store.positions().save(&stored).await?;
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

    /// Reads one batch and runs each shard's records through the
    /// processing core with `handler`: the same [`RecordHandler`] an
    /// event-source-mapped processor or a shard worker runs. Records come as
    /// [`crate::processing::StreamRecord`]s shaped as Lambda's DynamoDB Streams event records
    /// (so [`crate::processing::changes`] decodes them as it does there; see
    /// [`ChangeRecord::to_stream_record`]). Each shard is handled in order,
    /// attempts are counted and poison records parked as
    /// [`ReaderConfig::processing`](crate::ddb_streams::ReaderConfig::processing)
    /// says. A shard whose records were all accepted (handled or parked) is
    /// committed to its end (one write per shard, so a crash in between
    /// hands the shard's records out again: at least once). At a failure the
    /// shard's accepted prefix is committed and that shard alone is read
    /// again from the failed record, after a pause (1 s, doubling while it
    /// keeps failing, up to 32 s); the other shards go on. The first
    /// failure then comes back as [`ReaderError::Handler`].
    pub async fn poll<H: RecordHandler>(&mut self, handler: &H) -> Result<PollReport, ReaderError> {
        self.poll_until(handler, None).await
    }

    /// [`StreamReader::poll`], starting no record at or after `stop_by`
    /// (those are failures of kind [`crate::processing::RecordError::Deadline`], read again by
    /// the next call).
    pub async fn poll_until<H: RecordHandler>(
        &mut self,
        handler: &H,
        stop_by: Option<Instant>,
    ) -> Result<PollReport, ReaderError> {
        let batch = self.next_batch().await?;
        let mut report = PollReport {
            handled: 0,
            parked: 0,
            discovery: batch.discovery,
            trimmed: batch.trimmed,
            caught_up: batch.caught_up,
        };
        let store = self.store.clone();
        let options = self.config.processing.clone();
        let core = Core::new(handler, Some(&store), &options);
        let arn: Arc<str> = self.stream_arn.as_str().into();
        let mut first_failure = None;
        for shard in batch.shards {
            let items = shard.records.iter().map(|r| {
                let record = r.to_stream_record(&arn);
                (record.sequence_number.clone(), Unit::Record(record))
            });
            let mut sink = ReaderCheckpoints {
                reader: self,
                shard: &shard.shard_id,
            };
            let done = core.run(items, stop_by, &mut sink).await?;
            report.handled += done.processed as usize;
            report.parked += done.parked as usize;
            match done.failures.into_iter().next() {
                None => {
                    self.commit_at(&shard.shard_id, &shard.end).await?;
                    self.backoff(&shard.shard_id, false);
                }
                Some(failure) => {
                    self.rewind_shard(&shard.shard_id);
                    self.backoff(&shard.shard_id, true);
                    first_failure.get_or_insert((shard.shard_id, failure));
                }
            }
        }
        match first_failure {
            None => Ok(report),
            Some((shard, failure)) => Err(ReaderError::Handler {
                shard_id: shard.to_string(),
                sequence_number: failure.item_identifier,
                source: Box::new(failure.error),
            }),
        }
    }

    /// After a handler failure the shard pauses ([`FAILURE_BACKOFF`] after
    /// each failure in a row) while the others go on; a success ends the
    /// pause.
    fn backoff(&mut self, shard: &ShardId, failed: bool) {
        let now = self.store.now();
        if let Some(cursor) = self.cursors.get_mut(shard) {
            if failed {
                cursor.failures += 1;
                let pause = FAILURE_BACKOFF.delay(cursor.failures);
                cursor.retry_after = Some(now + pause.as_millis() as i64);
            } else {
                cursor.failures = 0;
                cursor.retry_after = None;
            }
        }
    }

    /// Forgets what was read of `shard` and not committed.
    fn rewind_shard(&mut self, shard: &ShardId) {
        if let Some(cursor) = self.cursors.get_mut(shard) {
            if cursor.read != cursor.committed {
                let committed = cursor.committed.clone();
                cursor.reset(committed);
            }
        }
    }
}

/// The reader's checkpoint sink: a shard's records are handed out after
/// its committed position (nothing of a batch is done before it), and a
/// commit moves that position after the record.
struct ReaderCheckpoints<'a, C> {
    reader: &'a mut StreamReader<C>,
    shard: &'a ShardId,
}

impl<C: StreamsClient> CheckpointSink for ReaderCheckpoints<'_, C> {
    async fn stored(&mut self) -> StateResult<Option<Checkpoint>> {
        Ok(None)
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> StateResult<bool> {
        let Checkpoint::After { sequence, .. } = checkpoint else {
            return Ok(false);
        };
        let position = ShardPosition::AfterSequence(sequence.clone());
        self.reader.commit_at(self.shard, &position).await?;
        Ok(true)
    }
}
