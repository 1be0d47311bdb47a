//! Sequence numbers and checkpoints parsed from untrusted text.
//!
//! The input is one or two lines; each is parsed as a sequence number and
//! as a checkpoint, and two values that parse are compared with each other.

use shardkeeper::state::{Checkpoint, SequenceNumber, MAX_SEQUENCE_DIGITS};
use std::cmp::Ordering;

/// One input.
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (a, b) = text.split_once('\n').unwrap_or((text, ""));
    if let (Some(x), Some(y)) = (sequence(a), sequence(b)) {
        compare(&x, &y);
    }
    if let (Some(x), Some(y)) = (checkpoint(a), checkpoint(b)) {
        assert_eq!(
            x.order_key().cmp(&y.order_key()),
            rank(&x).cmp(&rank(&y)),
            "the stored order of {x} and {y} is not their order"
        );
    }
}

/// The digits without leading zeros ("0" for zero).
fn canonical(s: &str) -> &str {
    match s.trim_start_matches('0') {
        "" => "0",
        digits => digits,
    }
}

/// Parses `s` and checks it against what a sequence number promises.
fn sequence(s: &str) -> Option<SequenceNumber> {
    let parsed = SequenceNumber::new(s);
    let valid = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit())
        && canonical(s).len() <= MAX_SEQUENCE_DIGITS;
    assert_eq!(parsed.is_ok(), valid, "{s:?}: {parsed:?}");
    assert_eq!(
        s.parse::<SequenceNumber>().ok(),
        parsed.as_ref().ok().cloned()
    );
    let n = parsed.ok()?;
    let shown = n.to_string();
    assert_eq!(shown, n.as_str());
    assert_eq!(shown, canonical(s), "not kept without leading zeros");
    assert_eq!(shown.parse::<SequenceNumber>().ok().as_ref(), Some(&n));
    assert_eq!(n.sortable(), format!("{:03}{shown}", shown.len()));
    Some(n)
}

/// Order must be numeric order: that of the zero-padded digits, that of
/// the order key, and that of `u128` where both fit.
fn compare(x: &SequenceNumber, y: &SequenceNumber) {
    let order = x.cmp(y);
    let padded =
        |n: &SequenceNumber| format!("{:0>width$}", n.as_str(), width = MAX_SEQUENCE_DIGITS);
    assert_eq!(order, padded(x).cmp(&padded(y)), "{x} vs {y}");
    assert_eq!(order, x.sortable().cmp(&y.sortable()), "{x} vs {y}");
    assert_eq!(order == Ordering::Equal, x == y);
    assert_eq!(x.partial_cmp(y), Some(order));
    assert_eq!(y.cmp(x), order.reverse());
    if let (Ok(a), Ok(b)) = (x.as_str().parse::<u128>(), y.as_str().parse::<u128>()) {
        assert_eq!(order, a.cmp(&b), "{x} vs {y}");
    }
}

/// Parses `s` as a checkpoint; one that parses must survive its text forms.
fn checkpoint(s: &str) -> Option<Checkpoint> {
    let cp = s.parse::<Checkpoint>().ok()?;
    assert_eq!(
        cp.to_string().parse::<Checkpoint>().ok().as_ref(),
        Some(&cp)
    );
    let stored = Checkpoint::from_stored(&cp.stored_text(), cp.stored_sub_sequence());
    assert_eq!(stored.ok().as_ref(), Some(&cp));
    Some(cp)
}

/// Where a checkpoint stands in a shard: sentinels before every record, a
/// start position just before its record, `After` at its record, the end
/// after all.
fn rank(cp: &Checkpoint) -> (u8, Option<&SequenceNumber>, i128) {
    match cp {
        Checkpoint::TrimHorizon | Checkpoint::Latest | Checkpoint::AtTimestamp(_) => (0, None, 0),
        Checkpoint::AtSequence(seq) => (1, Some(seq), -1),
        Checkpoint::After {
            sequence,
            sub_sequence,
        } => (1, Some(sequence), i128::from(*sub_sequence)),
        Checkpoint::ShardEnd => (2, None, 0),
    }
}
