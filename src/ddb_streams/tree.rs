//! The shard tree, pure: which shards appeared or went away since the last
//! discovery, and which shards to read now (a child only once its parent is
//! read to its end). Ordering parents before children is
//! [`crate::state::ShardSpec::parents_first`], shared with Kinesis discovery.

use crate::state::{ShardId, ShardSpec};
use std::collections::BTreeSet;

/// What changed between the shards known and the shards listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardDiff {
    /// Listed, not known before.
    pub new: Vec<ShardId>,
    /// Known, no longer listed (trimmed after the stream's 24-hour
    /// retention, or the stream is gone).
    pub removed: Vec<ShardId>,
}

/// Compares the known shards with the listed ones.
pub fn diff_shards<'a>(
    known: impl IntoIterator<Item = &'a ShardId>,
    listed: &[ShardSpec],
) -> ShardDiff {
    let known: BTreeSet<&ShardId> = known.into_iter().collect();
    let listed_ids: BTreeSet<&ShardId> = listed.iter().map(|s| &s.shard_id).collect();
    ShardDiff {
        new: listed_ids
            .difference(&known)
            .map(|id| (*id).clone())
            .collect(),
        removed: known
            .difference(&listed_ids)
            .map(|id| (*id).clone())
            .collect(),
    }
}

/// The shards to read now, in the order given (pass it parents first): each
/// one not finished (`finished` gives `Some(false)`) whose parents are all
/// finished or unknown (`None`: trimmed away, or never seen). A shard is
/// finished when it is read to its end and everything read is committed.
pub fn readable(order: &[ShardSpec], finished: impl Fn(&ShardId) -> Option<bool>) -> Vec<ShardId> {
    order
        .iter()
        .filter(|s| finished(&s.shard_id) == Some(false))
        .filter(|s| s.parents.iter().all(|p| finished(p) != Some(false)))
        .map(|s| s.shard_id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spec(id: &str, parent: Option<&str>) -> ShardSpec {
        let parents: Vec<&str> = parent.into_iter().collect();
        ShardSpec::new(id).unwrap().with_parents(&parents).unwrap()
    }

    fn id(s: &str) -> ShardId {
        ShardId::new(s).unwrap()
    }

    #[test]
    fn new_and_removed_shards() {
        let known = [id("a"), id("b")];
        let diff = diff_shards(&known, &[spec("b", None), spec("c", Some("b"))]);
        assert_eq!(diff.new, vec![id("c")]);
        assert_eq!(diff.removed, vec![id("a")]);
    }

    #[test]
    fn children_wait_for_their_parent() {
        let order = [
            spec("p", None),
            spec("c1", Some("p")),
            spec("c2", Some("p")),
            spec("orphan", Some("trimmed")),
        ];
        let mut state: BTreeMap<ShardId, bool> =
            order.iter().map(|s| (s.shard_id.clone(), false)).collect();
        let read = |state: &BTreeMap<ShardId, bool>| readable(&order, |s| state.get(s).copied());
        assert_eq!(read(&state), vec![id("p"), id("orphan")]);
        state.insert(id("p"), true);
        assert_eq!(read(&state), vec![id("c1"), id("c2"), id("orphan")]);
    }
}
