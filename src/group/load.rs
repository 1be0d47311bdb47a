//! Balancing by load: once lease counts are balanced and nothing is in
//! transit, the rebalancer moves load, not counts. Pure, no I/O.
//!
//! - A shard's load is what its holder's heartbeat says its handler was busy
//!   on it (thousandths of the time, [`ConsumerInfo::loads`]); a consumer's
//!   load is the sum over the shards it holds.
//! - Load moves only while every held shard's load is known from its
//!   holder (a shard just handed over is measured by its new holder first),
//!   and the busiest consumer carries more than [`TRIGGER`] times the mean
//!   and is busy at least [`LEAST_WORTH_MOVING`] (mostly idle consumers
//!   differ by noise).
//! - One exchange a tick: a shard of the busiest consumer for a lighter one
//!   (or none, where the busiest holds more shards) of the least busy, so
//!   counts stay within the count quotas; the pair that leaves the lower
//!   of the two the busier is chosen, and only if that lowers the busiest
//!   by [`GAIN`] of the mean at least (hysteresis: small gains do not flap).
//! - The receiver never goes over its capacity (its handler busy all the
//!   time: 1000).
//!
//! [`ConsumerInfo::loads`]: crate::state::ConsumerInfo::loads

use crate::group::Action;
use crate::state::{ConsumerId, GroupSnapshot, ShardState};
use std::collections::{BTreeMap, BTreeSet};

/// Load moves once the busiest consumer carries more than this times the
/// mean.
pub const TRIGGER: f64 = 1.15;

/// The least a move lowers the busiest consumer's load by, as a share of
/// the mean.
pub const GAIN: f64 = 0.1;

/// A consumer's capacity: its handler busy all the time.
const CAPACITY: u64 = 1000;

/// Below this load (a tenth of the time) the busiest consumer is not worth
/// a move: differences between mostly idle consumers are noise.
pub const LEAST_WORTH_MOVING: u64 = 100;

/// The claims of one load exchange, if one is worth it (see the module
/// documentation). `holdings`: the shards each live consumer holds, none
/// in transit; `beating`: consumers seen alive (a lease goes only to them);
/// `moves_left`: claims allowed this tick.
pub(crate) fn plan_load_moves(
    snapshot: &GroupSnapshot,
    holdings: &BTreeMap<&ConsumerId, Vec<&ShardState>>,
    beating: &BTreeSet<ConsumerId>,
    moves_left: usize,
) -> Vec<Action> {
    if holdings.len() < 2 || moves_left < 2 {
        return Vec::new();
    }
    let reported: BTreeMap<&ConsumerId, _> = snapshot
        .consumers
        .iter()
        .map(|c| (c.id(), &c.info.loads))
        .collect();
    // Every held shard's load, from its holder; else nothing moves.
    let mut loads: BTreeMap<&ConsumerId, Vec<(&ShardState, u64)>> = BTreeMap::new();
    for (consumer, held) in holdings {
        let Some(report) = reported.get(consumer) else {
            return Vec::new();
        };
        let mut of = Vec::with_capacity(held.len());
        for shard in held {
            let Some(load) = report.get(&shard.shard_id) else {
                return Vec::new();
            };
            of.push((*shard, u64::from(*load)));
        }
        loads.insert(consumer, of);
    }
    let total = |c: &ConsumerId| loads[c].iter().map(|(_, l)| l).sum::<u64>();
    let sum: u64 = loads.keys().map(|c| total(c)).sum();
    if sum == 0 {
        return Vec::new();
    }
    let mean = sum as f64 / loads.len() as f64;
    let by_load =
        |a: &&&ConsumerId, b: &&&ConsumerId| total(a).cmp(&total(b)).then_with(|| b.cmp(a));
    let (Some(donor), Some(receiver)) = (
        loads.keys().max_by(by_load).copied(),
        loads.keys().min_by(by_load).copied(),
    ) else {
        return Vec::new();
    };
    let (d, r) = (total(donor), total(receiver));
    if donor == receiver
        || d < LEAST_WORTH_MOVING
        || (d as f64) <= TRIGGER * mean
        || !beating.contains(donor)
        || !beating.contains(receiver)
    {
        return Vec::new();
    }
    // Candidates: a donor's shard for one of the receiver's, or for none
    // where the donor holds more shards.
    let one_way = loads[donor].len() > loads[receiver].len();
    let theirs = loads[receiver]
        .iter()
        .map(|(s, l)| (Some(*s), *l))
        .chain(one_way.then_some((None, 0)));
    let mut best: Option<(u64, &ShardState, Option<&ShardState>)> = None;
    for (back, back_load) in theirs {
        for (hot, hot_load) in &loads[donor] {
            if *hot_load <= back_load {
                continue;
            }
            let moved = hot_load - back_load;
            let (d_new, r_new) = (d - moved, r + moved);
            if r_new > CAPACITY.max(r) {
                continue;
            }
            let worst = d_new.max(r_new);
            if best.is_none_or(|(w, ..)| worst < w) {
                best = Some((worst, hot, back));
            }
        }
    }
    let Some((worst, hot, back)) = best else {
        return Vec::new();
    };
    if (d as f64) - (worst as f64) < GAIN * mean {
        return Vec::new();
    }
    let claim = |shard: &ShardState, from: &ConsumerId, to: &ConsumerId| Action::Claim {
        shard: shard.shard_id.clone(),
        from: from.clone(),
        to: to.clone(),
        counter: shard.counter,
    };
    let mut moves = vec![claim(hot, donor, receiver)];
    if let Some(back) = back {
        moves.push(claim(back, receiver, donor));
    }
    moves
}
