//! The heartbeat reaper's planner: pure, no I/O.
//!
//! Consumers that missed their heartbeat are removed with their leases and
//! EFO locks; EFO consumers held by consumers that are not registered are
//! unlocked; EFO consumers free for longer than the idle timeout are
//! deregistered (at least one is kept: they cost money per shard-hour, but a
//! pool of none makes every consumer wait for a registration); depleted
//! shards whose records are all past the stream's retention have their state
//! removed.

use crate::group::Action;
use crate::state::{duration_millis, Checkpoint, ConsumerId, EpochMillis, GroupSnapshot};
use std::collections::BTreeSet;
use std::time::Duration;

/// How the reaper decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReapConfig {
    /// A consumer whose last heartbeat is older than this is removed.
    pub heartbeat_timeout: Duration,
    /// An EFO consumer free for longer than this is deregistered.
    pub efo_idle_timeout: Duration,
    /// The stream's retention period: a depleted shard depleted longer ago
    /// than this has no records left, and its state goes.
    pub retention: Duration,
}

impl Default for ReapConfig {
    fn default() -> Self {
        ReapConfig {
            heartbeat_timeout: Duration::from_secs(10),
            efo_idle_timeout: Duration::from_secs(15 * 60),
            retention: Duration::from_secs(24 * 3600),
        }
    }
}

/// Plans one reaper tick. See the module documentation.
pub fn plan_reap(snapshot: &GroupSnapshot, now: EpochMillis, config: &ReapConfig) -> Vec<Action> {
    let timeout = duration_millis(config.heartbeat_timeout);
    let mut actions = Vec::new();
    for consumer in &snapshot.consumers {
        if now - consumer.heartbeat <= timeout {
            continue;
        }
        actions.push(Action::ReapConsumer {
            seen: consumer.clone(),
            leases: snapshot
                .shards
                .iter()
                .filter(|s| s.owner.as_ref() == Some(consumer.id()))
                .map(|s| (s.shard_id.clone(), s.counter))
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

    let idle_limit = duration_millis(config.efo_idle_timeout);
    let idle: Vec<_> = snapshot
        .efo
        .iter()
        .filter(|e| e.used_by.is_none() && e.released.is_some_and(|r| now - r > idle_limit))
        .collect();
    let keep_one = usize::from(idle.len() == snapshot.efo.len());
    for efo in idle.into_iter().skip(keep_one) {
        actions.push(Action::DeregisterEfo {
            name: efo.name.clone(),
            arn: efo.arn.clone(),
            lock_counter: efo.lock_counter,
        });
    }

    let retention = duration_millis(config.retention);
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
