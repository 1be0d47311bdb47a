//! Where a shard's reading stands, how to reopen an iterator there, and how
//! that is stored (pure; the reader does the I/O).
//!
//! DynamoDB Streams has no `AT_TIMESTAMP` iterator, and a `LATEST` iterator
//! taken again later skips what was written in between. So a time (a seek)
//! and an expired `LATEST` reopen at `TRIM_HORIZON` and skip the records
//! created before the time: never at `LATEST`, which would lose records.

use crate::consumer::InitialPosition;
use crate::ddb_streams::client::StreamsIteratorStart;
use crate::state::{EpochMillis, Result, SequenceNumber, ShardSpec, StoredShardPosition};

/// A shard's reading position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardPosition {
    /// From the oldest record still in the shard.
    TrimHorizon,
    /// The records written after `at` (ms): read through a `LATEST` iterator
    /// taken at `at`.
    Latest {
        /// When the `LATEST` iterator was taken.
        at: EpochMillis,
    },
    /// The records created at or after `at` (ms; a seek).
    AtTime {
        /// The time sought.
        at: EpochMillis,
    },
    /// From this record (inclusive).
    AtSequence(SequenceNumber),
    /// After this record: it and everything before it are read.
    AfterSequence(SequenceNumber),
}

impl std::fmt::Display for ShardPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShardPosition::TrimHorizon => f.write_str("TRIM_HORIZON"),
            ShardPosition::Latest { at } => write!(f, "LATEST (taken at {at} ms)"),
            ShardPosition::AtTime { at } => write!(f, "the records created from {at} ms"),
            ShardPosition::AtSequence(seq) => write!(f, "AT_SEQUENCE_NUMBER {seq}"),
            ShardPosition::AfterSequence(seq) => write!(f, "AFTER_SEQUENCE_NUMBER {seq}"),
        }
    }
}

/// Start of the second `t` falls in: stream record times are rounded down
/// to the second, so skipping compares against whole seconds (a record of
/// the same second is kept, never lost).
fn whole_second(t: EpochMillis) -> EpochMillis {
    t - t.rem_euclid(1000)
}

impl ShardPosition {
    /// Where a shard with no saved position starts, `now` being the time
    /// (for `LATEST`).
    pub fn initial(initial: InitialPosition, now: EpochMillis) -> Self {
        match initial {
            InitialPosition::TrimHorizon => ShardPosition::TrimHorizon,
            InitialPosition::Latest => ShardPosition::Latest { at: now },
            InitialPosition::AtTimestamp(at) => ShardPosition::AtTime { at },
        }
    }

    /// The GetShardIterator request that (re)opens reading here, and the
    /// time before which records are then skipped. `LATEST` reopens at
    /// `TRIM_HORIZON` skipping what was created before `at - margin` (the
    /// margin covers clock skew), so nothing written since is lost; the first
    /// `LATEST` iterator is taken when the position is set, not here.
    pub fn reopen(&self, margin_ms: i64) -> (StreamsIteratorStart, Option<EpochMillis>) {
        match self {
            ShardPosition::TrimHorizon => (StreamsIteratorStart::TrimHorizon, None),
            ShardPosition::Latest { at } => (
                StreamsIteratorStart::TrimHorizon,
                Some(whole_second(at - margin_ms)),
            ),
            ShardPosition::AtTime { at } => {
                (StreamsIteratorStart::TrimHorizon, Some(whole_second(*at)))
            }
            ShardPosition::AtSequence(seq) => (StreamsIteratorStart::AtSequence(seq.clone()), None),
            ShardPosition::AfterSequence(seq) => {
                (StreamsIteratorStart::AfterSequence(seq.clone()), None)
            }
        }
    }

    /// `true` if both are record positions and this one is behind `other`
    /// (a commit that would move a position back is ignored).
    pub fn is_behind(&self, other: &ShardPosition) -> bool {
        use ShardPosition::{AfterSequence, AtSequence};
        match (self, other) {
            (AtSequence(a), AtSequence(b)) | (AfterSequence(a), AfterSequence(b)) => a < b,
            (AtSequence(a), AfterSequence(b)) => a <= b,
            (AfterSequence(a), AtSequence(b)) => a < b,
            _ => false,
        }
    }

    /// The stored form (`None` for a time, which has no iterator type: the
    /// position is stored once a record after it is committed).
    pub fn to_stored(
        &self,
        stream_arn: &str,
        shard: &ShardSpec,
    ) -> Result<Option<StoredShardPosition>> {
        let (iterator, seq) = match self {
            ShardPosition::AtTime { .. } => return Ok(None),
            ShardPosition::TrimHorizon => ("TRIM_HORIZON", None),
            ShardPosition::Latest { .. } => ("LATEST", None),
            ShardPosition::AtSequence(seq) => ("AT_SEQUENCE_NUMBER", Some(seq.as_str())),
            ShardPosition::AfterSequence(seq) => ("AFTER_SEQUENCE_NUMBER", Some(seq.as_str())),
        };
        let parent = shard.parents.first().map(|p| p.as_str());
        StoredShardPosition::new(stream_arn, shard.shard_id.as_str(), iterator, seq, parent)
            .map(Some)
    }

    /// A stored position, `now` standing for the time of a stored `LATEST`.
    pub fn from_stored(position: &StoredShardPosition, now: EpochMillis) -> Self {
        match (
            position.iterator_type.as_str(),
            position.sequence_number.clone(),
        ) {
            ("AT_SEQUENCE_NUMBER", Some(seq)) => ShardPosition::AtSequence(seq),
            ("AFTER_SEQUENCE_NUMBER", Some(seq)) => ShardPosition::AfterSequence(seq),
            ("LATEST", _) => ShardPosition::Latest { at: now },
            _ => ShardPosition::TrimHorizon,
        }
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
        let latest = ShardPosition::Latest { at: 10_500 };
        assert_eq!(
            latest.reopen(2_000),
            (StreamsIteratorStart::TrimHorizon, Some(8_000))
        );
        let time = ShardPosition::AtTime { at: 7_250 };
        assert_eq!(
            time.reopen(2_000),
            (StreamsIteratorStart::TrimHorizon, Some(7_000))
        );
        let after = ShardPosition::AfterSequence(seq("42"));
        assert_eq!(
            after.reopen(2_000),
            (StreamsIteratorStart::AfterSequence(seq("42")), None)
        );
    }

    #[test]
    fn record_positions_order_and_others_do_not() {
        let at = |s| ShardPosition::AtSequence(seq(s));
        let after = |s| ShardPosition::AfterSequence(seq(s));
        assert!(after("9").is_behind(&after("10")));
        assert!(at("10").is_behind(&after("10")));
        assert!(!after("10").is_behind(&at("10")));
        assert!(!after("10").is_behind(&after("10")));
        assert!(!ShardPosition::TrimHorizon.is_behind(&after("1")));
        assert!(!after("1").is_behind(&ShardPosition::TrimHorizon));
    }

    #[test]
    fn stored_positions_round_trip_except_times() {
        let shard = ShardSpec::new("shardId-2")
            .unwrap()
            .with_parents(&["shardId-1"])
            .unwrap();
        let after = ShardPosition::AfterSequence(seq("100000000000000000007"));
        let stored = after.to_stored("arn:stream", &shard).unwrap().unwrap();
        assert_eq!(stored.iterator_type, "AFTER_SEQUENCE_NUMBER");
        assert_eq!(
            stored.parent_shard_id.as_ref().unwrap().as_str(),
            "shardId-1"
        );
        assert_eq!(ShardPosition::from_stored(&stored, 0), after);
        let latest = ShardPosition::Latest { at: 5 }.to_stored("arn:stream", &shard);
        let latest = latest.unwrap().unwrap();
        assert_eq!(
            ShardPosition::from_stored(&latest, 99),
            ShardPosition::Latest { at: 99 }
        );
        let time = ShardPosition::AtTime { at: 5 };
        assert!(time.to_stored("arn:stream", &shard).unwrap().is_none());
    }
}
