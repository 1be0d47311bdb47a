//! Where a read of a shard starts: after its checkpoint, or at the initial
//! position; and the pin of a LATEST start.

use crate::consumer::retrieval::IteratorStart;
use crate::pipeline::{InitialPosition, LATEST_REOPEN_MARGIN_MS};
use crate::state::{Checkpoint, EpochMillis};

/// Where reading starts when no iterator or subscription carries on: after
/// the checkpoint (at the checkpointed record, which the processing core
/// skips, so a pending KPL sub-sequence resumes inside its aggregate), or the
/// initial position. `None` for a shard already read to its end.
pub(super) fn start_at(
    position: Option<&Checkpoint>,
    initial: InitialPosition,
) -> Option<IteratorStart> {
    Some(match position {
        Some(Checkpoint::After { sequence, .. }) | Some(Checkpoint::AtSequence(sequence)) => {
            IteratorStart::AtSequence(sequence.as_str().to_owned())
        }
        Some(Checkpoint::ShardEnd) => return None,
        Some(Checkpoint::Latest) => IteratorStart::Latest,
        Some(Checkpoint::AtTimestamp(t)) => IteratorStart::AtTimestamp(*t),
        Some(Checkpoint::TrimHorizon) => IteratorStart::TrimHorizon,
        None => match initial {
            InitialPosition::TrimHorizon => IteratorStart::TrimHorizon,
            InitialPosition::Latest => IteratorStart::Latest,
            InitialPosition::AtTimestamp(t) => IteratorStart::AtTimestamp(t),
        },
    })
}

/// A shard started at LATEST with nothing processed is pinned to a time
/// before its first iterator opened (less [`LATEST_REOPEN_MARGIN_MS`]): an
/// iterator opened again later starts there, not at a new LATEST that would
/// skip what arrived in between. Records that arrived shortly before the
/// start may then be read (at least once, never skipped). The first record
/// processed pins the shard to itself.
pub(super) fn latest_pin(start: &IteratorStart, opened_at: EpochMillis) -> Option<Checkpoint> {
    matches!(start, IteratorStart::Latest)
        .then(|| Checkpoint::AtTimestamp(opened_at - LATEST_REOPEN_MARGIN_MS))
}
