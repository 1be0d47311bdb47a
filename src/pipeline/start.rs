//! Where a shard pipeline starts when its shard has no checkpoint, and how
//! far back a lost LATEST start reads again: the same for every source.

use crate::state::{Checkpoint, EpochMillis};

/// Where a shard with no checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// The oldest record still in the shard.
    #[default]
    TrimHorizon,
    /// Only records that arrive from now on.
    Latest,
    /// The first record at or after this time (ms).
    AtTimestamp(EpochMillis),
}

/// How far before its first LATEST iterator a shard with nothing processed
/// reads again when that iterator is lost (Kinesis: an expired iterator, a
/// failed read, a dropped subscription; DynamoDB Streams: an expired
/// iterator, reopened at `TRIM_HORIZON`): 30 s, more than the clock skew
/// between this machine and the service, whose record times the reopened
/// reading compares with. The one LATEST margin of both sources.
pub(crate) const LATEST_REOPEN_MARGIN_MS: EpochMillis = 30_000;

/// A position a LATEST start is pinned from: none, or a stored `LATEST`
/// (after an operator's reset), which would otherwise open at a new LATEST
/// at each failed read or hand-over, skipping what came between.
pub(crate) fn unpinned(position: Option<&Checkpoint>) -> bool {
    matches!(position, None | Some(Checkpoint::Latest))
}
