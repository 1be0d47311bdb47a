//! The lease rebalancer's planner: pure, no I/O.
//!
//! Time enters only as [`Ages`], how long each lease, heartbeat and claim
//! has gone unchanged as the rebalancer observed it: a lease is held while
//! its owner renewed it within the lease term, a consumer is live while it
//! heartbeated within the heartbeat timeout. Stored wall-clock times are
//! never compared with the rebalancer's clock.
//!
//! Given a snapshot of the group, it decides which leases to assign, claim,
//! take by force, or whose claims to cancel, so that every live consumer ends
//! with `floor(n/m)` or `ceil(n/m)` of the `n` available shards. Consumers keep
//! the leases they hold up to their quota (sticky); free and expired leases go
//! first to the consumers furthest below quota (an expired lease is not given
//! back to its owner by preference: a live owner renews its leases, so one
//! whose lease expired is not processing it); then leases move off consumers over
//! quota, and off consumers that are not live, by a claim that the owner
//! honours at its next renewal (hand-off).
//!
//! A lease moves only when its holder can no longer be processing under it:
//! it is free, it was released (a hand-off), or it has gone unrenewed for a
//! term as observed. A lease whose owner is no longer registered (it left
//! or was reaped) waits out its term too; a claimed lease the owner neither
//! hands over nor renews for a term goes to its claimant (a forced take),
//! on the renewal seen, so a renewal that lands meanwhile keeps it.

use crate::group::{Action, Ages};
use crate::state::{ConsumerId, GroupSnapshot, ShardId, ShardState, TakeFrom};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How the rebalancer decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebalanceConfig {
    /// The lease term: a lease not renewed for this long (as observed) has
    /// expired; assignments are made for this long.
    pub lease_term: Duration,
    /// A consumer whose heartbeat has not changed for this long (as observed) is not live.
    pub heartbeat_timeout: Duration,
    /// The most claims per tick; `None`: as many as reach balance in one
    /// tick. Free and expired leases (a forced take too) are always given.
    pub max_moves_per_tick: Option<usize>,
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig {
            lease_term: Duration::from_secs(10),
            heartbeat_timeout: Duration::from_secs(15),
            max_moves_per_tick: None,
        }
    }
}

/// The consumers that may hold leases: a heartbeat seen changing less than
/// the timeout ago, active, not draining (a worker at the end of its run:
/// a lease given to it would only move again), not standalone. (The planner
/// also passes over a consumer that let a lease run out, see
/// [`plan_rebalance`].)
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn live_consumers<'a>(
    snapshot: &'a GroupSnapshot,
    ages: &Ages,
    heartbeat_timeout: Duration,
) -> BTreeSet<&'a ConsumerId> {
    snapshot
        .consumers
        .iter()
        .filter(|c| ages.heartbeat(c.id()) < heartbeat_timeout && c.active && !c.info.standalone)
        .filter(|c| !c.info.draining)
        .map(|c| c.id())
        .collect()
}

/// The owner of the shard's lease if it renewed it within `lease_term` (as observed).
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn held_by<'a>(
    shard: &'a ShardState,
    ages: &Ages,
    lease_term: Duration,
) -> Option<&'a ConsumerId> {
    shard
        .owner
        .as_ref()
        .filter(|_| ages.lease(&shard.shard_id) < lease_term)
}

/// The take that gives a free or expired lease away, on the exact state seen.
fn take_stale(shard: &ShardState) -> TakeFrom {
    TakeFrom::Stale {
        counter: shard.counter,
        expires: shard.owner.as_ref().and(shard.expires),
    }
}

/// Children whose pending parent is depleted or gone, and that parent: their
/// depletion was recorded without the child (the repair the rebalancer makes).
fn stranded_children(snapshot: &GroupSnapshot) -> Vec<(&ShardId, &ShardId)> {
    let by_id: BTreeMap<&ShardId, &ShardState> =
        snapshot.shards.iter().map(|s| (&s.shard_id, s)).collect();
    snapshot
        .shards
        .iter()
        .flat_map(|s| s.pending_parents.iter().map(move |p| (&s.shard_id, p)))
        .filter(|(_, p)| by_id.get(p).is_none_or(|ps| ps.depleted))
        .collect()
}

struct Ledger<'a> {
    quota: BTreeMap<&'a ConsumerId, usize>,
    held: BTreeMap<&'a ConsumerId, usize>,
}

impl<'a> Ledger<'a> {
    fn need(&self, c: &ConsumerId) -> usize {
        self.quota[c].saturating_sub(self.held[c])
    }

    /// The consumer furthest below quota (ties: the smallest id) of those
    /// `eligible`.
    fn pick(&self, eligible: impl Fn(&ConsumerId) -> bool) -> Option<&'a ConsumerId> {
        self.quota
            .keys()
            .copied()
            .filter(|c| self.need(c) > 0 && eligible(c))
            .max_by(|a, b| self.need(a).cmp(&self.need(b)).then_with(|| b.cmp(a)))
    }

    fn give(&mut self, c: &'a ConsumerId) {
        *self.held.entry(c).or_default() += 1;
    }
}

/// Plans one rebalancer tick. See the module documentation.
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn plan_rebalance(
    snapshot: &GroupSnapshot,
    ages: &Ages,
    config: &RebalanceConfig,
) -> Vec<Action> {
    // A consumer renews all its leases at every tick: one that let a lease
    // run out (as observed) is likely not ticking, even if its last
    // heartbeat is within the timeout (longer than the term). It is passed
    // over while others are live, so its leases go to them.
    let stalled: BTreeSet<&ConsumerId> = snapshot
        .available_shards()
        .into_iter()
        .filter(|s| ages.lease(&s.shard_id) >= config.lease_term)
        .filter_map(|s| s.owner.as_ref())
        .collect();
    let mut live = live_consumers(snapshot, ages, config.heartbeat_timeout);
    if live.iter().any(|c| !stalled.contains(c)) {
        live.retain(|c| !stalled.contains(c));
    }
    let registered: BTreeSet<&ConsumerId> = snapshot.consumers.iter().map(|c| c.id()).collect();
    let tokens: BTreeMap<&ConsumerId, &str> = snapshot
        .consumers
        .iter()
        .filter_map(|c| Some((c.id(), c.token.as_deref()?)))
        .collect();
    let holder = |c: &ConsumerId| tokens.get(c).map(|t| (*t).to_owned());
    let mut cancels = Vec::new();
    let mut moves = Vec::new();
    let mut assigns = Vec::new();
    let mut moves_left = config.max_moves_per_tick.unwrap_or(usize::MAX);

    for (child, parent) in stranded_children(snapshot) {
        cancels.push(Action::ClearPendingParent {
            shard: child.clone(),
            parent: parent.clone(),
        });
    }

    // Who holds what, counting a claimed lease for its (live) claimant.
    let mut holdings: BTreeMap<&ConsumerId, Vec<&ShardState>> =
        live.iter().map(|c| (*c, Vec::new())).collect();
    let mut in_transit: BTreeSet<&ShardId> = BTreeSet::new();
    let mut free: Vec<&ShardState> = Vec::new();
    let mut orphans: Vec<&ShardState> = Vec::new();
    for shard in snapshot.available_shards() {
        let owner = held_by(shard, ages, config.lease_term);
        match (&shard.claim, &shard.owner) {
            (Some(claim), Some(from)) if live.contains(&claim.by) => {
                holdings.entry(&claim.by).or_default().push(shard);
                in_transit.insert(&shard.shard_id);
                if owner.is_none() {
                    // Neither handed over nor renewed for a term.
                    moves.push(Action::ForceTake {
                        shard: shard.shard_id.clone(),
                        from: from.clone(),
                        to: claim.by.clone(),
                        from_state: TakeFrom::Claimed {
                            counter: shard.counter,
                            expires: shard.expires,
                        },
                        holder: holder(&claim.by),
                    });
                }
                continue;
            }
            (Some(claim), _) if owner.is_some() => cancels.push(Action::CancelClaim {
                shard: shard.shard_id.clone(),
                claimant: claim.by.clone(),
            }),
            _ => {}
        }
        let Some(owner) = owner else {
            free.push(shard);
            continue;
        };
        if !registered.contains(owner) {
            // It left or was reaped, and may still be inside a batch: the
            // lease is free once its term has passed unrenewed.
            continue;
        }
        match holdings.get_mut(owner) {
            Some(held) => held.push(shard),
            None => orphans.push(shard),
        }
    }
    if live.is_empty() {
        return cancels;
    }

    // Quotas: floor(n/m) each, one more for the n mod m consumers holding most.
    let n = holdings.values().map(Vec::len).sum::<usize>() + free.len() + orphans.len();
    let m = live.len();
    let mut by_load: Vec<&ConsumerId> = live.iter().copied().collect();
    by_load.sort_by(|a, b| {
        holdings[b]
            .len()
            .cmp(&holdings[a].len())
            .then_with(|| a.cmp(b))
    });
    let quota: BTreeMap<&ConsumerId, usize> = by_load
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, n / m + usize::from(i < n % m)))
        .collect();

    // Leases over quota move; the ones in transit stay where they are going.
    let mut surplus: Vec<(&ShardState, &ConsumerId)> = Vec::new();
    let mut ledger = Ledger {
        held: BTreeMap::new(),
        quota,
    };
    for (consumer, held) in &holdings {
        let (mut keep, mut staying): (Vec<&ShardState>, Vec<&ShardState>) =
            held.iter().partition(|s| in_transit.contains(&s.shard_id));
        keep.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        staying.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        let room = ledger.quota[consumer].saturating_sub(keep.len());
        let over = staying.split_off(room.min(staying.len()));
        ledger.held.insert(consumer, keep.len() + staying.len());
        surplus.extend(over.into_iter().map(|s| (s, *consumer)));
    }

    for shard in free {
        let Some(to) = ledger.pick(|_| true) else {
            break;
        };
        ledger.give(to);
        assigns.push(Action::Assign {
            shard: shard.shard_id.clone(),
            to: to.clone(),
            from_state: take_stale(shard),
            holder: holder(to),
        });
    }
    let movable = orphans
        .into_iter()
        .map(|s| (s, s.owner.as_ref()))
        .chain(surplus.into_iter().map(|(s, o)| (s, Some(o))));
    for (shard, from) in movable {
        if moves_left == 0 {
            break;
        }
        // A lease is taken from its owner only for a consumer seen alive
        // (see the sightings): one that died just before this observer
        // started looks as fresh as a living one.
        let (Some(from), Some(to)) = (from, ledger.pick(|c| ages.beating.contains(c))) else {
            break;
        };
        ledger.give(to);
        moves_left -= 1;
        moves.push(Action::Claim {
            shard: shard.shard_id.clone(),
            from: from.clone(),
            to: to.clone(),
            counter: shard.counter,
        });
    }
    cancels.into_iter().chain(assigns).chain(moves).collect()
}
