//! Sequence numbers and checkpoints, with the total order that keeps checkpoints from going back.
//!
//! Kinesis and DynamoDB Streams sequence numbers are decimal strings of up to
//! 129 digits. They are compared as numbers here, and stored with a copy whose
//! string order is their numeric order (the *order key*: the digit count as
//! three digits, then the digits), so that a DynamoDB condition expression can
//! compare two checkpoints as strings. It orders exactly as zero-padding to 129
//! digits would, in less than half the bytes for real sequence numbers.

use crate::clock::EpochMillis;
use crate::error::{Result, StateError};
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// The most digits a Kinesis or DynamoDB Streams sequence number has.
pub const MAX_SEQUENCE_DIGITS: usize = 129;

/// A validated sequence number: 1 to 129 decimal digits, kept without leading zeros.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SequenceNumber(String);

impl SequenceNumber {
    /// Parses a sequence number, rejecting anything but 1 to 129 ASCII digits.
    pub fn new(value: &str) -> Result<Self> {
        if value.is_empty() {
            return Err(StateError::validation(
                "sequence number",
                "must not be empty",
            ));
        }
        if let Some(bad) = value.chars().find(|c| !c.is_ascii_digit()) {
            return Err(StateError::validation(
                "sequence number",
                format!("{value:?} contains {bad:?}; only decimal digits are allowed"),
            ));
        }
        let trimmed = value.trim_start_matches('0');
        let canonical = if trimmed.is_empty() { "0" } else { trimmed };
        if canonical.len() > MAX_SEQUENCE_DIGITS {
            return Err(StateError::validation(
                "sequence number",
                format!(
                    "{} digits long, at most {MAX_SEQUENCE_DIGITS} allowed",
                    canonical.len()
                ),
            ));
        }
        Ok(SequenceNumber(canonical.to_owned()))
    }

    /// The decimal digits, without leading zeros.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The digit count (three digits) followed by the digits: string order
    /// equals numeric order, as with zero-padding, but 59 bytes instead of 129
    /// for a 56-digit Kinesis sequence number.
    pub fn sortable(&self) -> String {
        format!("{:03}{}", self.0.len(), self.0)
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.cmp(&other.0))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for SequenceNumber {
    type Err = StateError;
    fn from_str(s: &str) -> Result<Self> {
        SequenceNumber::new(s)
    }
}

/// Where a shard's processing stands: a sentinel or the last processed record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    /// Nothing processed; start at the oldest record still in the shard.
    TrimHorizon,
    /// Nothing processed; start at the newest record.
    Latest,
    /// Nothing processed; start at the first record at or after this time.
    AtTimestamp(EpochMillis),
    /// Nothing processed yet in this shard; start at this sequence number
    /// (inclusive). A child shard starts here when its parent was depleted.
    AtSequence(SequenceNumber),
    /// Every record up to and including this one has been processed. The
    /// sub-sequence number counts user records inside a KPL aggregate (0 for
    /// records that are not aggregated).
    After {
        /// The sequence number of the last processed (possibly aggregated) record.
        sequence: SequenceNumber,
        /// The last processed user record inside it.
        sub_sequence: u64,
    },
    /// The shard is closed and every record in it has been processed.
    ShardEnd,
}

const TRIM_HORIZON: &str = "TRIM_HORIZON";
const LATEST: &str = "LATEST";
const SHARD_END: &str = "SHARD_END";
const AT_TIMESTAMP: &str = "AT_TIMESTAMP:";
const AT_SEQUENCE: &str = "AT_SEQUENCE_NUMBER:";

impl Checkpoint {
    /// A checkpoint after a plain (not aggregated) record.
    pub fn after(sequence: &str) -> Result<Self> {
        Ok(Checkpoint::After {
            sequence: SequenceNumber::new(sequence)?,
            sub_sequence: 0,
        })
    }

    /// A checkpoint after a user record inside a KPL aggregate.
    pub fn after_sub(sequence: &str, sub_sequence: u64) -> Result<Self> {
        Ok(Checkpoint::After {
            sequence: SequenceNumber::new(sequence)?,
            sub_sequence,
        })
    }

    /// The key that orders checkpoints as strings: sentinels first, then by
    /// sequence and sub-sequence number, `SHARD_END` last.
    pub fn order_key(&self) -> String {
        match self {
            Checkpoint::TrimHorizon | Checkpoint::Latest | Checkpoint::AtTimestamp(_) => {
                "-".to_owned()
            }
            Checkpoint::AtSequence(seq) => seq.sortable(),
            Checkpoint::After {
                sequence,
                sub_sequence,
            } => {
                let sub = sub_sequence.to_string();
                format!("{}.{:02}{sub}", sequence.sortable(), sub.len())
            }
            Checkpoint::ShardEnd => "~".to_owned(),
        }
    }

    /// `true` if the record `(sequence, sub_sequence)` is at or below this
    /// checkpoint, i.e. already processed (used to skip re-delivered records).
    pub fn covers(&self, sequence: &SequenceNumber, sub_sequence: u64) -> bool {
        match self {
            Checkpoint::TrimHorizon | Checkpoint::Latest | Checkpoint::AtTimestamp(_) => false,
            Checkpoint::AtSequence(start) => sequence < start,
            Checkpoint::After {
                sequence: done,
                sub_sequence: done_sub,
            } => (sequence, sub_sequence) <= (done, *done_sub),
            Checkpoint::ShardEnd => true,
        }
    }

    /// `true` if a real record (not a sentinel) has been processed.
    pub fn has_progress(&self) -> bool {
        matches!(self, Checkpoint::After { .. } | Checkpoint::ShardEnd)
    }

    /// The text stored in the `checkpoint` attribute (the sub-sequence number is stored apart).
    pub fn stored_text(&self) -> String {
        match self {
            Checkpoint::TrimHorizon => TRIM_HORIZON.to_owned(),
            Checkpoint::Latest => LATEST.to_owned(),
            Checkpoint::ShardEnd => SHARD_END.to_owned(),
            Checkpoint::AtTimestamp(t) => format!("{AT_TIMESTAMP}{t}"),
            Checkpoint::AtSequence(seq) => format!("{AT_SEQUENCE}{seq}"),
            Checkpoint::After { sequence, .. } => sequence.to_string(),
        }
    }

    /// The sub-sequence number stored beside the checkpoint text.
    pub fn stored_sub_sequence(&self) -> u64 {
        match self {
            Checkpoint::After { sub_sequence, .. } => *sub_sequence,
            _ => 0,
        }
    }

    /// Rebuilds a checkpoint from its stored text and sub-sequence number.
    pub fn from_stored(text: &str, sub_sequence: u64) -> Result<Self> {
        Ok(match text {
            TRIM_HORIZON => Checkpoint::TrimHorizon,
            LATEST => Checkpoint::Latest,
            SHARD_END => Checkpoint::ShardEnd,
            _ => {
                if let Some(t) = text.strip_prefix(AT_TIMESTAMP) {
                    Checkpoint::AtTimestamp(t.parse().map_err(|_| {
                        StateError::validation("checkpoint", format!("bad timestamp in {text:?}"))
                    })?)
                } else if let Some(seq) = text.strip_prefix(AT_SEQUENCE) {
                    Checkpoint::AtSequence(SequenceNumber::new(seq)?)
                } else {
                    Checkpoint::After {
                        sequence: SequenceNumber::new(text)?,
                        sub_sequence,
                    }
                }
            }
        })
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::After {
                sequence,
                sub_sequence,
            } if *sub_sequence > 0 => write!(f, "{sequence}/{sub_sequence}"),
            other => f.write_str(&other.stored_text()),
        }
    }
}

impl FromStr for Checkpoint {
    type Err = StateError;
    /// Parses `TRIM_HORIZON`, `LATEST`, `SHARD_END`, `AT_TIMESTAMP:<ms>`,
    /// `AT_SEQUENCE_NUMBER:<seq>`, `<seq>` or `<seq>/<sub>`.
    fn from_str(s: &str) -> Result<Self> {
        match s.split_once('/') {
            Some((seq, sub)) => {
                let sub = sub.parse().map_err(|_| {
                    StateError::validation(
                        "sub-sequence number",
                        format!("{sub:?} is not a number"),
                    )
                })?;
                Checkpoint::after_sub(seq, sub)
            }
            None => Checkpoint::from_stored(s, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn seq(s: &str) -> SequenceNumber {
        SequenceNumber::new(s).unwrap()
    }

    #[test]
    fn rejects_malformed_sequence_numbers() {
        for bad in ["", "12a", "-1", "1.5", " 1", "０"] {
            let err = SequenceNumber::new(bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    StateError::Validation {
                        field: "sequence number",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
        assert!(SequenceNumber::new(&"9".repeat(129)).is_ok());
        let err = SequenceNumber::new(&"9".repeat(130)).unwrap_err();
        assert!(err.to_string().contains("130 digits"), "{err}");
        assert_eq!(seq("000123").as_str(), "123");
    }

    #[test]
    fn numeric_not_lexicographic_order() {
        assert!(seq("9") < seq("10"));
        assert!(seq("49590338271490256608559692538361571095921575989136588898") > seq("9"));
    }

    #[test]
    fn checkpoint_order_sentinels_sequence_shard_end() {
        let order = [
            Checkpoint::TrimHorizon.order_key(),
            Checkpoint::AtSequence(seq("100")).order_key(),
            Checkpoint::after("100").unwrap().order_key(),
            Checkpoint::after_sub("100", 3).unwrap().order_key(),
            Checkpoint::after("101").unwrap().order_key(),
            Checkpoint::ShardEnd.order_key(),
        ];
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted);
    }

    #[test]
    fn stored_round_trip_and_parse() {
        for cp in [
            Checkpoint::TrimHorizon,
            Checkpoint::Latest,
            Checkpoint::ShardEnd,
            Checkpoint::AtTimestamp(1_700_000_000_000),
            Checkpoint::AtSequence(seq("42")),
            Checkpoint::after_sub("42", 7).unwrap(),
        ] {
            let back =
                Checkpoint::from_stored(&cp.stored_text(), cp.stored_sub_sequence()).unwrap();
            assert_eq!(back, cp);
            assert_eq!(cp.to_string().parse::<Checkpoint>().unwrap(), cp);
        }
        assert!("12/x".parse::<Checkpoint>().is_err());
        assert!("AT_TIMESTAMP:soon".parse::<Checkpoint>().is_err());
    }

    #[test]
    fn covers_marks_processed_records() {
        let cp = Checkpoint::after_sub("100", 2).unwrap();
        assert!(cp.covers(&seq("99"), 9));
        assert!(cp.covers(&seq("100"), 2));
        assert!(!cp.covers(&seq("100"), 3));
        assert!(!cp.covers(&seq("101"), 0));
        assert!(!Checkpoint::AtSequence(seq("5")).covers(&seq("5"), 0));
        assert!(Checkpoint::AtSequence(seq("5")).covers(&seq("4"), 0));
        assert!(!Checkpoint::TrimHorizon.covers(&seq("0"), 0));
    }

    proptest! {
        #[test]
        fn sortable_string_order_matches_numeric_order(a in "[0-9]{1,129}", b in "[0-9]{1,129}") {
            let (x, y) = (seq(&a), seq(&b));
            prop_assert_eq!(x.cmp(&y), x.sortable().cmp(&y.sortable()));
            let padded = |s: &SequenceNumber| format!("{:0>129}", s.as_str());
            prop_assert_eq!(padded(&x).cmp(&padded(&y)), x.sortable().cmp(&y.sortable()));
        }

        #[test]
        fn checkpoint_order_key_matches_record_order(
            a in "[1-9][0-9]{0,40}", sa in any::<u64>(), b in "[1-9][0-9]{0,40}", sb in any::<u64>()
        ) {
            let ca = Checkpoint::after_sub(&a, sa).unwrap();
            let cb = Checkpoint::after_sub(&b, sb).unwrap();
            let numeric = (seq(&a), sa).cmp(&(seq(&b), sb));
            prop_assert_eq!(ca.order_key().cmp(&cb.order_key()), numeric);
        }
    }
}
