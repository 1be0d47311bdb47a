//! The lease rebalancer's planner: pure, no I/O.
//!
//! Time enters only as [`Ages`], how long each lease, session and claim
//! has gone unchanged as the rebalancer observed it: a consumer is live
//! while it heartbeated within the heartbeat timeout, and its leases are
//! held while its session is younger than the lease term. Stored
//! wall-clock times are never compared with the rebalancer's clock.
//!
//! Given a snapshot of the group, it decides which leases to assign, claim,
//! take by force, or whose claims to cancel, so that every live consumer ends
//! with `floor(n/m)` or `ceil(n/m)` of the `n` available shards. Consumers keep
//! the leases they hold up to their quota (sticky); free and stale leases go
//! first to the consumers furthest below quota; then leases move off
//! consumers over quota, and off consumers that are not live, by a claim
//! that the owner learns of from its next heartbeat and honours (hand-off).
//!
//! Once counts are balanced and no lease is in transit, leases move by load
//! (the handlers' busy time per shard the heartbeats report): one exchange
//! a tick between the busiest and the least busy consumer, counts kept
//! (see `load`).
//!
//! A lease moves only when its holder can no longer be processing under it:
//! it is free, it was released (a hand-off), or its owner's session (its
//! heartbeat, or its absence) and the lease itself have gone unchanged for
//! a term as observed. Such a take is conditioned on the session seen, so
//! a heartbeat that lands meanwhile keeps the lease (see
//! [`TakeFrom`]); a claimed lease goes to its claimant that way too (a
//! forced take).

use crate::group::load::plan_load_moves;
use crate::group::{Action, Ages};
use crate::state::{ConsumerId, GroupSnapshot, SessionSeen, ShardId, ShardState, TakeFrom};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// How the rebalancer decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RebalanceConfig {
    /// The lease term: a session unchanged for this long (as observed) is
    /// stale, and its leases move.
    pub lease_term: Duration,
    /// A consumer whose heartbeat has not changed for this long (as observed) is not live.
    pub heartbeat_timeout: Duration,
    /// The most claims per tick; `None`: as many as reach balance in one
    /// tick. Free and stale leases (a forced take too) are always given.
    pub max_moves_per_tick: Option<usize>,
    /// Once counts are balanced, move leases by the load the heartbeats
    /// report (default `true`; `false`: balance counts only).
    pub balance_load: bool,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl RebalanceConfig {
    /// Sets [`RebalanceConfig::lease_term`](Self::lease_term).
    pub fn lease_term(mut self, lease_term: Duration) -> Self {
        self.lease_term = lease_term;
        self
    }

    /// Sets [`RebalanceConfig::heartbeat_timeout`](Self::heartbeat_timeout).
    pub fn heartbeat_timeout(mut self, heartbeat_timeout: Duration) -> Self {
        self.heartbeat_timeout = heartbeat_timeout;
        self
    }

    /// Sets [`RebalanceConfig::max_moves_per_tick`](Self::max_moves_per_tick).
    pub fn max_moves_per_tick(mut self, max_moves_per_tick: Option<usize>) -> Self {
        self.max_moves_per_tick = max_moves_per_tick;
        self
    }

    /// Sets [`RebalanceConfig::balance_load`](Self::balance_load).
    pub fn balance_load(mut self, balance_load: bool) -> Self {
        self.balance_load = balance_load;
        self
    }
}

impl Default for RebalanceConfig {
    fn default() -> Self {
        RebalanceConfig {
            lease_term: Duration::from_secs(10),
            heartbeat_timeout: Duration::from_secs(15),
            max_moves_per_tick: None,
            balance_load: true,
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

/// The owner of the shard's lease while it may still be processing under
/// it: its session changed within `lease_term` (as observed). For an owner
/// whose session cannot tell (one not registered, or of code from before
/// sessions, which renews each lease), also while the lease itself changed
/// within the term.
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn held_by<'a>(
    shard: &'a ShardState,
    ages: &Ages,
    lease_term: Duration,
) -> Option<&'a ConsumerId> {
    shard.owner.as_ref().filter(|owner| {
        let by_lease = ages.renewing.contains(*owner) || !ages.heartbeats.contains_key(*owner);
        let term = ages.term(owner, lease_term);
        ages.session(owner) < term || (by_lease && ages.lease(&shard.shard_id) < term)
    })
}

/// The session of `owner` as the snapshot shows it.
fn session_of(snapshot: &GroupSnapshot, owner: &ConsumerId) -> SessionSeen {
    snapshot
        .consumers
        .iter()
        .find(|c| c.id() == owner)
        .map(|c| c.session())
        .unwrap_or_else(|| SessionSeen::Unregistered {
            consumer: owner.clone(),
        })
}

/// The take that gives a free or stale lease away, on the exact state seen.
fn take_stale(snapshot: &GroupSnapshot, shard: &ShardState) -> TakeFrom {
    TakeFrom::Stale {
        counter: shard.counter,
        expires: shard.owner.as_ref().and(shard.expires),
        session: shard.owner.as_ref().map(|o| session_of(snapshot, o)),
    }
}

/// Children whose pending parent is depleted or gone, and that parent: their
/// depletion was recorded without the child (the repair the rebalancer makes).
/// Not a child a rewind still in progress moved: it waits for a parent the
/// rewind reopens after it (moves go children first), and a rewind cut
/// short keeps it waiting until the rewind is run again and finishes.
fn stranded_children(snapshot: &GroupSnapshot) -> Vec<(&ShardId, &ShardId)> {
    let by_id: BTreeMap<&ShardId, &ShardState> =
        snapshot.shards.iter().map(|s| (&s.shard_id, s)).collect();
    let rewinding = snapshot
        .stream
        .as_ref()
        .and_then(|s| s.rewind.as_ref())
        .filter(|r| r.finished.is_none())
        .map(|r| r.id);
    snapshot
        .shards
        .iter()
        .filter(|s| rewinding.is_none() || s.rewound != rewinding)
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

/// How many of its owner's terms a claim may go unhonoured while the owner's
/// session is live before it is withdrawn: longer than the owner's loop may
/// go unseen while its heartbeats go on beside it (its pulse stops after
/// three terms, and the loop honours the claim when it is back), so only a
/// claim whose note was lost is withdrawn.
const UNHONOURED_CLAIM_TERMS: u32 = 4;

/// Plans one rebalancer tick. See the module documentation.
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn plan_rebalance(
    snapshot: &GroupSnapshot,
    ages: &Ages,
    config: &RebalanceConfig,
) -> Vec<Action> {
    // A consumer whose session went a term without a heartbeat (as
    // observed) is likely not ticking, even if its last heartbeat is within
    // the timeout (longer than the term): its leases are free to move, and
    // it is passed over while others are live, so they go to the others.
    let mut live = live_consumers(snapshot, ages, config.heartbeat_timeout);
    let stalled: BTreeSet<&ConsumerId> = live
        .iter()
        .copied()
        .filter(|c| ages.heartbeat(c) >= ages.term(c, config.lease_term))
        .collect();
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

    let rewind = snapshot
        .stream
        .as_ref()
        .and_then(|s| s.rewind.as_ref())
        .map(|r| r.id);
    for (child, parent) in stranded_children(snapshot) {
        cancels.push(Action::ClearPendingParent {
            shard: child.clone(),
            parent: parent.clone(),
            rewind,
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
            // A claim its owner's live session has not honoured in
            // `UNHONOURED_CLAIM_TERMS` of its terms: its note is gone
            // (notes are kept by shard, so a claim noted again before the
            // owner acknowledged the note of an earlier one is acknowledged
            // with it, unread). Withdrawn; the lease is its owner's this
            // tick, and a claim planned anew notes the shard again.
            (Some(claim), Some(from))
                if owner.is_some()
                    && ages.claim(&shard.shard_id)
                        >= ages.term(from, config.lease_term) * UNHONOURED_CLAIM_TERMS =>
            {
                cancels.push(Action::CancelClaim {
                    shard: shard.shard_id.clone(),
                    claimant: claim.by.clone(),
                });
            }
            (Some(claim), Some(from)) if live.contains(&claim.by) => {
                holdings.entry(&claim.by).or_default().push(shard);
                in_transit.insert(&shard.shard_id);
                if owner.is_none() {
                    // Not handed over, and the owner's session is stale.
                    moves.push(Action::ForceTake {
                        shard: shard.shard_id.clone(),
                        from: from.clone(),
                        to: claim.by.clone(),
                        from_state: TakeFrom::Claimed {
                            counter: shard.counter,
                            expires: shard.expires,
                            session: Some(session_of(snapshot, from)),
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
            // It left or was reaped a moment ago, and may still be inside
            // a batch: the lease is free once it has been seen so for a term.
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
        // Not back to its own owner: a live owner's session would have kept
        // it, so this one's is stale (given back, it would only churn).
        let Some(to) = ledger.pick(|c| shard.owner.as_ref() != Some(c)) else {
            continue;
        };
        ledger.give(to);
        assigns.push(Action::Assign {
            shard: shard.shard_id.clone(),
            to: to.clone(),
            from_state: take_stale(snapshot, shard),
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
    // Counts balanced and settled: balance load.
    if config.balance_load && assigns.is_empty() && moves.is_empty() && in_transit.is_empty() {
        moves = plan_load_moves(snapshot, &holdings, &ages.beating, moves_left);
    }
    cancels.into_iter().chain(assigns).chain(moves).collect()
}
