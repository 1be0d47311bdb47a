//! The read path of a `StreamReader`: opening iterators (`LATEST` when a
//! position is set, otherwise where `position.rs` says), one GetRecords per
//! shard, an expired iterator replaced, trimmed data handled, records
//! converted and skipped during a seek.

use crate::ddb_streams::batch::{ShardBatch, TrimmedShard};
use crate::ddb_streams::client::{ChangesPage, StreamsClient, StreamsIteratorStart};
use crate::ddb_streams::config::{OnTrimmed, EMPTY_READS_AT_HEAD};
use crate::ddb_streams::error::StreamsError;
use crate::ddb_streams::position;
use crate::ddb_streams::reader::StreamReader;
use crate::pipeline::LATEST_REOPEN_MARGIN_MS;
use crate::processing::ChangeRecord;
use crate::state::{Checkpoint, ShardId};
use crate::Error;

impl<C: StreamsClient> StreamReader<C> {
    /// The `LATEST` iterator of a shard whose position was just set to
    /// `LATEST` (taken at once, so what is written after is read).
    pub(super) async fn take_latest(&mut self, id: &ShardId) -> Result<(), Error> {
        let arn = &self.stream_arn;
        let client = &self.client;
        let it = self
            .call("GetShardIterator", || {
                client.get_shard_iterator(arn, id.as_str(), &StreamsIteratorStart::Latest)
            })
            .await?;
        if let Some(cursor) = self.cursors.get_mut(id) {
            cursor.ended = it.is_none();
            cursor.iterator = it;
        }
        Ok(())
    }

    async fn open_iterator(&mut self, id: &ShardId) -> Result<Option<String>, Error> {
        let cursor = &self.cursors[id];
        let (start, skip) =
            position::reopen(&cursor.read, cursor.latest_at, LATEST_REOPEN_MARGIN_MS);
        let arn = &self.stream_arn;
        let client = &self.client;
        let it = self
            .call("GetShardIterator", || {
                client.get_shard_iterator(arn, id.as_str(), &start)
            })
            .await?;
        let cursor = self.cursors.get_mut(id).expect("cursor");
        cursor.skipping = skip;
        cursor.iterator = it.clone();
        Ok(it)
    }

    async fn get_records(&mut self, iterator: &str) -> Result<ChangesPage, Error> {
        self.stats.shards.polls += 1;
        let client = &self.client;
        let limit = self.config.limit;
        self.call("GetRecords", || client.get_records(iterator, limit))
            .await
    }

    /// One GetRecords of the shard (with a new iterator first if it has
    /// none); an expired iterator is replaced once at the read position.
    async fn fetch(
        &mut self,
        id: &ShardId,
        trimmed: &mut Vec<TrimmedShard>,
    ) -> Result<Option<ChangesPage>, Error> {
        let (mut refreshed, mut restarted) = (false, false);
        loop {
            let iterator = match self.cursors[id].iterator.clone() {
                Some(it) => Ok(Some(it)),
                None => self.open_iterator(id).await,
            };
            let result = match iterator {
                Ok(Some(it)) => self.get_records(&it).await,
                Ok(None) => return Ok(None),
                Err(e) => Err(e),
            };
            let error = match result {
                Ok(page) => return Ok(Some(page)),
                Err(e) => e,
            };
            let cursor = self.cursors.get_mut(id).expect("cursor");
            match &error {
                Error::Streams {
                    error: StreamsError::ExpiredIterator(_),
                    ..
                } if !refreshed => {
                    // Reopen at the last record handed out (or the position
                    // it started from), never at LATEST.
                    refreshed = true;
                    cursor.iterator = None;
                    self.stats.shards.iterators_refreshed += 1;
                }
                Error::Streams {
                    error: StreamsError::TrimmedData(_),
                    ..
                } if !restarted => {
                    restarted = true;
                    let lost_at = position::describe(&cursor.read, cursor.latest_at);
                    if self.config.on_trimmed == OnTrimmed::Fail {
                        return Err(Error::TrimmedData {
                            shard_id: id.to_string(),
                            position: lost_at,
                        });
                    }
                    tracing::warn!(shard = %id, position = %lost_at,
                        "records were trimmed before they were read; restarting at TRIM_HORIZON");
                    cursor.reset(Checkpoint::TrimHorizon);
                    self.stats.trimmed_restarts += 1;
                    trimmed.push(TrimmedShard {
                        shard_id: id.clone(),
                        lost_at,
                    });
                }
                _ => return Err(error),
            }
        }
    }

    pub(super) async fn read_shard(
        &mut self,
        id: &ShardId,
        trimmed: &mut Vec<TrimmedShard>,
    ) -> Result<Option<ShardBatch>, Error> {
        if self.cursors[id].ended {
            return Ok(None);
        }
        let started = self.store.now();
        let page = self.fetch(id, trimmed).await?;
        let (records, next) = match page {
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
        let cursor = self.cursors.get_mut(id).expect("cursor");
        let mut shard = ShardBatch {
            shard_id: id.clone(),
            records: Vec::with_capacity(records.len()),
            ended: next.is_none(),
            skipped: 0,
            end: cursor.read.clone(),
        };
        let newest = records.iter().filter_map(|r| r.created_at).max();
        if records.is_empty() {
            cursor.empty_reads = cursor.empty_reads.saturating_add(1);
            if cursor.empty_reads >= EMPTY_READS_AT_HEAD {
                cursor.read_up_to = cursor.read_up_to.max(Some(started));
            }
        } else {
            cursor.empty_reads = 0;
            cursor.read_up_to = cursor.read_up_to.max(newest);
        }
        for record in records {
            if let Some(before) = cursor.skipping {
                if record.created_at.is_some_and(|t| t < before) {
                    shard.skipped += 1;
                    continue;
                }
                cursor.skipping = None;
            }
            cursor.read = position::after(&record.sequence_number);
            shard.records.push(record);
        }
        shard.end = cursor.read.clone();
        cursor.iterator = next;
        if shard.ended {
            cursor.ended = true;
            self.rediscover = true;
        }
        Ok(Some(shard))
    }
}
