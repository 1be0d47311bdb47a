//! What one read of the stream hands out and reports.

use crate::pipeline::ShardReport;
use crate::processing::ChangeRecord;
use crate::state::{Checkpoint, ShardId};

/// The records read from one shard in one [`Batch`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShardBatch {
    /// The shard.
    pub shard_id: ShardId,
    /// Its records, in order.
    pub records: Vec<ChangeRecord>,
    /// The shard is closed and now read to its end.
    pub ended: bool,
    /// Records skipped because they were created before the time sought.
    pub skipped: usize,
    /// The position after these records (`After` the last one, or where
    /// the shard stood if none was read): what committing this batch saves.
    pub end: Checkpoint,
}

/// A shard restarted at `TRIM_HORIZON` because the records at its position
/// were trimmed before they were read (they are lost).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimmedShard {
    /// The shard.
    pub shard_id: ShardId,
    /// The position that could no longer be read.
    pub lost_at: String,
}

/// What a discovery (DescribeStream, every page) found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Shards the stream lists.
    pub shards: usize,
    /// DescribeStream pages read.
    pub pages: usize,
    /// Shards that appeared since the last discovery (every shard without a
    /// saved position, the first time).
    pub new_shards: Vec<ShardId>,
    /// Shards gone from the stream (trimmed after 24 hours); their positions
    /// were dropped.
    pub removed_shards: Vec<ShardId>,
}

/// One read of every readable shard: the records are handed out, not yet
/// accepted; `StreamReader::commit` accepts them and saves the positions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// Per shard read, parents before children.
    pub shards: Vec<ShardBatch>,
    /// The discovery this read ran first, if one was due.
    pub discovery: Option<Discovery>,
    /// Shards restarted at `TRIM_HORIZON` after their records were trimmed.
    pub trimmed: Vec<TrimmedShard>,
    /// Every shard is read to its end and committed, or at its head (the
    /// configured number of empty reads in a row): nothing more to read now.
    /// A stream written to all the time may never be caught up in this
    /// sense; `StreamReader::read_past` tells when a time is read past.
    pub caught_up: bool,
}

impl Batch {
    /// Every record, shard by shard.
    pub fn records(&self) -> impl Iterator<Item = &ChangeRecord> {
        self.shards.iter().flat_map(|s| s.records.iter())
    }

    /// How many records.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.records.len()).sum()
    }

    /// `true` when no records were read.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a reader did so far: the sum of its shards' reports, and what only
/// the reader does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderStats {
    /// What its shards' pipelines did, summed: GetRecords calls (`polls`),
    /// throttled answers (each retried after a backoff, while the retry
    /// policy allowed), expired iterators replaced at the last position
    /// read, and the records `poll` ran.
    pub shards: ShardReport,
    /// Shards restarted at `TRIM_HORIZON` after trimmed data.
    pub trimmed_restarts: u64,
}

/// What [`crate::ddb_streams::StreamReader::poll`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PollReport {
    /// What it did to each shard's records, summed: records the handler
    /// accepted (`processed`), poison records parked (they failed too
    /// often; their shard moved on), positions stored.
    pub shards: ShardReport,
    /// The discovery the read ran first, if one was due.
    pub discovery: Option<Discovery>,
    /// Shards restarted at `TRIM_HORIZON` after their records were trimmed.
    pub trimmed: Vec<TrimmedShard>,
    /// See [`Batch::caught_up`].
    pub caught_up: bool,
}
