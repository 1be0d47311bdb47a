//! The history checker: what a run must never do, computed from what was
//! actually produced, processed and checkpointed.

mod calls;

pub use calls::{Call, Intrusion, Overlap};

use calls::{calls_by_shard, intrusions, overlaps};
use shardkeeper::state::instant_now;

use super::{History, Processed, Span};
use serde::Serialize;
use shardkeeper::consumer::{StopReason, WorkerEvent};
use shardkeeper::state::{Checkpoint, ShardId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

/// What the checks found. [`Verification::passed`] is the verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records produced.
    pub produced: usize,
    /// Distinct records processed.
    pub processed: usize,
    /// Records processed more than once. Allowed only after a lease change,
    /// for records the new holder's starting checkpoint did not cover (those
    /// after the last accepted checkpoint of the holder before).
    pub duplicates: usize,
    /// Duplicates that the new holder's starting checkpoint covered, or
    /// within one holding (must be 0).
    pub unjustified_duplicates: usize,
    /// Records produced and never processed (must be 0).
    pub lost: usize,
    /// Records processed before an earlier record of the same key was
    /// processed for the first time (must be 0).
    pub order_violations: usize,
    /// Shards held by two consumers at once, both with accepted
    /// checkpoints in the overlap (must be empty).
    pub double_owned: Vec<ShardId>,
    /// Shards whose accepted checkpoints moved backwards, other than across
    /// an operator's move back ([`History::moved_back`]; must be empty).
    pub checkpoint_regressions: Vec<ShardId>,
    /// Shards with a record processed before every parent was read to its
    /// end (must be empty).
    pub children_before_parents: Vec<ShardId>,
    /// Records whose processing ended after the lease its batch ran under
    /// had run out on the worker's own clock (the lease expiry reported
    /// when the batch started; must be 0).
    pub past_lease_expiry: usize,
    /// Handler calls of two consumers on one shard whose intervals
    /// intersect: two consumers running the handler on one shard at once
    /// (calls that only touch at an instant do not; must be empty).
    pub overlaps: Vec<Overlap>,
    /// Handler calls made while, by the worker events, another consumer
    /// held the shard's lease and had started processing it (see
    /// [`Intrusion`] for the rule; must be empty).
    pub intrusions: Vec<Intrusion>,
}

impl Verification {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.unjustified_duplicates == 0
            && self.order_violations == 0
            && self.double_owned.is_empty()
            && self.checkpoint_regressions.is_empty()
            && self.children_before_parents.is_empty()
            && self.past_lease_expiry == 0
            && self.overlaps.is_empty()
            && self.intrusions.is_empty()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One consumer's holding of one shard: from when it learned it held the
/// lease (starting at `position`) to the send time of its last accepted
/// checkpoint; `stopped` when it ended.
#[derive(Debug, Clone)]
struct Holding {
    consumer: String,
    position: Option<Checkpoint>,
    start: Instant,
    end: Instant,
    stopped: Option<Instant>,
}

fn holdings(history: &History) -> BTreeMap<ShardId, Vec<Holding>> {
    let mut open: HashMap<(&str, &ShardId), Holding> = HashMap::new();
    let mut done: BTreeMap<ShardId, Vec<Holding>> = BTreeMap::new();
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained {
                shard,
                position,
                at,
            } => {
                let h = Holding {
                    consumer: consumer.clone(),
                    position: position.clone(),
                    start: *at,
                    end: *at,
                    stopped: None,
                };
                if let Some(h) = open.insert((consumer, shard), h) {
                    done.entry(shard.clone()).or_default().push(h);
                }
            }
            WorkerEvent::Checkpointed { shard, sent, .. } => {
                if let Some(h) = open.get_mut(&(consumer.as_str(), shard)) {
                    h.end = h.end.max(*sent);
                }
            }
            WorkerEvent::Stopped { shard, at, .. } => {
                if let Some(mut h) = open.remove(&(consumer.as_str(), shard)) {
                    h.stopped = Some(*at);
                    done.entry(shard.clone()).or_default().push(h);
                }
            }
            WorkerEvent::Processing { .. } => {}
        }
    }
    for ((_, shard), h) in open {
        done.entry(shard.clone()).or_default().push(h);
    }
    for hs in done.values_mut() {
        hs.sort_by_key(|h| h.start);
    }
    done
}

fn overlapping(holders: &[Holding]) -> bool {
    holders.iter().enumerate().any(|(i, a)| {
        holders[i + 1..]
            .iter()
            .any(|b| a.consumer != b.consumer && a.start < b.end && b.start < a.end)
    })
}

/// Shards whose accepted checkpoints went back, other than across an
/// operator's move back (a window that meets the two checkpoints' sends).
fn regressed(history: &History) -> Vec<ShardId> {
    let moved_between = |a: Instant, b: Instant| {
        history
            .moved_back
            .iter()
            .any(|(start, end)| *start <= b && *end >= a)
    };
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
                .any(|w| w[1].1 < w[0].1 && !moved_between(w[0].0, w[1].0))
                .then(|| shard.clone())
        })
        .collect()
}

/// The holding a processing happened in: the last one of its consumer on
/// its shard that started before it.
fn holding_of<'a>(
    holdings: &'a BTreeMap<ShardId, Vec<Holding>>,
    p: &Processed,
) -> Option<&'a Holding> {
    holdings
        .get(&p.shard)?
        .iter()
        .rev()
        .find(|h| h.consumer == p.consumer && h.start <= p.at)
}

/// A repeat of `first` in `again` is justified when it came in a later
/// holding whose starting checkpoint does not cover the record (the holder
/// before stopped before checkpointing it). Without worker events there is
/// nothing to judge by, and a repeat counts as justified.
fn justified(
    holdings: &BTreeMap<ShardId, Vec<Holding>>,
    first: &Processed,
    again: &Processed,
) -> bool {
    let (Some(a), Some(b)) = (holding_of(holdings, first), holding_of(holdings, again)) else {
        return holdings.is_empty();
    };
    if std::ptr::eq(a, b) {
        return false;
    }
    !b.position
        .as_ref()
        .is_some_and(|cp| cp.covers(&again.sequence, again.sub_sequence))
}

/// When each shard was completed (read to its end): the earliest
/// completion not followed, in the same holding, by that worker's `Lost`
/// for the shard (its depleting write was refused).
fn completions(history: &History) -> HashMap<&ShardId, Instant> {
    let mut announced: Vec<(&str, &ShardId, Instant)> = Vec::new();
    // When each consumer last gained each shard: a loss takes back only a
    // completion announced in the holding it ends, not one of an earlier
    // holding (a parent completed, reopened by a rewind, then lost).
    let mut holding: HashMap<(&str, &ShardId), Instant> = HashMap::new();
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained { shard, at, .. } => {
                holding.insert((consumer, shard), *at);
            }
            WorkerEvent::Stopped {
                shard,
                why: StopReason::Completed,
                at,
            } => announced.push((consumer, shard, *at)),
            WorkerEvent::Stopped {
                shard,
                why: StopReason::Lost,
                ..
            } => {
                let since = holding.get(&(consumer.as_str(), shard)).copied();
                announced.retain(|(c, s, at)| {
                    !(c == consumer && s == &shard && since.is_none_or(|g| *at >= g))
                })
            }
            _ => {}
        }
    }
    let mut out: HashMap<&ShardId, Instant> = HashMap::new();
    for (_, shard, at) in announced {
        let t = out.entry(shard).or_insert(at);
        *t = (*t).min(at);
    }
    out
}

/// For each record of `history.processed`, in order, the lease expiry its
/// batch started under (on its worker's own clock): that of the last
/// `Processing` event of its consumer and shard before it; `None` without
/// one.
pub fn lease_expiries(history: &History) -> Vec<Option<Instant>> {
    let mut bounds: HashMap<(&str, &ShardId), Vec<(Instant, Instant)>> = HashMap::new();
    for (consumer, event) in &history.events {
        if let WorkerEvent::Processing {
            shard,
            at,
            lease_expiry,
        } = event
        {
            bounds
                .entry((consumer.as_str(), shard))
                .or_default()
                .push((*at, *lease_expiry));
        }
    }
    history
        .processed
        .iter()
        .map(|p| {
            bounds
                .get(&(p.consumer.as_str(), &p.shard))
                .and_then(|b| b.iter().rev().find(|(at, _)| *at <= p.at))
                .map(|(_, expiry)| *expiry)
        })
        .collect()
}

/// Records processed after the lease their batch started under ran out.
fn past_lease_expiry(history: &History) -> usize {
    history
        .processed
        .iter()
        .zip(lease_expiries(history))
        .filter(|(p, expiry)| expiry.is_some_and(|e| p.at > e))
        .count()
}

/// Checks `history`. See [`Verification`] for what each field means.
pub fn check(history: &History) -> Verification {
    let holdings = holdings(history);
    let produced: HashSet<(&str, u64)> = history
        .produced
        .iter()
        .map(|p| (p.key.as_str(), p.n))
        .collect();
    let mut first: HashMap<(&str, u64), &Processed> = HashMap::new();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    let (mut duplicates, mut unjustified, mut order_violations) = (0, 0, 0);
    for p in &history.processed {
        if let Some(before) = first.get(&(p.key.as_str(), p.n)) {
            duplicates += 1;
            if !justified(&holdings, before, p) {
                unjustified += 1;
            }
            continue;
        }
        first.insert((p.key.as_str(), p.n), p);
        let top = highest.entry(p.key.as_str()).or_insert(p.n);
        if p.n < *top {
            order_violations += 1;
        }
        *top = (*top).max(p.n);
    }
    let calls = calls_by_shard(history);
    let origin = history.origin().unwrap_or_else(instant_now);
    let completed = completions(history);
    let children_before_parents: BTreeSet<ShardId> = history
        .processed
        .iter()
        .filter(|p| {
            history.parents.get(&p.shard).is_some_and(|parents| {
                parents
                    .iter()
                    .any(|parent| completed.get(parent).is_none_or(|done| p.at < *done))
            })
        })
        .map(|p| p.shard.clone())
        .collect();
    let seen: HashSet<(&str, u64)> = first.keys().copied().collect();
    Verification {
        produced: produced.len(),
        processed: seen.len(),
        duplicates,
        unjustified_duplicates: unjustified,
        lost: produced.difference(&seen).count(),
        order_violations,
        double_owned: holdings
            .into_iter()
            .filter(|(_, holders)| overlapping(holders))
            .map(|(shard, _)| shard)
            .collect(),
        checkpoint_regressions: regressed(history),
        children_before_parents: children_before_parents.into_iter().collect(),
        past_lease_expiry: past_lease_expiry(history),
        overlaps: overlaps(&calls, origin),
        intrusions: intrusions(history, &calls, origin),
    }
}

#[cfg(test)]
mod tests;
