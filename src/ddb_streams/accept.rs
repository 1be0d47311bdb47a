//! Accepting what was read: commits (the only thing that saves a position
//! after reading), rewinding to the committed positions, seeking, and
//! `poll`, which steps each shard's pipeline (its source, the processing
//! core, and the reader's positions as its checkpointer), all at once when
//! the processing's `concurrency` is above 1.

use crate::ddb_streams::batch::{Batch, PollReport};
use crate::ddb_streams::calls::StreamsCalls;
use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::position;
use crate::ddb_streams::reader::{Known, StreamReader};
use crate::pipeline::{Checkpointer, InitialPosition, ShardReport, Shared, Step};
use crate::processing::ChangeRecord;
use crate::processing::{Core, RecordHandler};
use crate::state::instant_now;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Error;
use std::collections::BTreeMap;
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
        let Some(pipeline) = self.shards.get_mut(shard) else {
            return Ok(()); // removed from the stream meanwhile
        };
        if pipeline
            .position()
            .is_some_and(|p| position::is_behind(position, p))
        {
            return Ok(());
        }
        pipeline.set_position(position.clone());
        save(&mut self.known, &self.calls, shard, position).await
    }

    /// Forgets what was read and not committed: the next batch reads every
    /// shard again from its committed position.
    pub fn rewind(&mut self) {
        for pipeline in self.shards.pipelines_mut() {
            let position = pipeline.position().cloned();
            if pipeline.source().read_beyond(position.as_ref()) {
                pipeline.source_mut().reopen();
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
        let now = self.store().now();
        let ids = self.shards.shards().to_vec();
        for id in &ids {
            let Some(pipeline) = self.shards.get_mut(id) else {
                continue;
            };
            pipeline.set_position(position.clone());
            pipeline.source_mut().reopen();
            if position == Checkpoint::Latest {
                // A new LATEST: saved by the next commit, even over a saved one.
                if let Some(known) = self.known.get_mut(id) {
                    known.saved = None;
                }
            }
        }
        if position == Checkpoint::Latest {
            for id in &ids {
                self.take_latest(id, now).await?;
            }
        }
        Ok(())
    }

    /// Takes the `LATEST` iterator of a shard whose position was just set
    /// to `LATEST` at `now`.
    pub(super) async fn take_latest(
        &mut self,
        id: &ShardId,
        now: EpochMillis,
    ) -> Result<(), Error> {
        match self.shards.get_mut(id) {
            Some(pipeline) => pipeline.source_mut().take_latest(id, now).await,
            None => Ok(()),
        }
    }

    /// Reads one batch and runs each shard's records through the
    /// processing core with `handler`: the same [`RecordHandler`] an
    /// event-source-mapped processor or a shard worker runs. Each record
    /// comes as a [`crate::processing::StreamRecord`] carrying the decoded
    /// [`ChangeRecord`] (see [`Unit::change`](crate::processing::Unit::change)):
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
    /// failure then comes back as [`Error::Handler`]. With
    /// [`ProcessingOptions::concurrency`](crate::processing::ProcessingOptions::concurrency)
    /// above 1 the due shards are read and handled at once, and the changes
    /// of different items of a shard at once (each item's in order).
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
        let mut report = PollReport::default();
        // Boxed: the reading futures nest deep (the SDK's sends under the
        // retries), and an application awaiting `poll` in its own `main`
        // would otherwise pass the compiler's default query depth
        // (`recursion_limit`) computing its future's layout. One allocation
        // a read.
        if self.discovery_due() {
            report.discovery = Some(Box::pin(self.discover()).await?);
        }
        let store = self.store().clone();
        let options = self.config.processing.clone();
        let core = Core::new(handler, Some(&store), &options);
        let due = self.shards.due(instant_now());
        let mut checkpointer = ReaderCheckpoints {
            known: &mut self.known,
            calls: &self.calls,
        };
        let mut stepped = Vec::with_capacity(due.len());
        if options.concurrency > 1 && due.len() > 1 {
            // Every due shard at once, the saves in turn.
            let checkpointer = tokio::sync::Mutex::new(checkpointer);
            let starts = |_: &ShardId| {};
            let steps = self.shards.get_many_mut(&due).into_iter().map(|pipeline| {
                let (core, checkpointer, starts) = (&core, &checkpointer, &starts);
                async move {
                    let mut shared = Shared {
                        checkpointer,
                        starts,
                    };
                    let mut shards = ShardReport::default();
                    let step = pipeline.step(core, &mut shared, stop_by, &mut shards).await;
                    (pipeline.shard().clone(), step, shards)
                }
            });
            for (id, step, shards) in Box::pin(futures_util::future::join_all(steps)).await {
                report.shards += &shards;
                stepped.push((id, step));
            }
        } else {
            for id in due {
                let Some(pipeline) = self.shards.get_mut(&id) else {
                    continue;
                };
                let step =
                    Box::pin(pipeline.step(&core, &mut checkpointer, stop_by, &mut report.shards))
                        .await;
                let failed = step.is_err();
                stepped.push((id, step));
                if failed {
                    break;
                }
            }
        }
        let mut first_failure = None;
        let mut error = None;
        for (id, step) in stepped {
            let Some(pipeline) = self.shards.get_mut(&id) else {
                continue;
            };
            let source = pipeline.source_mut();
            report.trimmed.extend(source.take_trimmed());
            self.rediscover |= source.ended;
            let failure = match step {
                Ok(Step::Processed { failures, .. }) => failures.into_iter().next(),
                Ok(Step::Idle | Step::Lost) => None,
                Err(e) => {
                    // What the core committed stays; the rest of the shard's
                    // records are read again, not skipped.
                    source.reopen();
                    error = error.or(Some(e));
                    continue;
                }
            };
            source.pause_after(failure.is_some());
            if let Some(failure) = failure {
                first_failure.get_or_insert((id, failure));
            }
        }
        report.caught_up = self.caught_up();
        self.stats.shards += &report.shards;
        self.stats.trimmed_restarts += report.trimmed.len() as u64;
        if let Some(e) = error {
            return Err(e);
        }
        match first_failure {
            None => Ok(report),
            Some((shard, failure)) => Err(Error::Handler {
                shard_id: shard.to_string(),
                sequence_number: failure.item_identifier,
                source: Box::new(failure.error),
            }),
        }
    }
}

/// Saves `position` as `shard`'s, unless it is the one saved last (a time
/// is saved once a record after it is committed).
async fn save<C>(
    known: &mut BTreeMap<ShardId, Known>,
    calls: &StreamsCalls<C>,
    shard: &ShardId,
    position: &Checkpoint,
) -> crate::Result<()> {
    let Some(known) = known.get_mut(shard) else {
        return Ok(()); // removed from the stream meanwhile
    };
    if known.saved.as_ref() == Some(position) {
        return Ok(());
    }
    if let Some(stored) = position::to_stored(position, &calls.stream_arn, &known.spec)? {
        calls.store.positions().save(&stored).await?;
        known.saved = Some(position.clone());
    }
    Ok(())
}

/// The reader's checkpointer: a commit saves the position after the record
/// (the pipeline moves its own). A failed save ends the batch (the reader
/// reads the shard again from its committed position).
struct ReaderCheckpoints<'a, C> {
    known: &'a mut BTreeMap<ShardId, Known>,
    calls: &'a StreamsCalls<C>,
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
        save(self.known, self.calls, shard, &position::after(sequence)).await?;
        Ok(true)
    }
}
