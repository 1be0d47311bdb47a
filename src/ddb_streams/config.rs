//! How a `StreamReader` reads: its configuration, and the fixed values of
//! its reading that no configuration has needed to change.

use crate::pipeline::InitialPosition;
use crate::processing::ProcessingOptions;
use crate::state::{Backoff, Jitter};
use std::time::Duration;

/// Empty reads in a row after which an open shard counts as at its head: 5,
/// bloop's heuristic, since one empty page does not prove the head.
pub(crate) const EMPTY_READS_AT_HEAD: u32 = 5;

/// Discover the shards again after this long: a shard read to its end
/// already makes the next read discover (for its children), so this only
/// bounds how late other new shards are found, at one discovery a minute.
pub(crate) const DISCOVER_EVERY: Duration = Duration::from_secs(60);

/// After a handler failure `poll` reads that shard again no sooner than
/// 1 s, doubling while it keeps failing up to 32 s: a passing failure holds
/// the shard up about a second, a lasting one costs a read every 32 s. The
/// other shards go on meanwhile. No jitter: the pause is a floor on the
/// reader's own clock, and one reader's shards do not race one another.
pub(crate) const FAILURE_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(32),
    jitter: Jitter::None,
};

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
    /// Stop with [`crate::Error::TrimmedData`]; the
    /// position stays where it was.
    Fail,
}

/// How a [`crate::ddb_streams::StreamReader`] reads.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReaderConfig {
    /// Where the shards start that have no saved position the first time
    /// the reader sees the stream. Shards that appear later always start at
    /// `TRIM_HORIZON` (their records are all new).
    pub initial_position: InitialPosition,
    /// Records per GetRecords call (`None`: the service's maximum, 1,000).
    pub limit: Option<i32>,
    /// What to do about trimmed data.
    pub on_trimmed: OnTrimmed,
    /// Pause between reads that found nothing, in the loops that read until
    /// caught up (`Replica::catch_up`).
    pub idle_pause: Duration,
    /// How [`crate::ddb_streams::StreamReader::poll`] treats failures: the
    /// failure mode, attempts before a record is parked, and where.
    pub processing: ProcessingOptions,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl ReaderConfig {
    /// Sets [`ReaderConfig::initial_position`](Self::initial_position).
    pub fn initial_position(mut self, initial_position: InitialPosition) -> Self {
        self.initial_position = initial_position;
        self
    }

    /// Sets [`ReaderConfig::limit`](Self::limit).
    pub fn limit(mut self, limit: Option<i32>) -> Self {
        self.limit = limit;
        self
    }

    /// Sets [`ReaderConfig::on_trimmed`](Self::on_trimmed).
    pub fn on_trimmed(mut self, on_trimmed: OnTrimmed) -> Self {
        self.on_trimmed = on_trimmed;
        self
    }

    /// Sets [`ReaderConfig::idle_pause`](Self::idle_pause).
    pub fn idle_pause(mut self, idle_pause: Duration) -> Self {
        self.idle_pause = idle_pause;
        self
    }

    /// Sets [`ReaderConfig::processing`](Self::processing).
    pub fn processing(mut self, processing: ProcessingOptions) -> Self {
        self.processing = processing;
        self
    }
}

impl Default for ReaderConfig {
    fn default() -> Self {
        ReaderConfig {
            initial_position: InitialPosition::TrimHorizon,
            limit: None,
            on_trimmed: OnTrimmed::RestartAtTrimHorizon,
            idle_pause: Duration::from_millis(200),
            processing: ProcessingOptions::default(),
        }
    }
}
