//! `rewind`: a running group's positions moved back (or on), without
//! stopping it. The group first learns the stream's shards (as its
//! rebalancer would); the plan and the fenced moves are the library's
//! (`plan_rewind`, `apply_rewind`).

use crate::args::RewindArgs;
use crate::commands::parse_position;
use crate::error::Error;
use crate::render;
use serde::Serialize;
use shardkeeper::consumer::{discover_shards, list_stream_shards};
use shardkeeper::group::{apply_rewind, plan_rewind, RewindPlan, RewindReport, RewindTarget};
use shardkeeper::state::{
    Checkpoint, Clock as _, SequenceNumber, ShardId, StateStore, SystemClock,
};

/// What a rewind did, or on a dry run would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RewindOutcome {
    /// The plan.
    pub plan: RewindPlan,
    /// What applying it did (none on a dry run).
    pub report: Option<RewindReport>,
}

/// The target `--to` (or `--shard` with `--to-sequence`) names.
pub fn parse_rewind_target(args: &RewindArgs) -> Result<RewindTarget, Error> {
    if let (Some(shard), Some(seq)) = (&args.shard, &args.to_sequence) {
        return Ok(RewindTarget::Shard(
            ShardId::new(shard)?,
            SequenceNumber::new(seq).map_err(|e| Error::bad("--to-sequence", e.to_string()))?,
        ));
    }
    let text = args
        .to
        .as_deref()
        .ok_or_else(|| Error::bad("--to", "give --to, or --shard with --to-sequence"))?;
    Ok(match parse_position("--to", text)? {
        Checkpoint::TrimHorizon => RewindTarget::TrimHorizon,
        Checkpoint::Latest => RewindTarget::Latest,
        Checkpoint::AtTimestamp(at) => RewindTarget::AtTimestamp(at),
        _ => {
            return Err(Error::bad(
                "--to",
                format!(
                    "{text:?}: one shard goes to a sequence number with --shard and --to-sequence"
                ),
            ))
        }
    })
}

/// Rewinds the group: plans, prints the plan on a dry run, asks `confirm`
/// unless `--yes`, then applies.
pub async fn rewind(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    args: &RewindArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let target = parse_rewind_target(args)?;
    let config = store.config();
    let (listed, _) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let snapshot = store.load_group().await?;
    // `LATEST` is compared with Kinesis's arrival times: this machine's
    // clock, not the store's.
    let now = SystemClock.now_millis();
    // Planned from what is there, before anything is written: shards the
    // stream lists that have no state yet are recorded only once the
    // operator agreed, and then planned with the others.
    let plan = plan_rewind(&snapshot, &listed, &target, now)?;
    let unrecorded = unrecorded(&snapshot, &listed);
    let mut outcome = RewindOutcome { plan, report: None };
    if !args.change.dry_run {
        let plan = &outcome.plan;
        let question = format!(
            "{} {} shard(s) of group {} on stream {} to {}{}, ending the leases held on them?",
            if plan.resumed {
                "finish rewinding"
            } else {
                "rewind"
            },
            plan.moves.len() + unrecorded,
            config.group,
            config.stream,
            plan.to,
            if unrecorded > 0 {
                format!(" ({unrecorded} of them new to the group, recorded first)")
            } else {
                String::new()
            }
        );
        args.change.confirm(&question, confirm)?;
        if unrecorded > 0 {
            discover_shards(store, kinesis, &snapshot).await?;
            let snapshot = store.load_group().await?;
            outcome.plan = plan_rewind(&snapshot, &listed, &target, now)?;
        }
        outcome.report = Some(apply_rewind(store, &outcome.plan).await?);
    }
    if let Some(json) = args.change.json(&outcome) {
        return Ok(json);
    }
    Ok(render::rewind(&outcome))
}

/// How many of the stream's shards the group has no state for yet.
pub(crate) fn unrecorded(
    snapshot: &shardkeeper::state::GroupSnapshot,
    listed: &[shardkeeper::state::ShardSpec],
) -> usize {
    listed
        .iter()
        .filter(|l| !snapshot.shards.iter().any(|s| s.shard_id == l.shard_id))
        .count()
}
