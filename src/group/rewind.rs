//! Rewinding a running group (an operator's action): a pure planner that
//! decides which shards move where, in which order and which wait for
//! which, and a thin step that records the rewind and applies the moves.
//!
//! - Every move is fenced by the lease counter read, ends the lease and
//!   notes the revocation on the holder's item: the holder stops at its
//!   next heartbeat and drops what it had read; the next holder starts at
//!   the new position.
//! - A whole-stream rewind moves every shard the stream still lists,
//!   closed ones included: a depleted shard is read again from the target
//!   (to its end, which may hold nothing), and its children wait for it
//!   again. Shards the stream no longer lists are left as they are.
//! - Children move before their parents, so a rewind cut short leaves
//!   children waiting rather than read beside a parent that was not moved.
//! - The rewind is recorded on the group's stream item before its first
//!   move and marked finished after its last; the same request run again
//!   moves only the shards it has not moved yet.

use crate::state::{
    Checkpoint, EpochMillis, GroupSnapshot, PositionMove, RewindState, SequenceNumber, ShardId,
    ShardScope, ShardSpec, ShardState, StateStore,
};
use crate::Result;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

use super::ResetRefused;

/// Where a rewind moves the group.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RewindTarget {
    /// Every shard to its oldest record still in the stream.
    TrimHorizon,
    /// Every shard to the first record that arrives from now on: the time
    /// the rewind begins (the operator's clock against Kinesis's arrival
    /// times).
    Latest,
    /// Every shard to its first record at or after this time (ms).
    AtTimestamp(EpochMillis),
    /// One shard to this sequence number (inclusive). Its children are not
    /// held back.
    Shard(ShardId, SequenceNumber),
}

impl RewindTarget {
    /// The request as text (`trim-horizon`, `latest`, `at-timestamp=<ms>`,
    /// `<shard>@<sequence number>`): what tells a rewind run again from a
    /// new one.
    pub fn request(&self) -> String {
        match self {
            RewindTarget::TrimHorizon => "trim-horizon".to_owned(),
            RewindTarget::Latest => "latest".to_owned(),
            RewindTarget::AtTimestamp(t) => format!("at-timestamp={t}"),
            RewindTarget::Shard(shard, seq) => format!("{shard}@{seq}"),
        }
    }

    fn checkpoint(&self, now: EpochMillis) -> Checkpoint {
        match self {
            RewindTarget::TrimHorizon => Checkpoint::TrimHorizon,
            RewindTarget::Latest => Checkpoint::AtTimestamp(now),
            RewindTarget::AtTimestamp(t) => Checkpoint::AtTimestamp(*t),
            RewindTarget::Shard(_, seq) => Checkpoint::AtSequence(seq.clone()),
        }
    }
}

/// What a rewind will do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RewindPlan {
    /// The rewind's id (when it began, ms).
    pub id: EpochMillis,
    /// What was asked for ([`RewindTarget::request`]).
    pub request: String,
    /// Where the shards move.
    #[serde(serialize_with = "as_text")]
    pub to: Checkpoint,
    /// It carries on an unfinished rewind of the same request.
    pub resumed: bool,
    /// How many shards the rewind selected (for one carried on, as first
    /// planned).
    pub shards: u32,
    /// The moves, children before parents.
    pub moves: Vec<RewindMove>,
    /// Shards this rewind moved before it was cut short: left as they are.
    pub already: Vec<ShardId>,
    /// Shards of the group the stream no longer lists: left as they are.
    pub gone: Vec<ShardId>,
}

/// One shard's move.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RewindMove {
    /// The shard.
    pub shard: ShardId,
    /// Its checkpoint before.
    #[serde(serialize_with = "opt_as_text")]
    pub from: Option<Checkpoint>,
    /// The consumer whose lease ends.
    pub holder: Option<String>,
    /// Depleted, and read again.
    pub reopen: bool,
    /// Parents it waits for again.
    pub wait_for: Vec<ShardId>,
    #[serde(skip)]
    seen: ShardState,
}

fn as_text<S: serde::Serializer>(cp: &Checkpoint, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&cp.to_string())
}

fn opt_as_text<S: serde::Serializer>(
    cp: &Option<Checkpoint>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match cp {
        Some(cp) => s.serialize_str(&cp.to_string()),
        None => s.serialize_none(),
    }
}

/// Plans a rewind of the group in `snapshot` (read after the group learned
/// the stream's shards) to `target`, given the shards the stream lists now
/// (`listed`), at `now` (the rewind's id, and `latest`'s time). An
/// unfinished rewind of the same request is carried on. Refused for a
/// shard the group or the stream does not have, and for a group that has
/// not started (no stream item).
pub fn plan_rewind(
    snapshot: &GroupSnapshot,
    listed: &[ShardSpec],
    target: &RewindTarget,
    now: EpochMillis,
) -> Result<RewindPlan> {
    Ok(plan(snapshot, listed, target, now)?)
}

fn plan(
    snapshot: &GroupSnapshot,
    listed: &[ShardSpec],
    target: &RewindTarget,
    now: EpochMillis,
) -> std::result::Result<RewindPlan, ResetRefused> {
    let stream = snapshot.stream.as_ref().ok_or(ResetRefused::NotStarted)?;
    let request = target.request();
    let unfinished = stream
        .rewind
        .as_ref()
        .filter(|r| r.finished.is_none() && r.request == request);
    let (id, to, resumed) = match unfinished {
        Some(r) => (r.id, r.to.clone(), true),
        None => {
            // A new id, also when the clock has not moved past the last.
            let last = stream.rewind.as_ref().map_or(0, |r| r.id);
            (now.max(last + 1), target.checkpoint(now), false)
        }
    };
    let listed_ids: BTreeSet<&ShardId> = listed.iter().map(|s| &s.shard_id).collect();
    let selected: Vec<&ShardState> = match target {
        RewindTarget::Shard(shard, _) => {
            let state = snapshot
                .shards
                .iter()
                .find(|s| &s.shard_id == shard)
                .ok_or_else(|| ResetRefused::UnknownShard(shard.clone()))?;
            if !listed_ids.contains(shard) {
                return Err(ResetRefused::ShardGone(shard.clone()));
            }
            vec![state]
        }
        _ => snapshot.shards.iter().collect(),
    };
    let (present, gone): (Vec<&ShardState>, Vec<&ShardState>) = selected
        .into_iter()
        .partition(|s| listed_ids.contains(&s.shard_id));
    let (already, to_move): (Vec<&ShardState>, Vec<&ShardState>) = present
        .into_iter()
        .partition(|s| resumed && s.rewound == Some(id));
    let moving: BTreeSet<&ShardId> = to_move.iter().map(|s| &s.shard_id).collect();
    let whole_stream = !matches!(target, RewindTarget::Shard(..));
    let states: BTreeMap<&ShardId, &ShardState> =
        snapshot.shards.iter().map(|s| (&s.shard_id, s)).collect();
    let by_id = |id: &ShardId| states.get(id).copied();
    // Children first: the reverse of parents first.
    let mut ordered = ShardSpec::parents_first(to_move.iter().map(|s| s.spec()).collect());
    ordered.reverse();
    let moves = ordered
        .into_iter()
        .map(|spec| {
            let seen = by_id(&spec.shard_id)
                .expect("planned from the snapshot")
                .clone();
            let wait_for = if whole_stream {
                // Parents read again: those moved now, and those this
                // rewind moved before that are still being read.
                seen.parents
                    .iter()
                    .filter(|p| {
                        moving.contains(p)
                            || by_id(p).is_some_and(|ps| ps.rewound == Some(id) && !ps.depleted)
                    })
                    .cloned()
                    .collect()
            } else {
                Vec::new()
            };
            RewindMove {
                shard: seen.shard_id.clone(),
                from: seen.checkpoint.clone(),
                holder: seen.owner.as_ref().map(ToString::to_string),
                reopen: seen.depleted,
                wait_for,
                seen,
            }
        })
        .collect::<Vec<_>>();
    let shards = match unfinished {
        Some(r) => r.shards,
        None => moves.len() as u32,
    };
    Ok(RewindPlan {
        id,
        request,
        to,
        resumed,
        shards,
        moves,
        already: already.into_iter().map(|s| s.shard_id.clone()).collect(),
        gone: gone.into_iter().map(|s| s.shard_id.clone()).collect(),
    })
}

/// What applying a rewind did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RewindReport {
    /// Shards moved now.
    pub moved: Vec<ShardId>,
    /// Shards that changed after they were read (a consumer took or
    /// checkpointed them meanwhile): not moved; run the rewind again.
    pub changed: Vec<ShardId>,
    /// Every shard of the rewind has moved.
    pub finished: bool,
}

/// Applies `plan`: records the rewind (unless it carries one on), moves
/// each shard if it is still as read, and records the rewind finished if
/// none was left.
pub async fn apply_rewind(store: &StateStore, plan: &RewindPlan) -> Result<RewindReport> {
    if !plan.resumed {
        let begun = store
            .checkpoints()
            .begin_rewind(&RewindState {
                id: plan.id,
                request: plan.request.clone(),
                to: plan.to.clone(),
                shards: plan.shards,
                finished: None,
            })
            .await?;
        if !begun {
            return Err(ResetRefused::NotStarted.into());
        }
    }
    let mut report = RewindReport::default();
    for m in &plan.moves {
        let mut mv = PositionMove::to(plan.to.clone());
        mv.evict = true;
        mv.reopen = m.reopen;
        mv.wait_for = m.wait_for.clone();
        mv.rewind = Some(plan.id);
        if store
            .checkpoints()
            .move_position(&ShardScope::Group, &m.seen, &mv)
            .await?
        {
            report.moved.push(m.shard.clone());
        } else {
            report.changed.push(m.shard.clone());
        }
    }
    if report.changed.is_empty() {
        report.finished = store.checkpoints().finish_rewind(plan.id).await?;
    }
    Ok(report)
}
