//! Buckets: the partition keys a group's shard items are spread over.
//!
//! DynamoDB serves one partition key at most 1,000 write units a second.
//! A group whose every item shared one key would be throttled at about a
//! thousand checkpoints a second, however the table is provisioned. So the
//! items about one shard (its lease and checkpoint, standalone checkpoints,
//! DynamoDB Streams positions, batch progress, attempts and parked records)
//! live under one of `N` bucket keys, chosen by a hash of the shard id (or,
//! where an event names no shard, of the record's event id; items written
//! before event ids, of its sequence number). The
//! group's own items (stream, consumers, EFO pool, the layout itself) stay
//! under the home key, where one read finds them.
//!
//! - `N` is a power of two from 1 to [`Buckets::MAX`]. With one bucket the
//!   bucket is the home key: the layout of groups written before buckets
//!   existed.
//! - A group's `N` is recorded once, in its `BUCKETS` item, by the first
//!   write that needs it, and never changed by the functions.
//! - [`Buckets::for_shards`] chooses `N` from the shard count so that no key
//!   needs more than a budget of write units a second.
//! - The hash is part of the stored layout and never changes: FNV-1a (64
//!   bit) of the key's bytes, mixed by the SplitMix64 finalizer, modulo `N`.

use crate::error::{Result, StateError};

/// How many bucket keys a group's shard items are spread over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Buckets(u16);

/// What [`Buckets::for_shards`] plans for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpreadPolicy {
    /// Write units one shard needs a second: a checkpoint a second with
    /// room to spare (default 1.5; leases are not renewed one by one).
    pub writes_per_shard: f64,
    /// Write units one bucket key may be asked for a second (default 500,
    /// half of what DynamoDB serves one partition key).
    pub key_budget: f64,
    /// Room left for a hash that spreads shards unevenly (default 1.25).
    pub skew: f64,
}

impl Default for SpreadPolicy {
    fn default() -> Self {
        SpreadPolicy {
            writes_per_shard: 1.5,
            key_budget: 500.0,
            skew: 1.25,
        }
    }
}

impl Buckets {
    /// One bucket: every item under the home key.
    pub const ONE: Buckets = Buckets(1);
    /// The most buckets a group can have.
    pub const MAX: u16 = 1024;

    /// `n` buckets; a power of two from 1 to [`Buckets::MAX`].
    pub fn new(n: u16) -> Result<Self> {
        if n == 0 || n > Self::MAX || !n.is_power_of_two() {
            return Err(StateError::validation(
                "bucket count",
                format!("{n}: a power of two from 1 to {}", Self::MAX),
            ));
        }
        Ok(Buckets(n))
    }

    /// How many.
    pub fn count(self) -> u16 {
        self.0
    }

    /// The fewest buckets (a power of two) that keep every key of a group of
    /// `shards` shards within the policy's budget.
    pub fn for_shards(shards: usize, policy: &SpreadPolicy) -> Self {
        let needed = shards as f64 * policy.writes_per_shard * policy.skew / policy.key_budget;
        let n = (needed.ceil().max(1.0) as u64)
            .next_power_of_two()
            .min(u64::from(Self::MAX));
        Buckets(n as u16)
    }

    /// The bucket of an item spread by `key` (a shard id, or an event id
    /// where no shard is named).
    pub fn of(self, key: &str) -> u16 {
        (mix(fnv1a(key.as_bytes())) % u64::from(self.0)) as u16
    }
}

impl Default for Buckets {
    fn default() -> Self {
        Buckets::ONE
    }
}

impl std::fmt::Display for Buckets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_powers_of_two_up_to_the_maximum_are_bucket_counts() {
        for n in [1, 2, 64, 1024] {
            assert_eq!(Buckets::new(n).unwrap().count(), n);
        }
        for n in [0, 3, 100, 2048] {
            assert!(matches!(
                Buckets::new(n),
                Err(StateError::Validation { .. })
            ));
        }
    }

    #[test]
    fn the_hash_is_the_stored_layout_and_never_changes() {
        // Items already written are found by these values: a change here
        // would lose every spread group's state.
        let b = Buckets::new(1024).unwrap();
        assert_eq!(
            [
                b.of("shardId-000000000000"),
                b.of("shardId-000000000001"),
                b.of("")
            ],
            [652, 188, 155]
        );
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(Buckets::ONE.of("anything"), 0);
    }

    #[test]
    fn sequential_shard_ids_spread_evenly() {
        let b = Buckets::new(64).unwrap();
        let mut counts = [0u32; 64];
        for i in 0..20_000 {
            counts[b.of(&format!("shardId-{i:012}")) as usize] += 1;
        }
        let max = *counts.iter().max().unwrap();
        // A mean of 312.5; an even hash stays well within the policy's skew.
        assert!(max < 375, "{counts:?}");
    }

    #[test]
    fn the_count_follows_the_shards() {
        let p = SpreadPolicy::default();
        assert_eq!(Buckets::for_shards(0, &p), Buckets::ONE);
        assert_eq!(Buckets::for_shards(200, &p).count(), 1);
        assert_eq!(Buckets::for_shards(1_000, &p).count(), 4);
        assert_eq!(Buckets::for_shards(10_000, &p).count(), 64);
        assert_eq!(Buckets::for_shards(20_000, &p).count(), 128);
        assert_eq!(Buckets::for_shards(10_000_000, &p).count(), Buckets::MAX);
    }
}
