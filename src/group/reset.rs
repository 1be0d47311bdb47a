//! Resetting a group's checkpoints (an operator's action): a pure planner
//! that decides which shards move and refuses while leases are held, and a
//! thin step that applies the plan with the store's guarded reset.

use crate::state::{Checkpoint, GroupSnapshot, ShardId, ShardScope, ShardState, StateStore};
use crate::Result;
use serde::Serialize;

/// Why a reset, an import or a rewind was refused; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResetRefused {
    /// The shard named is not in the group's state.
    #[error("shard {0} is not in the group's state (run the rebalancer, or check the name)")]
    UnknownShard(ShardId),
    /// Live leases are held; stop the consumers, or force the reset.
    #[error("{} shard(s) are leased by live consumers ({}); stop them, or force the reset (the holders lose their leases)", .0.len(), describe(.0))]
    LeasesHeld(Vec<(ShardId, String)>),
    /// Every shard selected is depleted (closed and fully read).
    #[error("nothing to reset: every shard selected is depleted")]
    NothingToReset,
    /// The shard named is in the group's state, but the stream no longer
    /// lists it (its records are past retention).
    #[error("shard {0} is no longer in the stream (past retention)")]
    ShardGone(ShardId),
    /// The group has not started on the stream yet (it has no stream item):
    /// there is nothing running to rewind.
    #[error("the group has not started on the stream yet: nothing to rewind")]
    NotStarted,
}

fn describe(held: &[(ShardId, String)]) -> String {
    held.iter()
        .take(5)
        .map(|(s, o)| format!("{s} by {o}"))
        .chain((held.len() > 5).then(|| "...".to_owned()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The shards a reset will move, and the ones it leaves alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetPlan {
    /// The scope reset.
    pub scope: ShardScope,
    /// Shards to reset, as read (the reset applies only if they are unchanged).
    pub shards: Vec<ShardState>,
    /// Depleted shards, left alone (their records were all read and the
    /// shard is closed; their children carry on from their own checkpoints).
    pub skipped_depleted: Vec<ShardId>,
    /// Whether live leases are ended by the reset.
    pub evict: bool,
}

/// Decides which shards of `scope` a reset moves: one shard, or all. Refuses
/// while any of them is leased to a registered consumer (whose session
/// keeps its leases alive), unless `force` (then the leases end):
/// the refusal is an [`crate::Error::ResetRefused`].
pub fn plan_reset(
    snapshot: &GroupSnapshot,
    scope: &ShardScope,
    shard: Option<&ShardId>,
    force: bool,
) -> Result<ResetPlan> {
    Ok(plan(snapshot, scope, shard, force)?)
}

fn plan(
    snapshot: &GroupSnapshot,
    scope: &ShardScope,
    shard: Option<&ShardId>,
    force: bool,
) -> std::result::Result<ResetPlan, ResetRefused> {
    let in_scope: Vec<&ShardState> = match scope {
        ShardScope::Group => snapshot.shards.iter().collect(),
        ShardScope::Consumer(c) => snapshot
            .own_shards
            .iter()
            .filter(|(o, _)| o == c)
            .map(|(_, s)| s)
            .collect(),
        ShardScope::Efo(e) => snapshot
            .efo_shards
            .iter()
            .filter(|(o, _)| o == e)
            .map(|(_, s)| s)
            .collect(),
    };
    let selected: Vec<&ShardState> = match shard {
        Some(id) => {
            let found = in_scope.into_iter().find(|s| &s.shard_id == id);
            vec![found.ok_or_else(|| ResetRefused::UnknownShard(id.clone()))?]
        }
        None => in_scope,
    };
    let (depleted, shards): (Vec<&ShardState>, Vec<&ShardState>) =
        selected.into_iter().partition(|s| s.depleted);
    if shards.is_empty() {
        return Err(ResetRefused::NothingToReset);
    }
    // A registered owner's session keeps its leases alive until it is
    // reaped or leaves.
    let held: Vec<(ShardId, String)> = shards
        .iter()
        .filter_map(|s| {
            let owner = s.owner.as_ref()?;
            let registered = snapshot.consumers.iter().any(|c| c.id() == owner);
            registered.then(|| (s.shard_id.clone(), owner.to_string()))
        })
        .collect();
    if !held.is_empty() && !force {
        return Err(ResetRefused::LeasesHeld(held));
    }
    Ok(ResetPlan {
        scope: scope.clone(),
        shards: shards.into_iter().cloned().collect(),
        skipped_depleted: depleted.into_iter().map(|s| s.shard_id.clone()).collect(),
        evict: force,
    })
}

/// What applying a reset did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ResetReport {
    /// Shards whose checkpoint moved.
    pub reset: Vec<ShardId>,
    /// Shards that changed after they were read (a consumer took or
    /// checkpointed them meanwhile): not touched; read again and retry.
    pub changed: Vec<ShardId>,
    /// Depleted shards left alone.
    pub skipped_depleted: Vec<ShardId>,
}

/// Applies `plan`: every shard's checkpoint moves to `to`, each only if it
/// is still as read.
pub async fn apply_reset(
    store: &StateStore,
    plan: &ResetPlan,
    to: &Checkpoint,
) -> Result<ResetReport> {
    let mut report = ResetReport {
        skipped_depleted: plan.skipped_depleted.clone(),
        ..ResetReport::default()
    };
    for shard in &plan.shards {
        if store
            .checkpoints()
            .reset(&plan.scope, shard, to, plan.evict)
            .await?
        {
            report.reset.push(shard.shard_id.clone());
        } else {
            report.changed.push(shard.shard_id.clone());
        }
    }
    Ok(report)
}
