//! The whole group in one read of its home key and its buckets, and who is
//! assigned which shards.

use crate::buckets::Buckets;
use crate::clock::EpochMillis;
use crate::error::Result;
use crate::item::RawItem;
use crate::layout::SK_BUCKETS;
use crate::model::{ConsumerState, EfoState, ShardState, StoredShardPosition, StreamState};
use crate::names::{ConsumerId, EfoName, ShardId};
use crate::schema::{SK_CONSUMER, SK_DDBPOS, SK_EFO, SK_EFOSHARD, SK_OWN, SK_SHARD, SK_STREAM};
use crate::store::{sk_suffix, SkRange, StateStore};

/// The last sort key of the first range an observer reads: past every
/// `OWN#` item, before `PARKED#` (`$` follows `#`).
const OBSERVED_UP_TO: &str = "OWN$";
use std::collections::{BTreeMap, BTreeSet};

/// Which part of the group an observer reads (see
/// [`StateStore::observe_group`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupPart {
    /// The home key: the consumers, the enhanced fan-out pool, the stream
    /// and the layout.
    Home,
    /// The home key and the leased shards.
    Leases,
    /// The home key and every shard: leased, a standalone consumer's, a
    /// DynamoDB Streams reader's positions.
    Group,
}

/// Everything stored for one group on one stream, read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupSnapshot {
    /// When it was read (the store's clock).
    pub taken_at: EpochMillis,
    /// The stream item.
    pub stream: Option<StreamState>,
    /// How many buckets the group's shard items are spread over.
    pub buckets: Buckets,
    /// Registered consumers.
    pub consumers: Vec<ConsumerState>,
    /// The EFO consumer pool.
    pub efo: Vec<EfoState>,
    /// Auto-assigned shards (leases).
    pub shards: Vec<ShardState>,
    /// Standalone consumers' shards.
    pub own_shards: Vec<(ConsumerId, ShardState)>,
    /// Standalone EFO consumers' shards.
    pub efo_shards: Vec<(EfoName, ShardState)>,
    /// DynamoDB Streams positions.
    pub positions: Vec<StoredShardPosition>,
}

impl GroupSnapshot {
    /// The shards that may be leased (or, standalone, read): not depleted,
    /// every parent depleted or gone, in shard id order.
    pub fn available_shards(&self) -> Vec<&ShardState> {
        let by_id: BTreeMap<&ShardId, &ShardState> =
            self.shards.iter().map(|s| (&s.shard_id, s)).collect();
        let mut shards: Vec<&ShardState> = self
            .shards
            .iter()
            .filter(|s| {
                !s.depleted
                    && s.pending_parents.is_empty()
                    && s.parents
                        .iter()
                        .all(|p| by_id.get(p).is_none_or(|ps| ps.depleted))
            })
            .collect();
        shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        shards
    }
}

/// One consumer and the shards assigned to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The consumer.
    pub consumer: ConsumerState,
    /// Its shards, sorted.
    pub shards: Vec<ShardId>,
}

fn split_scope(rest: &str) -> Option<&str> {
    rest.split_once('#').map(|(owner, _)| owner)
}

impl StateStore {
    /// Reads the whole group: one strongly consistent Query (paginated) of
    /// the home key and of each bucket, several at once.
    pub async fn load_group(&self) -> Result<GroupSnapshot> {
        let buckets = self.layout().buckets().await?;
        let items = self.query_all(buckets, "", true).await?;
        self.snapshot_of(buckets, &items)
    }

    /// The group as an observer (the rebalancer, the reaper) reads it each
    /// tick: eventually consistent (half the read units of
    /// [`StateStore::load_group`]; every action an observer takes is
    /// conditioned on the state it saw, and a stale answer can only make
    /// what it saw look younger), `part` of it, and never the items only
    /// the records need (event-source-mapped batches, failed attempts,
    /// parked records, whose number and size are the records', not the
    /// group's).
    pub async fn observe_group(&self, part: GroupPart) -> Result<GroupSnapshot> {
        self.read_group(part, false).await
    }

    /// `part` of the group as [`StateStore::observe_group`] reads it, but
    /// strongly consistent when `consistent` (at twice the read units).
    pub(crate) async fn read_group(
        &self,
        part: GroupPart,
        consistent: bool,
    ) -> Result<GroupSnapshot> {
        let buckets = self.layout().buckets().await?;
        let home = self.layout().partition_key().to_owned();
        // In sort-key order: BATCH# < BUCKETS < CONSUMER# < DDBPOS# < EFO# <
        // EFOSHARD# < OWN# < PARKED# < RECORD# < SHARD# < STREAM.
        let group_items = SkRange::Between(SK_BUCKETS, OBSERVED_UP_TO);
        let mut reads = Vec::new();
        if buckets == Buckets::ONE {
            // One key holds everything.
            let tail = match part {
                GroupPart::Home => SK_STREAM,
                GroupPart::Leases | GroupPart::Group => SK_SHARD,
            };
            reads.push((home, group_items.clone()));
            reads.push((
                self.layout().partition_key().to_owned(),
                SkRange::From(tail),
            ));
        } else {
            // The home key holds the group's own items.
            reads.push((home.clone(), group_items.clone()));
            reads.push((home, SkRange::From(SK_SHARD)));
            for b in 0..buckets.count() {
                if part == GroupPart::Home {
                    break;
                }
                let pk = self.layout().bucket_key(buckets, b);
                if part == GroupPart::Group {
                    reads.push((pk.clone(), group_items.clone()));
                }
                reads.push((pk, SkRange::From(SK_SHARD)));
            }
        }
        let items = self.query_keys(reads, consistent).await?;
        self.snapshot_of(buckets, &items)
    }

    /// The snapshot `items` (read from the group laid out over `buckets`) make.
    fn snapshot_of(&self, buckets: Buckets, items: &[RawItem]) -> Result<GroupSnapshot> {
        let mut snap = GroupSnapshot {
            taken_at: self.now(),
            buckets,
            ..GroupSnapshot::default()
        };
        for item in items {
            if sk_suffix(item, SK_BUCKETS) == Some("") {
                snap.buckets = self.note_layout(item)?;
            } else if sk_suffix(item, SK_STREAM) == Some("") {
                snap.stream = Some(StreamState::from_item(item)?);
            } else if let Some(id) = sk_suffix(item, SK_CONSUMER) {
                snap.consumers.push(ConsumerState::from_item(id, item)?);
            } else if let Some(rest) = sk_suffix(item, SK_EFOSHARD) {
                if let Some(name) = split_scope(rest) {
                    snap.efo_shards
                        .push((EfoName::new(name)?, ShardState::from_item(item)?));
                }
            } else if let Some(name) = sk_suffix(item, SK_EFO) {
                snap.efo.push(EfoState::from_item(name, item)?);
            } else if sk_suffix(item, SK_SHARD).is_some() {
                snap.shards.push(ShardState::from_item(item)?);
            } else if let Some(rest) = sk_suffix(item, SK_OWN) {
                if let Some(owner) = split_scope(rest) {
                    snap.own_shards
                        .push((ConsumerId::new(owner)?, ShardState::from_item(item)?));
                }
            } else if sk_suffix(item, SK_DDBPOS).is_some() {
                snap.positions.push(StoredShardPosition::from_item(item)?);
            }
        }
        Ok(snap)
    }

    /// Every registered consumer with the shards assigned to it, from one read
    /// of the group: shard leases (auto assignment), a standalone consumer's own
    /// shards, and the shards of the EFO consumer it holds (standalone EFO).
    pub async fn shard_assignments(&self) -> Result<BTreeMap<ConsumerId, Assignment>> {
        Ok(self.load_group().await?.assignments())
    }
}

impl GroupSnapshot {
    /// Every registered consumer with its sorted shard ids (see [`StateStore::shard_assignments`]).
    pub fn assignments(&self) -> BTreeMap<ConsumerId, Assignment> {
        let mut owned: BTreeMap<&ConsumerId, BTreeSet<&ShardId>> = self
            .consumers
            .iter()
            .map(|c| (c.id(), BTreeSet::new()))
            .collect();
        for shard in &self.shards {
            if let Some(set) = shard.owner.as_ref().and_then(|o| owned.get_mut(o)) {
                set.insert(&shard.shard_id);
            }
        }
        for (owner, shard) in &self.own_shards {
            if let Some(set) = owned.get_mut(owner) {
                set.insert(&shard.shard_id);
            }
        }
        let holders: BTreeMap<&EfoName, &ConsumerId> = self
            .efo
            .iter()
            .filter_map(|e| e.used_by.as_ref().map(|c| (&e.name, c)))
            .collect();
        for (efo, shard) in &self.efo_shards {
            if let Some(set) = holders.get(efo).and_then(|c| owned.get_mut(*c)) {
                set.insert(&shard.shard_id);
            }
        }
        self.consumers
            .iter()
            .map(|c| {
                let shards = owned
                    .get(c.id())
                    .map(|s| s.iter().map(|id| (*id).clone()).collect())
                    .unwrap_or_default();
                (
                    c.id().clone(),
                    Assignment {
                        consumer: c.clone(),
                        shards,
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SK_BATCH;
    use crate::records::{SK_ATTEMPTS, SK_PARKED};

    /// The observers' two ranges rest on the order of the sort-key prefixes.
    #[test]
    fn the_kinds_an_observer_skips_lie_outside_its_two_ranges() {
        let read = [
            SK_BUCKETS,
            SK_CONSUMER,
            SK_DDBPOS,
            SK_EFO,
            SK_EFOSHARD,
            SK_OWN,
        ];
        for kind in read {
            assert!((SK_BUCKETS..OBSERVED_UP_TO).contains(&kind), "{kind}");
        }
        assert!(format!("{SK_OWN}~").as_str() < OBSERVED_UP_TO);
        for kind in [SK_SHARD, SK_STREAM] {
            assert!(kind >= SK_SHARD, "{kind}");
        }
        for skipped in [SK_BATCH, SK_PARKED, SK_ATTEMPTS] {
            let in_first = (SK_BUCKETS..=OBSERVED_UP_TO).contains(&skipped);
            assert!(!in_first && skipped < SK_SHARD, "{skipped}");
        }
    }
}
