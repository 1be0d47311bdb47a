//! The heartbeat reaper's planner: pure, no I/O.
//!
//! Heartbeat and idle times are [`Ages`], as the reaper observed them (see
//! the sightings module); only the removal of state past the stream's
//! retention compares a stored time (`updated`, at a scale of hours) with
//! the reaper's clock.
//!
//! - Consumers that missed their heartbeat are removed, with their EFO
//!   locks and the leases seen unchanged for a term (a lease moves only once
//!   its holder can no longer be processing under it: the others run out
//!   and the rebalancer gives them away then); EFO consumers held by
//!   consumers that are not registered are unlocked.
//! - EFO consumers free for longer than the idle timeout are retired
//!   (marked, deregistered, removed; an interrupted retirement is finished
//!   at the next tick). At least one is kept: they cost money per
//!   shard-hour, but a pool of none makes every consumer wait for a
//!   registration.
//! - Depleted shards whose records are all past the stream's retention have
//!   their state removed, and so have the positions of a standalone consumer
//!   (or standalone EFO consumer) that is gone, once past retention.

use crate::group::{Action, Ages};
use crate::state::{
    duration_millis, Checkpoint, ConsumerId, EfoName, EpochMillis, GroupSnapshot, ShardScope,
    ShardState,
};
use std::collections::BTreeSet;
use std::time::Duration;

/// How the reaper decides.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapConfig {
    /// A consumer whose heartbeat has not changed for longer than this (as observed) is removed.
    pub heartbeat_timeout: Duration,
    /// The lease term: a removed consumer's lease is freed only once it has
    /// gone unchanged this long (as observed), and while the consumer is
    /// still absent.
    pub lease_term: Duration,
    /// An EFO consumer free for longer than this (as observed) is deregistered.
    pub efo_idle_timeout: Duration,
    /// The stream's retention period: a depleted shard depleted longer ago
    /// than this has no records left, and its state goes.
    pub retention: Duration,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl ReapConfig {
    /// Sets [`ReapConfig::heartbeat_timeout`](Self::heartbeat_timeout).
    pub fn heartbeat_timeout(mut self, heartbeat_timeout: Duration) -> Self {
        self.heartbeat_timeout = heartbeat_timeout;
        self
    }

    /// Sets [`ReapConfig::lease_term`](Self::lease_term).
    pub fn lease_term(mut self, lease_term: Duration) -> Self {
        self.lease_term = lease_term;
        self
    }

    /// Sets [`ReapConfig::efo_idle_timeout`](Self::efo_idle_timeout).
    pub fn efo_idle_timeout(mut self, efo_idle_timeout: Duration) -> Self {
        self.efo_idle_timeout = efo_idle_timeout;
        self
    }

    /// Sets [`ReapConfig::retention`](Self::retention).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }
}

impl Default for ReapConfig {
    fn default() -> Self {
        ReapConfig {
            heartbeat_timeout: Duration::from_secs(15),
            lease_term: Duration::from_secs(10),
            efo_idle_timeout: Duration::from_secs(15 * 60),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// Whether `consumer` went longer than the heartbeat timeout (or its own
/// lease term, if longer) without a heartbeat, as observed: it is reaped.
pub(crate) fn missed_its_heartbeat(
    consumer: &ConsumerId,
    ages: &Ages,
    config: &ReapConfig,
) -> bool {
    let term = ages.term(consumer, config.lease_term);
    ages.heartbeat(consumer) > config.heartbeat_timeout.max(term)
}

/// Plans one reaper tick at `now` (the reaper's wall clock, for retention
/// only). See the module documentation.
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn plan_reap(
    snapshot: &GroupSnapshot,
    ages: &Ages,
    now: EpochMillis,
    config: &ReapConfig,
) -> Vec<Action> {
    let mut actions = Vec::new();
    for consumer in &snapshot.consumers {
        if !missed_its_heartbeat(consumer.id(), ages, config) {
            continue;
        }
        let term = ages.term(consumer.id(), config.lease_term);
        actions.push(Action::ReapConsumer {
            seen: consumer.clone(),
            leases: snapshot
                .shards
                .iter()
                .filter(|s| ages.lease(&s.shard_id) >= term)
                .filter_map(ShardState::lease)
                .filter(|l| l.owner == *consumer.id())
                .collect(),
            efo: snapshot
                .efo
                .iter()
                .filter(|e| e.used_by.as_ref() == Some(consumer.id()))
                .filter_map(|e| e.lock())
                .collect(),
        });
    }
    let registered: BTreeSet<&ConsumerId> = snapshot.consumers.iter().map(|c| c.id()).collect();
    for efo in &snapshot.efo {
        if let Some(lock) = efo.lock().filter(|l| !registered.contains(&l.consumer)) {
            actions.push(Action::ReleaseEfo { lock });
        }
    }

    // A retirement that was interrupted is finished; of the idle ones, at
    // least one consumer stays in the pool.
    let retiring = snapshot.efo.iter().filter(|e| e.retiring);
    let serving = snapshot.efo.iter().filter(|e| !e.retiring).count();
    let idle: Vec<_> = snapshot
        .efo
        .iter()
        .filter(|e| {
            !e.retiring && e.used_by.is_none() && ages.efo_free(&e.name) > config.efo_idle_timeout
        })
        .collect();
    let keep_one = usize::from(idle.len() == serving);
    for efo in retiring.chain(idle.into_iter().skip(keep_one)) {
        actions.push(Action::DeregisterEfo {
            name: efo.name.clone(),
            arn: efo.arn.clone(),
            lock_counter: efo.lock_counter,
        });
    }

    let retention = duration_millis(config.retention);
    // Standalone scopes whose consumer, or EFO consumer, is gone: their
    // positions go once past retention (the records they point at are gone).
    let pool: BTreeSet<&EfoName> = snapshot.efo.iter().map(|e| &e.name).collect();
    let own = snapshot
        .own_shards
        .iter()
        .filter(|(owner, _)| !registered.contains(owner))
        .map(|(owner, s)| (ShardScope::Consumer(owner.clone()), s));
    let efo = snapshot
        .efo_shards
        .iter()
        .filter(|(name, _)| !pool.contains(name))
        .map(|(name, s)| (ShardScope::Efo(name.clone()), s));
    for (scope, shard) in own.chain(efo) {
        if now - shard.updated > retention {
            actions.push(Action::RemoveScopedShard {
                scope,
                shard: shard.shard_id.clone(),
                updated: shard.updated,
            });
        }
    }
    let awaited: BTreeSet<_> = snapshot
        .shards
        .iter()
        .flat_map(|s| s.pending_parents.iter())
        .collect();
    for shard in &snapshot.shards {
        if shard.depleted
            && shard.checkpoint == Some(Checkpoint::ShardEnd)
            && now - shard.updated > retention
            && !awaited.contains(&shard.shard_id)
        {
            actions.push(Action::RemoveShard {
                shard: shard.shard_id.clone(),
                counter: shard.counter,
            });
        }
    }
    actions
}
