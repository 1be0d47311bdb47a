//! Digests of a batch's prefixes: what lets an event-source-mapped batch
//! skip only records that a batch holding them completed.
//!
//! - A batch's user records are named by their identities (sequence number
//!   and sub-sequence number), in order.
//! - Progress stores the digest of the prefix done, and of each prefix that
//!   a bisection of the batch can send again (its first half, the first
//!   half of that, ...), as long as they lie within the prefix done.
//! - A batch that finds progress under its key skips the longest prefix of
//!   its own whose digest is stored, so a record is skipped only where the
//!   same records, in the same order, were completed before it. A batch
//!   re-formed with other contents finds no match past what it shares.

use crate::processing::unit::Unit;
use crate::state::{PrefixDigest, SequenceNumber};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;
use std::sync::Arc;

/// A digest, as stored (the first 16 bytes of a SHA-256).
pub(crate) type Digest16 = [u8; 16];

/// A batch's user records by identity, in order, and how many of them the
/// first items hold.
#[derive(Debug, Clone, Default)]
pub(crate) struct Identities {
    /// Each user record's sequence number and sub-sequence number (an item
    /// that has no readable record: its item identifier and `u64::MAX`).
    records: Vec<(Arc<str>, u64)>,
    /// Whether each record can be skipped at all: a broken or unreadable
    /// record is never checked against a position (it fails, or is parked,
    /// whenever it comes).
    skippable: Vec<bool>,
    /// `item_ends[k]`: how many user records the first `k + 1` items hold.
    item_ends: Vec<usize>,
}

impl Identities {
    /// The identities of a batch's items.
    pub(crate) fn of(items: &[(Arc<str>, Unit)]) -> Identities {
        let mut records = Vec::with_capacity(items.len());
        let mut skippable = Vec::with_capacity(items.len());
        let mut item_ends = Vec::with_capacity(items.len());
        for (item, unit) in items {
            match unit {
                Unit::Record(r) => records.push((r.sequence_number.clone(), r.sub_sequence)),
                Unit::Records(rs) => records.extend(
                    rs.iter()
                        .map(|r| (r.sequence_number.clone(), r.sub_sequence)),
                ),
                Unit::Broken(r, _) => records.push((r.sequence_number.clone(), r.sub_sequence)),
                Unit::Unreadable(..) => records.push((item.clone(), u64::MAX)),
            }
            skippable.resize(records.len(), unit.is_ready());
            item_ends.push(records.len());
        }
        Identities {
            records,
            skippable,
            item_ends,
        }
    }

    /// The identity of the record at `index`.
    pub(crate) fn get(&self, index: usize) -> Option<(&str, u64)> {
        self.records.get(index).map(|(s, sub)| (&**s, *sub))
    }

    /// Where the record `(sequence, sub)` is, looking from `from` on.
    pub(crate) fn position(&self, sequence: &str, sub: u64, from: usize) -> Option<usize> {
        self.records
            .iter()
            .skip(from)
            .position(|(s, b)| &**s == sequence && *b == sub)
            .map(|i| i + from)
    }

    /// The digest of records `start..end`.
    pub(crate) fn digest(&self, start: usize, end: usize) -> Digest16 {
        let mut hasher = Sha256::new();
        for record in &self.records[start..end] {
            feed(&mut hasher, record);
        }
        truncate(hasher)
    }

    /// The digest of the whole batch.
    pub(crate) fn content(&self) -> Digest16 {
        self.digest(0, self.records.len())
    }

    /// The lengths, in user records, of the prefixes a bisection of the
    /// batch can send again: the first halves, rounded down and up, of the
    /// batch, of them, and so on ("the batch is split in two"; Lambda does
    /// not say how an odd count is split), shortest first.
    pub(crate) fn bisection_lengths(&self) -> Vec<usize> {
        let items = self.item_ends.len();
        let mut lengths = Vec::new();
        for k in 1..usize::BITS {
            let (down, up) = (items >> k, (items + (1 << k) - 1) >> k);
            for half in [down, up] {
                if half >= 1 && half < items {
                    lengths.push(self.item_ends[half - 1]);
                }
            }
            if up <= 1 {
                break;
            }
        }
        lengths.sort_unstable();
        lengths.dedup();
        lengths
    }

    /// How many of the first records the stored `prefixes` show done: the
    /// longest prefix of this batch whose digest is stored. 0 as well when
    /// a record after that prefix comes before its last one (records of a
    /// shard arrive in order; one that does not is never skipped by a
    /// position it did not reach).
    pub(crate) fn matched(&self, prefixes: &[PrefixDigest]) -> usize {
        let mut wanted: Vec<&PrefixDigest> = prefixes
            .iter()
            .filter(|p| p.records >= 1 && p.records as usize <= self.records.len())
            .collect();
        wanted.sort_by_key(|p| p.records);
        let mut hasher = Sha256::new();
        let mut hashed = 0;
        let mut best = 0;
        for p in wanted {
            let len = p.records as usize;
            for record in &self.records[hashed..len] {
                feed(&mut hasher, record);
            }
            hashed = len;
            if truncate(hasher.clone()) == p.digest {
                best = len;
            }
        }
        if best == 0 {
            return 0;
        }
        let last = &self.records[best - 1];
        let all_later = self.records[best..]
            .iter()
            .zip(&self.skippable[best..])
            .all(|(r, skippable)| !skippable || compare(r, last) == Ordering::Greater);
        if all_later {
            best
        } else {
            0
        }
    }
}

/// Digests of a batch's prefixes as its progress moves forward: each
/// record is fed once, whatever the number of commits.
#[derive(Debug, Clone)]
pub(crate) struct PrefixHasher {
    hasher: Sha256,
    hashed: usize,
    /// Bisection lengths not reached yet, shortest first.
    pending: std::collections::VecDeque<usize>,
    /// Digests of the bisection prefixes passed.
    marks: Vec<PrefixDigest>,
}

impl PrefixHasher {
    /// A hasher of `identities`' prefixes, marking its bisection lengths.
    pub(crate) fn new(identities: &Identities) -> PrefixHasher {
        PrefixHasher {
            hasher: Sha256::new(),
            hashed: 0,
            pending: identities.bisection_lengths().into(),
            marks: Vec::new(),
        }
    }

    /// The digests that describe the prefix of the first `done` records:
    /// each bisection prefix within it, and itself.
    pub(crate) fn prefixes(&mut self, identities: &Identities, done: usize) -> Vec<PrefixDigest> {
        if done < self.hashed {
            // Progress only moves forward; should it not, start over.
            *self = PrefixHasher::new(identities);
        }
        while self.hashed < done {
            feed(&mut self.hasher, &identities.records[self.hashed]);
            self.hashed += 1;
            if self.pending.front() == Some(&self.hashed) {
                self.pending.pop_front();
                self.marks.push(mark(self.hashed, &self.hasher));
            }
        }
        let mut prefixes = self.marks.clone();
        if prefixes.last().map(|m| m.records as usize) != Some(done) {
            prefixes.push(mark(done, &self.hasher));
        }
        prefixes
    }
}

fn mark(records: usize, hasher: &Sha256) -> PrefixDigest {
    PrefixDigest {
        records: u32::try_from(records).unwrap_or(u32::MAX),
        digest: truncate(hasher.clone()),
    }
}

/// One identity into the hasher: the sequence number's length and digits,
/// then the sub-sequence number.
fn feed(hasher: &mut Sha256, (sequence, sub): &(Arc<str>, u64)) {
    hasher.update((sequence.len() as u32).to_be_bytes());
    hasher.update(sequence.as_bytes());
    hasher.update(sub.to_be_bytes());
}

fn truncate(hasher: Sha256) -> Digest16 {
    let full = hasher.finalize();
    let mut digest = [0; 16];
    digest.copy_from_slice(&full[..16]);
    digest
}

/// Orders two identities by sequence number (as numbers), then
/// sub-sequence number; one that is not a sequence number orders equal.
fn compare(a: &(Arc<str>, u64), b: &(Arc<str>, u64)) -> Ordering {
    match (SequenceNumber::new(&a.0), SequenceNumber::new(&b.0)) {
        (Ok(x), Ok(y)) => x.cmp(&y).then(a.1.cmp(&b.1)),
        _ => Ordering::Equal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processing::StreamRecord;

    fn batch(seqs: &[u32]) -> Identities {
        let items: Vec<(Arc<str>, Unit)> = seqs
            .iter()
            .map(|s| {
                let seq: Arc<str> = Arc::from(s.to_string());
                let record = StreamRecord {
                    shard_id: Arc::from("shardId-0"),
                    sequence_number: seq.clone(),
                    sub_sequence: 0,
                    aggregated: false,
                    partition_key: Arc::from("k"),
                    explicit_hash_key: None,
                    data: bytes::Bytes::new(),
                    approximate_arrival: None,
                    event_source_arn: None,
                    change: None,
                };
                (seq, Unit::Record(record))
            })
            .collect();
        Identities::of(&items)
    }

    #[test]
    fn a_retry_of_the_same_batch_skips_what_was_done() {
        let first = batch(&[10, 11, 12, 13, 14]);
        let done = PrefixHasher::new(&first).prefixes(&first, 3);
        assert_eq!(batch(&[10, 11, 12, 13, 14]).matched(&done), 3);
    }

    #[test]
    fn a_bisected_half_skips_what_the_whole_batch_did() {
        let whole = batch(&[10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
        let done = PrefixHasher::new(&whole).prefixes(&whole, 8);
        assert_eq!(batch(&[10, 11, 12, 13, 14]).matched(&done), 5);
        assert_eq!(batch(&[10, 11]).matched(&done), 2);
        // A half that was not all done: only the prefix stored skips.
        let early = PrefixHasher::new(&whole).prefixes(&whole, 3);
        assert_eq!(batch(&[10, 11, 12, 13, 14]).matched(&early), 3);
    }

    #[test]
    fn a_batch_re_formed_with_other_records_skips_only_what_it_shares() {
        let lane = batch(&[10, 12, 14, 16]);
        let done = PrefixHasher::new(&lane).prefixes(&lane, 3);
        // The same first record, other records between: 11 was never run,
        // so only 10 is known done.
        assert_eq!(batch(&[10, 11, 12, 13, 14, 15]).matched(&done), 1);
        // A common prefix of one record is still known done.
        let re_formed = batch(&[10, 12, 13, 14]);
        assert_eq!(re_formed.matched(&done), 2);
    }

    #[test]
    fn records_out_of_order_after_the_prefix_skip_nothing() {
        let first = batch(&[10, 20, 30]);
        let done = PrefixHasher::new(&first).prefixes(&first, 2);
        assert_eq!(batch(&[10, 20, 15]).matched(&done), 0);
        assert_eq!(batch(&[10, 20, 25]).matched(&done), 2);
    }

    #[test]
    fn bisection_lengths_cover_every_first_half() {
        let b = batch(&(0..10).collect::<Vec<_>>());
        assert_eq!(b.bisection_lengths(), vec![1, 2, 3, 5]);
        let odd = batch(&(0..7).collect::<Vec<_>>());
        assert_eq!(odd.bisection_lengths(), vec![1, 2, 3, 4]);
        assert!(batch(&[1]).bisection_lengths().is_empty());
    }

    #[test]
    fn commits_feed_each_record_once_and_agree_with_one_pass() {
        let b = batch(&(100..200).collect::<Vec<_>>());
        let mut hasher = PrefixHasher::new(&b);
        let mut last = Vec::new();
        for done in [1, 7, 30, 64, 100] {
            last = hasher.prefixes(&b, done);
            assert_eq!(last.last().unwrap().digest, b.digest(0, done));
        }
        for p in &last {
            assert_eq!(p.digest, b.digest(0, p.records as usize));
        }
    }
}
