//! The DynamoDB Streams record source of a shard pipeline: one shard's
//! reading (its iterator, an expired iterator replaced, trimmed data,
//! records skipped during a seek, empty reads at the head, the pause after
//! a handler failure). The calls themselves, shared by every shard of a
//! reader, are in `calls.rs`.

use crate::ddb_streams::batch::{ShardBatch, TrimmedShard};
use crate::ddb_streams::calls::StreamsCalls;
use crate::ddb_streams::client::{ChangesPage, StreamsClient, StreamsIteratorStart};
use crate::ddb_streams::config::{OnTrimmed, EMPTY_READS_AT_HEAD, FAILURE_BACKOFF};
use crate::ddb_streams::error::StreamsError;
use crate::ddb_streams::position;
use crate::pipeline::{Fetched, RecordSource, ShardReport, SourceBatch, LATEST_REOPEN_MARGIN_MS};
use crate::processing::{ChangeRecord, Unit};
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Error;
use std::sync::Arc;
use std::time::Instant;

/// Reads one shard of a DynamoDB stream.
#[derive(Debug)]
pub(super) struct StreamsSource<C> {
    calls: Arc<StreamsCalls<C>>,
    /// After the last record handed out; `None`: nothing handed out beyond
    /// the pipeline's position, where the next iterator opens.
    read: Option<Checkpoint>,
    /// When the `LATEST` iterator of a `Latest` position was taken (ms): a
    /// `LATEST` reopened later reads from `TRIM_HORIZON`, skipping the
    /// records created before this time (see `position.rs`).
    pub(super) latest_at: EpochMillis,
    iterator: Option<String>,
    /// Records created before this are skipped (a seek, a reopened `LATEST`).
    skipping: Option<EpochMillis>,
    /// The shard is closed and read to its end.
    pub(super) ended: bool,
    pub(super) empty_reads: u32,
    /// Every record created before this time (ms) has been read: the newest
    /// record read, or the start of a read that confirmed the shard's head.
    pub(super) read_up_to: Option<EpochMillis>,
    /// Handler failures in a row, and when the shard is read again.
    failures: u32,
    retry_after: Option<EpochMillis>,
    /// Restarts at `TRIM_HORIZON` not yet reported.
    trimmed: Vec<TrimmedShard>,
}

impl<C: StreamsClient> StreamsSource<C> {
    /// A source reading from the pipeline's position (`latest_at`: when a
    /// `Latest` position's iterator is taken).
    pub(super) fn new(calls: Arc<StreamsCalls<C>>, latest_at: EpochMillis) -> Self {
        StreamsSource {
            calls,
            read: None,
            latest_at,
            iterator: None,
            skipping: None,
            ended: false,
            empty_reads: 0,
            read_up_to: None,
            failures: 0,
            retry_after: None,
            trimmed: Vec::new(),
        }
    }

    /// Reads again from the pipeline's position with a new iterator: what
    /// was handed out and not committed is forgotten.
    pub(super) fn reopen(&mut self) {
        self.read = None;
        self.iterator = None;
        self.skipping = None;
        self.ended = false;
        self.empty_reads = 0;
        self.read_up_to = None;
    }

    /// After a handler failure the shard pauses ([`FAILURE_BACKOFF`] after
    /// each failure in a row) while the others go on; a success ends the
    /// pause.
    pub(super) fn pause_after(&mut self, failed: bool) {
        if failed {
            self.failures += 1;
            let pause = FAILURE_BACKOFF.delay(self.failures);
            self.retry_after = Some(self.calls.store.now() + pause.as_millis() as i64);
        } else {
            self.failures = 0;
            self.retry_after = None;
        }
    }

    /// Whether anything was handed out beyond `position`.
    pub(super) fn read_beyond(&self, position: Option<&Checkpoint>) -> bool {
        self.read.is_some() && self.read.as_ref() != position
    }

    /// The restarts at `TRIM_HORIZON` since the last call.
    pub(super) fn take_trimmed(&mut self) -> Vec<TrimmedShard> {
        std::mem::take(&mut self.trimmed)
    }

    /// Takes the shard's `LATEST` iterator now, so what is written after
    /// is read (its position was just set to `LATEST`, at `latest_at`).
    pub(super) async fn take_latest(
        &mut self,
        id: &ShardId,
        latest_at: EpochMillis,
    ) -> Result<(), Error> {
        self.reopen();
        self.latest_at = latest_at;
        let calls = self.calls.clone();
        let it = calls
            .call("GetShardIterator", || {
                calls.client.get_shard_iterator(
                    &calls.stream_arn,
                    id.as_str(),
                    &StreamsIteratorStart::Latest,
                )
            })
            .await?;
        self.ended = it.is_none();
        self.iterator = it;
        Ok(())
    }

    async fn open_iterator(
        &mut self,
        id: &ShardId,
        at: &Checkpoint,
    ) -> Result<Option<String>, Error> {
        let (start, skip) = position::reopen(at, self.latest_at, LATEST_REOPEN_MARGIN_MS);
        let calls = self.calls.clone();
        let it = calls
            .call("GetShardIterator", || {
                calls
                    .client
                    .get_shard_iterator(&calls.stream_arn, id.as_str(), &start)
            })
            .await?;
        self.skipping = skip;
        self.iterator = it.clone();
        Ok(it)
    }

    /// One GetRecords of the shard (with a new iterator first if it has
    /// none); an expired iterator is replaced once at the read position,
    /// trimmed data restarts the shard at `TRIM_HORIZON` once (or fails,
    /// as configured).
    async fn page(
        &mut self,
        id: &ShardId,
        from: &Checkpoint,
        report: &mut ShardReport,
    ) -> Result<Option<ChangesPage>, Error> {
        let (mut refreshed, mut restarted) = (false, false);
        loop {
            let at = self.read.clone().unwrap_or_else(|| from.clone());
            let iterator = match self.iterator.clone() {
                Some(it) => Ok(Some(it)),
                None => self.open_iterator(id, &at).await,
            };
            let result = match iterator {
                Ok(Some(it)) => {
                    report.polls += 1;
                    let calls = &self.calls;
                    calls
                        .call("GetRecords", || calls.client.get_records(&it, calls.limit))
                        .await
                }
                Ok(None) => return Ok(None),
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(page) => return Ok(Some(page)),
                Err(e) => e,
            };
            match &error {
                Error::Streams {
                    error: StreamsError::ExpiredIterator(_),
                    ..
                } if !refreshed => {
                    // Reopen at the last record handed out (or the position
                    // it started from), never at LATEST.
                    refreshed = true;
                    self.iterator = None;
                    report.iterators_refreshed += 1;
                }
                Error::Streams {
                    error: StreamsError::TrimmedData(_),
                    ..
                } if !restarted => {
                    restarted = true;
                    let lost_at = position::describe(&at, self.latest_at);
                    if self.calls.on_trimmed == OnTrimmed::Fail {
                        return Err(Error::TrimmedData {
                            shard_id: id.to_string(),
                            position: lost_at,
                        });
                    }
                    tracing::warn!(shard = %id, position = %lost_at,
                        "records were trimmed before they were read; restarting at TRIM_HORIZON");
                    self.reopen();
                    self.read = Some(Checkpoint::TrimHorizon);
                    self.trimmed.push(TrimmedShard {
                        shard_id: id.clone(),
                        lost_at,
                    });
                }
                _ => return Err(error),
            }
        }
    }

    /// Reads the shard once from `from` (the pipeline's position) or after
    /// the last record handed out: its records, decoded; `None` once the
    /// shard is read to its end. After an error the shard is read again
    /// from `from`.
    pub(super) async fn read(
        &mut self,
        id: &ShardId,
        from: &Checkpoint,
        report: &mut ShardReport,
    ) -> Result<Option<ShardBatch>, Error> {
        if self.ended {
            return Ok(None);
        }
        let read = self.read_page(id, from, report).await;
        if read.is_err() {
            self.reopen();
        }
        read.map(Some)
    }

    async fn read_page(
        &mut self,
        id: &ShardId,
        from: &Checkpoint,
        report: &mut ShardReport,
    ) -> Result<ShardBatch, Error> {
        let started = self.calls.store.now();
        let (records, next) = match self.page(id, from, report).await? {
            Some(page) => {
                let records = page
                    .records
                    .iter()
                    .enumerate()
                    .map(|(i, r)| ChangeRecord::from_sdk(id, i, r))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| Error::Record {
                        shard_id: id.to_string(),
                        error,
                    })?;
                (records, page.next_iterator)
            }
            None => (Vec::new(), None),
        };
        let mut shard = ShardBatch {
            shard_id: id.clone(),
            records: Vec::with_capacity(records.len()),
            ended: next.is_none(),
            skipped: 0,
            end: from.clone(),
        };
        let newest = records.iter().filter_map(|r| r.created_at).max();
        if records.is_empty() {
            self.empty_reads = self.empty_reads.saturating_add(1);
            if self.empty_reads >= EMPTY_READS_AT_HEAD {
                self.read_up_to = self.read_up_to.max(Some(started));
            }
        } else {
            self.empty_reads = 0;
            self.read_up_to = self.read_up_to.max(newest);
        }
        for record in records {
            if let Some(before) = self.skipping {
                if record.created_at.is_some_and(|t| t < before) {
                    shard.skipped += 1;
                    continue;
                }
                self.skipping = None;
            }
            self.read = Some(position::after(&record.sequence_number));
            shard.records.push(record);
        }
        shard.end = self.read.clone().unwrap_or_else(|| from.clone());
        self.iterator = next;
        self.ended = shard.ended;
        Ok(shard)
    }
}

impl<C: StreamsClient> RecordSource for StreamsSource<C> {
    type Error = Error;

    /// Not while the shard pauses after a handler failure.
    fn due(&self, _: Instant) -> bool {
        self.retry_after.is_none_or(|t| t <= self.calls.store.now())
    }

    async fn fetch(
        &mut self,
        shard: &ShardId,
        from: Option<&Checkpoint>,
        report: &mut ShardReport,
    ) -> Result<Fetched, Error> {
        let from = from.cloned().unwrap_or(Checkpoint::TrimHorizon);
        let Some(read) = self.read(shard, &from, report).await? else {
            return Ok(Fetched::Nothing);
        };
        let arn: Arc<str> = self.calls.stream_arn.as_str().into();
        Ok(Fetched::Batch(SourceBatch {
            units: read
                .records
                .into_iter()
                .map(|r| {
                    let seq: Arc<str> = r.sequence_number.as_str().into();
                    (seq, Unit::change(r, &arn))
                })
                .collect(),
            last_arrival: None,
            millis_behind: None,
            ends_shard: read.ended,
        }))
    }

    /// A `LATEST` start is kept by its time (`latest_at`), never pinned.
    fn take_pin(&mut self) -> Option<Checkpoint> {
        None
    }

    fn finished(&self, position: Option<&Checkpoint>) -> bool {
        self.ended && !self.read_beyond(position)
    }

    /// A batch not all processed is read again from the pipeline's
    /// position.
    fn processed(&mut self, ok: bool) {
        if !ok {
            self.reopen();
        }
    }
}
