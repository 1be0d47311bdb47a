//! How long values went unchanged, as one observer saw them on its own
//! monotonic clock: the rebalancer's and the reaper's sightings, and a
//! process waiting out leases another process of its id may hold.

use crate::state::EpochMillis;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Duration;

/// First sightings of one kind of value, by key: the value, when it was
/// first seen, and whether it was seen to change (or to appear after the
/// first look).
#[derive(Debug)]
pub(crate) struct FirstSeen<K, V> {
    first_seen: HashMap<K, (V, EpochMillis, bool)>,
    looked: bool,
}

impl<K, V> Default for FirstSeen<K, V> {
    fn default() -> Self {
        FirstSeen {
            first_seen: HashMap::new(),
            looked: false,
        }
    }
}

impl<K: Hash + Eq + Clone + Ord, V: PartialEq> FirstSeen<K, V> {
    /// Records the values seen at `at`; returns each one's age. Keys not
    /// seen now are forgotten.
    pub(crate) fn observe(
        &mut self,
        seen: impl Iterator<Item = (K, V)>,
        at: EpochMillis,
    ) -> BTreeMap<K, Duration> {
        let mut kept = HashMap::new();
        let mut ages = BTreeMap::new();
        for (key, value) in seen {
            let (since, changed) = match self.first_seen.remove(&key) {
                Some((old, since, changed)) if old == value => (since, changed),
                Some(_) => (at, true),
                None => (at, self.looked),
            };
            let age = Duration::from_millis(u64::try_from(at - since).unwrap_or(0));
            ages.insert(key.clone(), age);
            kept.insert(key, (value, since, changed));
        }
        self.first_seen = kept;
        self.looked = true;
        ages
    }

    /// The keys whose value was seen to change.
    pub(crate) fn changed(&self) -> impl Iterator<Item = &K> {
        self.first_seen
            .iter()
            .filter(|(_, (_, _, changed))| *changed)
            .map(|(k, _)| k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ShardId;

    fn id(s: &str) -> ShardId {
        ShardId::new(s).unwrap()
    }

    #[test]
    fn a_value_ages_while_unchanged_and_is_young_again_once_it_changes() {
        let mut seen: FirstSeen<ShardId, u64> = FirstSeen::default();
        let first = seen.observe([(id("a"), 1)].into_iter(), 1_000);
        assert_eq!(first[&id("a")], Duration::ZERO);
        let later = seen.observe([(id("a"), 1)].into_iter(), 8_000);
        assert_eq!(later[&id("a")], Duration::from_secs(7));
        let changed = seen.observe([(id("a"), 2)].into_iter(), 9_000);
        assert_eq!(changed[&id("a")], Duration::ZERO);
    }

    #[test]
    fn what_is_no_longer_seen_is_forgotten() {
        let mut seen: FirstSeen<ShardId, u64> = FirstSeen::default();
        seen.observe([(id("a"), 1)].into_iter(), 0);
        seen.observe(std::iter::empty(), 5_000);
        let back = seen.observe([(id("a"), 1)].into_iter(), 20_000);
        assert_eq!(back[&id("a")], Duration::ZERO);
    }

    #[test]
    fn a_value_seen_changing_or_appearing_after_the_first_look_is_known_to_change() {
        let mut seen: FirstSeen<ShardId, u64> = FirstSeen::default();
        seen.observe([(id("a"), 1), (id("b"), 1)].into_iter(), 0);
        assert_eq!(
            seen.changed().count(),
            0,
            "nothing seen change at the first look"
        );
        seen.observe(
            [(id("a"), 2), (id("b"), 1), (id("c"), 1)].into_iter(),
            1_000,
        );
        let mut changed: Vec<_> = seen.changed().cloned().collect();
        changed.sort();
        assert_eq!(changed, [id("a"), id("c")]);
    }
}
