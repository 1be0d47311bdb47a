//! Accepting what was read: commits (the only thing that saves a position
//! after reading), rewinding to the committed positions, seeking, and
//! `poll`, which runs each shard's records through a shard pipeline (the
//! processing core, and the reader's positions as its checkpointer).

use crate::ddb_streams::batch::{Batch, PollReport};
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::config::FAILURE_BACKOFF;
use crate::ddb_streams::position;
use crate::ddb_streams::reader::StreamReader;
use crate::pipeline::InitialPosition;
use crate::pipeline::{
    Checkpointer, Fetched, RecordSource, ShardPipeline, ShardReport, SourceBatch, Step,
};
use crate::processing::ChangeRecord;
use crate::processing::{Core, RecordHandler, Unit};
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Error;
use std::sync::Arc;
use std::time::Instant;

impl<C: StreamsClient> StreamReader<C> {
    /// Accepts every record of `batch`: each shard's committed position
    /// moves to the batch's end and is saved (one write per shard that
    /// moved). A commit never moves a position back, so committing an older
    /// batch after a newer one changes nothing. A shard read to its end and
    /// committed is finished: its children are read from the next batch.
    pub async fn commit(&mut self, batch: &Batch) -> Result<(), Error> {
        for shard in &batch.shards {
            self.commit_at(&shard.shard_id, &shard.end).await?;
        }
        Ok(())
    }

    /// Accepts `record` and every record of its shard before it.
    pub async fn commit_record(&mut self, record: &ChangeRecord) -> Result<(), Error> {
        let position = position::after(&record.sequence_number);
        self.commit_at(&record.shard_id, &position).await
    }

    async fn commit_at(&mut self, shard: &ShardId, position: &Checkpoint) -> crate::Result<()> {
        let Some(cursor) = self.cursors.get_mut(shard) else {
            return Ok(()); // removed from the stream meanwhile
        };
        if position::is_behind(position, &cursor.committed) {
            return Ok(());
        }
        cursor.committed = position.clone();
        if cursor.saved.as_ref() == Some(position) {
            return Ok(());
        }
        if let Some(stored) = position::to_stored(position, &self.stream_arn, &cursor.spec)? {
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
    pub async fn seek(&mut self, to: InitialPosition) -> Result<(), Error> {
        if self.discovered_at.is_none() {
            self.discover().await?;
        }
        let position = position::initial(to);
        let now = self.store.now();
        let ids: Vec<ShardId> = self.cursors.keys().cloned().collect();
        for id in &ids {
            let cursor = self.cursors.get_mut(id).expect("cursor");
            cursor.committed = position.clone();
            cursor.reset(position.clone());
            if position == Checkpoint::Latest {
                // A new LATEST: saved by the next commit, even over a saved one.
                cursor.latest_at = now;
                cursor.saved = None;
            }
        }
        if position == Checkpoint::Latest {
            for id in &ids {
                self.take_latest(id).await?;
            }
        }
        Ok(())
    }

    /// Reads one batch and runs each shard's records through the
    /// processing core with `handler`: the same [`RecordHandler`] an
    /// event-source-mapped processor or a shard worker runs. Each record
    /// comes as a [`crate::processing::StreamRecord`] carrying the decoded
    /// [`ChangeRecord`] (see [`Unit::change`]):
    /// [`crate::processing::changes`] decodes its images from the SDK's
    /// attribute values, with the results it has for an event source
    /// mapping's text. Each shard is handled in order, attempts are counted
    /// and poison records parked as
    /// [`ReaderConfig::processing`](crate::ddb_streams::ReaderConfig::processing)
    /// says. A shard whose records were all accepted (handled or parked) is
    /// committed to its end (one write per shard, so a crash in between
    /// hands the shard's records out again: at least once). At a failure the
    /// shard's accepted prefix is committed and that shard alone is read
    /// again from the failed record, after a pause (1 s, doubling while it
    /// keeps failing, up to 32 s); the other shards go on. The first
    /// failure then comes back as [`Error::Handler`].
    pub async fn poll<H: RecordHandler>(&mut self, handler: &H) -> Result<PollReport, Error> {
        self.poll_until(handler, None).await
    }

    /// [`StreamReader::poll`], starting no record at or after `stop_by`
    /// (those are failures of kind [`crate::processing::RecordError::Deadline`], read again by
    /// the next call).
    pub async fn poll_until<H: RecordHandler>(
        &mut self,
        handler: &H,
        stop_by: Option<Instant>,
    ) -> Result<PollReport, Error> {
        // Boxed: the reading futures nest deep (the SDK's sends under the
        // retries), and an application awaiting `poll` in its own `main`
        // would otherwise pass the compiler's default query depth
        // (`recursion_limit`) computing its future's layout. One allocation
        // a poll.
        let batch = Box::pin(self.next_batch()).await?;
        let mut report = PollReport {
            shards: ShardReport::default(),
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
            let Some(committed) = self
                .cursors
                .get(&shard.shard_id)
                .map(|c| c.committed.clone())
            else {
                continue; // removed from the stream meanwhile
            };
            let source = ReadShard(Some(SourceBatch {
                units: shard
                    .records
                    .into_iter()
                    .map(|r| {
                        let seq: Arc<str> = r.sequence_number.as_str().into();
                        (seq, Unit::change(r, &arn))
                    })
                    .collect(),
                last_arrival: None,
                millis_behind: None,
                ends_shard: shard.ended,
            }));
            let mut pipeline =
                ShardPipeline::new(shard.shard_id.clone(), Some(committed), None, source);
            let mut checkpointer = ReaderCheckpoints { reader: self };
            let step = pipeline
                .step(&core, &mut checkpointer, stop_by, &mut report.shards)
                .await;
            let failure = match step {
                Ok(Step::Processed { failures, .. }) => failures.into_iter().next(),
                Ok(Step::Idle | Step::Lost) => None,
                Err(e) => {
                    // What the core committed stays; the rest of the shard's
                    // records are read again, not skipped.
                    self.rewind_shard(&shard.shard_id);
                    self.stats.shards += &report.shards;
                    return Err(e);
                }
            };
            match failure {
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
        self.stats.shards += &report.shards;
        match first_failure {
            None => Ok(report),
            Some((shard, failure)) => Err(Error::Handler {
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

/// What the reader read of one shard, as its pipeline's source: the reader
/// reads every readable shard at once ([`StreamReader::next_batch`]), then
/// hands each shard's pipeline what was read.
struct ReadShard(Option<SourceBatch>);

impl RecordSource for ReadShard {
    type Error = crate::Error;

    fn due(&self, _: Instant) -> bool {
        self.0.is_some()
    }

    async fn fetch(
        &mut self,
        _: &ShardId,
        _: Option<&Checkpoint>,
        _: &mut ShardReport,
    ) -> crate::Result<Fetched> {
        Ok(self.0.take().map_or(Fetched::Nothing, Fetched::Batch))
    }

    fn take_pin(&mut self) -> Option<Checkpoint> {
        None
    }

    fn processed(&mut self, _: bool) {}
}

/// The reader's checkpointer: a commit moves the shard's committed position
/// after the record and saves it. A failed save ends the batch (the reader
/// reads the shard again from its committed position).
struct ReaderCheckpoints<'a, C> {
    reader: &'a mut StreamReader<C>,
}

impl<C: StreamsClient> Checkpointer for ReaderCheckpoints<'_, C> {
    const LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT: bool = false;

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        _: Option<EpochMillis>,
    ) -> crate::Result<bool> {
        let Checkpoint::After { sequence, .. } = checkpoint else {
            return Ok(false);
        };
        self.reader
            .commit_at(shard, &position::after(sequence))
            .await?;
        Ok(true)
    }
}
