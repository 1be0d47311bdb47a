//! Where a shard's reading stands, how to reopen an iterator there, and how
//! that is stored (pure; the reader does the I/O).
//!
//! A position is a [`Checkpoint`], the state store's one position type:
//! `TrimHorizon`, `Latest`, `AtTimestamp` (a seek to a time), `AtSequence`
//! (from a record, as a stored position may say) and `After` (a record and
//! everything before it are read; its sub-sequence number is always 0, a
//! DynamoDB stream has no aggregates). The reader never stands at
//! `ShardEnd`: a shard read to its end is marked so in its source, beside
//! its position. What a `Latest` position needs besides, when its `LATEST`
//! iterator was taken, the source keeps too (`StreamsSource::latest_at`).
//!
//! DynamoDB Streams has no `AT_TIMESTAMP` iterator, and a `LATEST` iterator
//! taken again later skips what was written in between. So a time (a seek)
//! and an expired `LATEST` reopen at `TRIM_HORIZON` and skip the records
//! created before the time: never at `LATEST`, which would lose records.

use crate::ddb_streams::client::StreamsIteratorStart;
use crate::pipeline::InitialPosition;
use crate::state::{
    Checkpoint, EpochMillis, Result, SequenceNumber, ShardSpec, StoredShardPosition,
};

/// The position after `seq`: it and everything before it are read.
pub(super) fn after(seq: &SequenceNumber) -> Checkpoint {
    Checkpoint::After {
        sequence: seq.clone(),
        sub_sequence: 0,
    }
}

/// Where a shard with no saved position starts (a `Latest` one reads what
/// is written after its `LATEST` iterator is taken, at once).
pub(super) fn initial(initial: InitialPosition) -> Checkpoint {
    match initial {
        InitialPosition::TrimHorizon => Checkpoint::TrimHorizon,
        InitialPosition::Latest => Checkpoint::Latest,
        InitialPosition::AtTimestamp(at) => Checkpoint::AtTimestamp(at),
    }
}

/// The position for logs and errors (`latest_at`: when the `LATEST`
/// iterator of a `Latest` position was taken).
pub(super) fn describe(position: &Checkpoint, latest_at: EpochMillis) -> String {
    match position {
        Checkpoint::TrimHorizon => "TRIM_HORIZON".to_owned(),
        Checkpoint::Latest => format!("LATEST (taken at {latest_at} ms)"),
        Checkpoint::AtTimestamp(at) => format!("the records created from {at} ms"),
        Checkpoint::AtSequence(seq) => format!("AT_SEQUENCE_NUMBER {seq}"),
        Checkpoint::After { sequence, .. } => format!("AFTER_SEQUENCE_NUMBER {sequence}"),
        Checkpoint::ShardEnd => "SHARD_END".to_owned(),
    }
}

/// Start of the second `t` falls in: stream record times are rounded down
/// to the second, so skipping compares against whole seconds (a record of
/// the same second is kept, never lost).
fn whole_second(t: EpochMillis) -> EpochMillis {
    t - t.rem_euclid(1000)
}

/// The GetShardIterator request that (re)opens reading at `position`, and
/// the time before which records are then skipped. `LATEST` reopens at
/// `TRIM_HORIZON` skipping what was created before `latest_at - margin`
/// (the margin covers clock skew), so nothing written since is lost; the
/// first `LATEST` iterator is taken when the position is set, not here.
/// (`ShardEnd`, never a reader's position, reopens where `TrimHorizon` does.)
pub(super) fn reopen(
    position: &Checkpoint,
    latest_at: EpochMillis,
    margin_ms: i64,
) -> (StreamsIteratorStart, Option<EpochMillis>) {
    match position {
        Checkpoint::TrimHorizon | Checkpoint::ShardEnd => (StreamsIteratorStart::TrimHorizon, None),
        Checkpoint::Latest => (
            StreamsIteratorStart::TrimHorizon,
            Some(whole_second(latest_at - margin_ms)),
        ),
        Checkpoint::AtTimestamp(at) => (StreamsIteratorStart::TrimHorizon, Some(whole_second(*at))),
        Checkpoint::AtSequence(seq) => (StreamsIteratorStart::AtSequence(seq.clone()), None),
        Checkpoint::After { sequence, .. } => {
            (StreamsIteratorStart::AfterSequence(sequence.clone()), None)
        }
    }
}

/// `true` if both are record positions and `position` is behind `other`
/// (a commit that would move a position back is ignored).
pub(super) fn is_behind(position: &Checkpoint, other: &Checkpoint) -> bool {
    let record = |c: &Checkpoint| matches!(c, Checkpoint::AtSequence(_) | Checkpoint::After { .. });
    record(position) && record(other) && position.order_key() < other.order_key()
}

/// The stored form (`None` for a time, which has no iterator type: the
/// position is stored once a record after it is committed; and for
/// `ShardEnd`, never a reader's position).
pub(super) fn to_stored(
    position: &Checkpoint,
    stream_arn: &str,
    shard: &ShardSpec,
) -> Result<Option<StoredShardPosition>> {
    let (iterator, seq) = match position {
        Checkpoint::AtTimestamp(_) | Checkpoint::ShardEnd => return Ok(None),
        Checkpoint::TrimHorizon => ("TRIM_HORIZON", None),
        Checkpoint::Latest => ("LATEST", None),
        Checkpoint::AtSequence(seq) => ("AT_SEQUENCE_NUMBER", Some(seq.as_str())),
        Checkpoint::After { sequence, .. } => ("AFTER_SEQUENCE_NUMBER", Some(sequence.as_str())),
    };
    let parent = shard.parents.first().map(|p| p.as_str());
    StoredShardPosition::new(stream_arn, shard.shard_id.as_str(), iterator, seq, parent).map(Some)
}

/// A stored position (a stored `LATEST` is read through a `LATEST` iterator
/// taken when it is loaded).
pub(super) fn from_stored(position: &StoredShardPosition) -> Checkpoint {
    match (
        position.iterator_type.as_str(),
        position.sequence_number.as_ref(),
    ) {
        ("AT_SEQUENCE_NUMBER", Some(seq)) => Checkpoint::AtSequence(seq.clone()),
        ("AFTER_SEQUENCE_NUMBER", Some(seq)) => after(seq),
        ("LATEST", _) => Checkpoint::Latest,
        _ => Checkpoint::TrimHorizon,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> SequenceNumber {
        SequenceNumber::new(s).unwrap()
    }

    #[test]
    fn latest_and_times_reopen_at_trim_horizon_never_at_latest() {
        assert_eq!(
            reopen(&Checkpoint::Latest, 10_500, 2_000),
            (StreamsIteratorStart::TrimHorizon, Some(8_000))
        );
        assert_eq!(
            reopen(&Checkpoint::AtTimestamp(7_250), 0, 2_000),
            (StreamsIteratorStart::TrimHorizon, Some(7_000))
        );
        assert_eq!(
            reopen(&after(&seq("42")), 0, 2_000),
            (StreamsIteratorStart::AfterSequence(seq("42")), None)
        );
    }

    #[test]
    fn record_positions_order_and_others_do_not() {
        let at = |s| Checkpoint::AtSequence(seq(s));
        let after = |s| after(&seq(s));
        assert!(is_behind(&after("9"), &after("10")));
        assert!(is_behind(&at("10"), &after("10")));
        assert!(!is_behind(&after("10"), &at("10")));
        assert!(!is_behind(&after("10"), &after("10")));
        assert!(is_behind(&at("9"), &at("10")));
        assert!(is_behind(&after("9"), &at("10")));
        assert!(!is_behind(&Checkpoint::TrimHorizon, &after("1")));
        assert!(!is_behind(&after("1"), &Checkpoint::TrimHorizon));
    }

    #[test]
    fn stored_positions_round_trip_except_times() {
        let shard = ShardSpec::new("shardId-2")
            .unwrap()
            .with_parents(&["shardId-1"])
            .unwrap();
        let after = after(&seq("100000000000000000007"));
        let stored = to_stored(&after, "arn:stream", &shard).unwrap().unwrap();
        assert_eq!(stored.iterator_type, "AFTER_SEQUENCE_NUMBER");
        assert_eq!(
            stored.parent_shard_id.as_ref().unwrap().as_str(),
            "shardId-1"
        );
        assert_eq!(from_stored(&stored), after);
        let latest = to_stored(&Checkpoint::Latest, "arn:stream", &shard);
        assert_eq!(from_stored(&latest.unwrap().unwrap()), Checkpoint::Latest);
        let time = Checkpoint::AtTimestamp(5);
        assert!(to_stored(&time, "arn:stream", &shard).unwrap().is_none());
    }
}
