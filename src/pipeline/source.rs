//! Where a shard pipeline's records come from: a record source reads one
//! shard from a position and is told how the records it gave went.

use crate::pipeline::ShardReport;
use crate::processing::Unit;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// Reads one shard.
pub(crate) trait RecordSource: Send {
    /// What a read of the source can fail with, beyond the state store.
    type Error: From<crate::Error> + Send;

    /// Due to be read now.
    fn due(&self, now: Instant) -> bool;

    /// Reads what is there: the records after `from` (the shard's position;
    /// `None`: none yet, the initial position), or the next ones of a read
    /// already open. Counts its calls in `report`.
    fn fetch(
        &mut self,
        shard: &ShardId,
        from: Option<&Checkpoint>,
        report: &mut ShardReport,
    ) -> impl Future<Output = Result<Fetched, Self::Error>> + Send;

    /// The pin of a LATEST start the last fetch opened with no position
    /// (a time before its first iterator, see the glossary's "pin"), once:
    /// kept whether or not the fetch then read anything.
    fn take_pin(&mut self) -> Option<Checkpoint>;

    /// Read to its end, with nothing handed out beyond `position` (the
    /// pipeline's): the shard is finished, its children may be read. A
    /// source whose consumer drops a shard once it ends never says so.
    fn finished(&self, _position: Option<&Checkpoint>) -> bool {
        false
    }

    /// The last batch fetched was processed: all of it (`ok`), or up to a
    /// failure (read again from the position).
    fn processed(&mut self, ok: bool);
}

/// What a fetch found.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// Records to process (possibly none: an empty read).
    Batch(SourceBatch),
    /// Nothing now (no event yet, a refreshed iterator, a back-off).
    Nothing,
}

/// A batch of records from a source, as the core takes them.
#[derive(Debug)]
pub(crate) struct SourceBatch {
    /// Each record's item identifier (its sequence number) and unit, in
    /// shard order.
    pub units: Vec<(Arc<str>, Unit)>,
    /// The last record's arrival time.
    pub last_arrival: Option<EpochMillis>,
    /// `MillisBehindLatest` with it.
    pub millis_behind: Option<i64>,
    /// The shard ends after these records.
    pub ends_shard: bool,
}
