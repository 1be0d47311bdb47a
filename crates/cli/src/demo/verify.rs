//! The demo's verification, computed from what was actually produced,
//! processed and checkpointed (pure).

use super::history::History;
use serde::Serialize;
use shardkeeper::state::ShardId;
use shardkeeper::worker_events::WorkerEvent;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Instant;

/// What the checks found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records produced.
    pub produced: usize,
    /// Distinct records processed.
    pub processed: usize,
    /// Records processed more than once (allowed: after a lost lease, the
    /// records after its last accepted checkpoint run again).
    pub duplicates: usize,
    /// Records produced and never processed (must be 0).
    pub lost: usize,
    /// Records processed before an earlier record of the same key was
    /// processed for the first time (must be 0).
    pub order_violations: usize,
    /// Shards held by two consumers at once, both with accepted
    /// checkpoints in the overlap (must be empty).
    pub double_owned: Vec<ShardId>,
    /// Shards whose accepted checkpoints moved backwards (must be empty).
    pub checkpoint_regressions: Vec<ShardId>,
}

impl Verification {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.order_violations == 0
            && self.double_owned.is_empty()
            && self.checkpoint_regressions.is_empty()
    }
}

/// One consumer's holding of one shard: from when it learned it held the
/// lease to the send time of its last accepted checkpoint.
#[derive(Debug, Clone, Copy)]
struct Holding {
    start: Instant,
    end: Instant,
}

fn holdings(history: &History) -> BTreeMap<ShardId, Vec<(String, Holding)>> {
    let mut open: HashMap<(String, ShardId), Holding> = HashMap::new();
    let mut done: BTreeMap<ShardId, Vec<(String, Holding)>> = BTreeMap::new();
    let mut close = |consumer: &str, shard: &ShardId, h: Holding| {
        done.entry(shard.clone())
            .or_default()
            .push((consumer.to_owned(), h));
    };
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained { shard, at, .. } => {
                let key = (consumer.clone(), shard.clone());
                if let Some(h) = open.insert(
                    key,
                    Holding {
                        start: *at,
                        end: *at,
                    },
                ) {
                    close(consumer, shard, h);
                }
            }
            WorkerEvent::Checkpointed { shard, sent, .. } => {
                if let Some(h) = open.get_mut(&(consumer.clone(), shard.clone())) {
                    h.end = h.end.max(*sent);
                }
            }
            WorkerEvent::Stopped { shard, .. } => {
                if let Some(h) = open.remove(&(consumer.clone(), shard.clone())) {
                    close(consumer, shard, h);
                }
            }
        }
    }
    for ((consumer, shard), h) in open {
        close(&consumer, &shard, h);
    }
    done
}

fn overlapping(holders: &[(String, Holding)]) -> bool {
    holders.iter().enumerate().any(|(i, (a, ha))| {
        holders[i + 1..]
            .iter()
            .any(|(b, hb)| a != b && ha.start < hb.end && hb.start < ha.end)
    })
}

fn regressed(history: &History) -> Vec<ShardId> {
    let mut accepted: BTreeMap<&ShardId, Vec<(Instant, String)>> = BTreeMap::new();
    for (_, event) in &history.events {
        if let WorkerEvent::Checkpointed {
            shard,
            checkpoint,
            sent,
        } = event
        {
            accepted
                .entry(shard)
                .or_default()
                .push((*sent, checkpoint.order_key()));
        }
    }
    accepted
        .into_iter()
        .filter_map(|(shard, mut cps)| {
            cps.sort_by_key(|(sent, _)| *sent);
            cps.windows(2)
                .any(|w| w[1].1 < w[0].1)
                .then(|| shard.clone())
        })
        .collect()
}

/// Checks `history`. See [`Verification`] for what each field means.
pub fn verify(history: &History) -> Verification {
    let produced: HashSet<(&str, u64)> = history
        .produced
        .iter()
        .map(|p| (p.key.as_str(), p.n))
        .collect();
    let mut seen: HashSet<(&str, u64)> = HashSet::new();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    let mut duplicates = 0;
    let mut order_violations = 0;
    for p in &history.processed {
        if !seen.insert((p.key.as_str(), p.n)) {
            duplicates += 1;
            continue;
        }
        let top = highest.entry(p.key.as_str()).or_insert(p.n);
        if p.n < *top {
            order_violations += 1;
        }
        *top = (*top).max(p.n);
    }
    let double_owned: BTreeSet<ShardId> = holdings(history)
        .into_iter()
        .filter(|(_, holders)| overlapping(holders))
        .map(|(shard, _)| shard)
        .collect();
    Verification {
        produced: produced.len(),
        processed: seen.len(),
        duplicates,
        lost: produced.difference(&seen).count(),
        order_violations,
        double_owned: double_owned.into_iter().collect(),
        checkpoint_regressions: regressed(history),
    }
}
