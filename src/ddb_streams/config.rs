//! How a `StreamReader` reads: its configuration.

use crate::consumer::InitialPosition;
use crate::processing::ProcessingOptions;
use std::time::Duration;

/// What a reader does when the records at a shard's position were trimmed
/// (older than the stream's 24 hours) before they were read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnTrimmed {
    /// Restart the shard at `TRIM_HORIZON`, log a warning and report it in
    /// [`crate::ddb_streams::Batch::trimmed`] (the DynamoDB Streams Kinesis
    /// adapter's default, `SKIP_RECORDS_TO_TRIM_HORIZON`): the records in
    /// between are lost, the reader goes on.
    #[default]
    RestartAtTrimHorizon,
    /// Stop with [`crate::ddb_streams::ReaderError::TrimmedData`]; the
    /// position stays where it was.
    Fail,
}

/// How a [`crate::ddb_streams::StreamReader`] reads.
#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// Where the shards start that have no saved position the first time
    /// the reader sees the stream. Shards that appear later always start at
    /// `TRIM_HORIZON` (their records are all new).
    pub initial_position: InitialPosition,
    /// Records per GetRecords call (`None`: the service's maximum, 1,000).
    pub limit: Option<i32>,
    /// Empty reads in a row after which an open shard counts as at its head.
    pub empty_reads_at_head: u32,
    /// Discover the shards again after this long (a shard read to its end
    /// also makes the next read discover, to find its children).
    pub discover_every: Duration,
    /// What to do about trimmed data.
    pub on_trimmed: OnTrimmed,
    /// Reopening a `LATEST` position at `TRIM_HORIZON` keeps the records
    /// created up to this long before the position was taken (clock skew).
    pub latest_margin: Duration,
    /// Pause between reads that found nothing, in the loops that read until
    /// caught up (`Replica::catch_up`).
    pub idle_pause: Duration,
    /// How [`crate::ddb_streams::StreamReader::poll`] treats failures: the
    /// failure mode, attempts before a record is parked, and where. Its
    /// `deadline_margin` is not used (`poll_until` takes the instant).
    pub processing: ProcessingOptions,
    /// After a handler failure `poll` reads that shard again no sooner than
    /// this (doubling while it keeps failing, up to 32 times this); the
    /// other shards go on meanwhile.
    pub failure_pause: Duration,
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            initial_position: InitialPosition::TrimHorizon,
            limit: None,
            empty_reads_at_head: 5,
            discover_every: Duration::from_secs(60),
            on_trimmed: OnTrimmed::RestartAtTrimHorizon,
            latest_margin: Duration::from_secs(5),
            idle_pause: Duration::from_millis(200),
            processing: ProcessingOptions::default(),
            failure_pause: Duration::from_secs(1),
        }
    }
}
