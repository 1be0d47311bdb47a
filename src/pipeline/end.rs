//! Where a bounded group (a backfill) stops reading a shard: its end, a
//! checkpoint. The records up to where that position resumes are read,
//! none after: `SHARD_END` reads all of them, `TRIM_HORIZON` (and
//! `LATEST`) none, `AT_TIMESTAMP` those that arrived before the time,
//! `AT_SEQUENCE_NUMBER` those before the record, after a record those up
//! to it (a KPL aggregate is read whole).

use crate::processing::Unit;
use crate::state::{Checkpoint, EpochMillis, SequenceNumber};

/// How much later than a time end this machine's clock must be before an
/// empty read that caught up with the shard's tip ends the shard: the
/// clock skew to Kinesis's arrival timestamps it allows for.
pub(crate) const END_CLOCK_MARGIN_MS: EpochMillis = 5_000;

/// The record (`sequence`, and `unit` for its arrival time) is past `end`.
pub(crate) fn past_end(end: &Checkpoint, sequence: &str, unit: &Unit) -> bool {
    let seq = || SequenceNumber::new(sequence).ok();
    match end {
        Checkpoint::ShardEnd => false,
        Checkpoint::TrimHorizon | Checkpoint::Latest => true,
        Checkpoint::AtTimestamp(t) => arrival(unit).is_some_and(|a| a >= *t),
        Checkpoint::AtSequence(n) => seq().is_some_and(|s| s >= *n),
        Checkpoint::After { sequence: n, .. } => seq().is_some_and(|s| s > *n),
    }
}

/// Nothing is left to read before `end` from `position` (what the shard has
/// processed): an end that reads nothing, or a position at or past the
/// record an end after a record names.
pub(crate) fn reached(end: &Checkpoint, position: Option<&Checkpoint>) -> bool {
    match (end, position) {
        (Checkpoint::TrimHorizon | Checkpoint::Latest, _) => true,
        (Checkpoint::After { sequence: n, .. }, Some(Checkpoint::After { sequence: done, .. })) => {
            done >= n
        }
        _ => false,
    }
}

/// An empty read that caught up with the shard's tip (`millis_behind` 0)
/// at `now` (this machine's clock) has read everything before a time end,
/// once `now` is past it by [`END_CLOCK_MARGIN_MS`].
pub(crate) fn caught_up_past(
    end: &Checkpoint,
    millis_behind: Option<i64>,
    now: EpochMillis,
) -> bool {
    matches!(end, Checkpoint::AtTimestamp(t) if millis_behind == Some(0) && now >= t + END_CLOCK_MARGIN_MS)
}

fn arrival(unit: &Unit) -> Option<EpochMillis> {
    match unit {
        Unit::Record(r) => r.approximate_arrival,
        Unit::Records(rs) => rs.first().and_then(|r| r.approximate_arrival),
        Unit::Broken(r, _) => r.approximate_arrival,
        Unit::Unreadable(..) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processing::StreamRecord;

    fn unit(arrival: EpochMillis) -> Unit {
        Unit::Record(StreamRecord {
            shard_id: "shardId-000000000000".into(),
            sequence_number: "5".into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "k".into(),
            explicit_hash_key: None,
            data: bytes::Bytes::new(),
            approximate_arrival: Some(arrival),
            event_source_arn: None,
            change: None,
        })
    }

    fn after(n: &str) -> Checkpoint {
        Checkpoint::after(n).unwrap()
    }

    #[test]
    fn each_kind_of_end_keeps_the_records_before_it() {
        let u = unit(1_000);
        assert!(!past_end(&Checkpoint::ShardEnd, "5", &u));
        assert!(past_end(&Checkpoint::TrimHorizon, "5", &u));
        assert!(past_end(&Checkpoint::AtTimestamp(1_000), "5", &u));
        assert!(!past_end(&Checkpoint::AtTimestamp(1_001), "5", &u));
        let at = Checkpoint::AtSequence(SequenceNumber::new("5").unwrap());
        assert!(past_end(&at, "5", &u) && !past_end(&at, "4", &u));
        assert!(!past_end(&after("5"), "5", &u) && past_end(&after("5"), "6", &u));
        // Numbers, not text: 10 comes after 9.
        assert!(past_end(&after("9"), "10", &u));
    }

    #[test]
    fn an_end_is_reached_by_its_record_or_at_once_when_it_reads_nothing() {
        assert!(reached(&Checkpoint::TrimHorizon, None));
        assert!(!reached(&after("7"), Some(&after("6"))));
        assert!(reached(&after("7"), Some(&after("7"))));
        assert!(!reached(&Checkpoint::ShardEnd, Some(&after("7"))));
        let end = Checkpoint::AtTimestamp(10_000);
        assert!(!caught_up_past(
            &end,
            Some(0),
            10_000 + END_CLOCK_MARGIN_MS - 1
        ));
        assert!(!caught_up_past(&end, Some(5), 10_000 + END_CLOCK_MARGIN_MS));
        assert!(caught_up_past(&end, Some(0), 10_000 + END_CLOCK_MARGIN_MS));
    }
}
