//! `backfill`: a bounded group beside a live one. A new group reads each
//! shard from `--from` up to an end, then its workers end and its fleet
//! starts none; its functions are deployed as any group's.
//!
//! - `--until <time>`: the group's end is that time, for every shard (those
//!   found later too): the records that arrived before it are read.
//! - `--until-group <live group>`: each shard's end is where the live group
//!   stands now (its checkpoint), so the backfill reads what the live group
//!   has read, and the live group reads the rest. A root shard the live
//!   group has not started is refused (its start is not known yet); a child
//!   it has not reached is the live group's alone, as is every shard found
//!   later.
//!
//! The plan is pure (`plan_backfill`); the writes are the group's start
//! (its stream item), its end, and a fenced position move per shard.

use crate::args::BackfillArgs;
use crate::commands::{parse_position, parse_time};
use crate::error::Error;
use serde::Serialize;
use shardkeeper::consumer::{discover_shards, list_stream_shards};
use shardkeeper::state::{
    Checkpoint, GroupSnapshot, PositionMove, ShardId, ShardScope, ShardSpec, StateStore,
    TableOptions,
};

/// What a backfill reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BackfillPlan {
    /// Where every shard starts.
    #[serde(serialize_with = "as_text")]
    pub from: Checkpoint,
    /// The group's end, for shards without their own.
    #[serde(serialize_with = "as_text")]
    pub group_end: Checkpoint,
    /// Each shard, with its own end where it has one.
    pub shards: Vec<BackfillShard>,
}

/// One shard of a backfill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BackfillShard {
    /// The shard.
    pub shard: ShardId,
    /// Its own end (`None`: the group's).
    pub end: Option<String>,
}

fn as_text<S: serde::Serializer>(cp: &Checkpoint, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&cp.to_string())
}

/// The position `--from` names.
pub fn parse_from(text: &str) -> Result<Checkpoint, Error> {
    match parse_position("--from", text)? {
        from @ (Checkpoint::TrimHorizon | Checkpoint::AtTimestamp(_)) => Ok(from),
        _ => Err(Error::bad(
            "--from",
            format!("{text:?}: a backfill starts at TRIM_HORIZON or a time"),
        )),
    }
}

/// Where a backfill ends in a shard the live group stands at `live` (its
/// checkpoint; `has_parents`: the shard is a child): the point the live
/// group's position resumes from. `Err` with the reason for a shard whose
/// live start is not known yet.
fn end_at_live(live: Option<&Checkpoint>, has_parents: bool) -> Result<Checkpoint, &'static str> {
    match live {
        // Read to its end by the live group: all of it.
        Some(Checkpoint::ShardEnd) => Ok(Checkpoint::ShardEnd),
        Some(
            cp
            @ (Checkpoint::After { .. } | Checkpoint::AtSequence(_) | Checkpoint::AtTimestamp(_)),
        ) => Ok(cp.clone()),
        Some(Checkpoint::TrimHorizon) => Ok(Checkpoint::TrimHorizon),
        // A child the live group has not reached: it reads all of it.
        None if has_parents => Ok(Checkpoint::TrimHorizon),
        None | Some(Checkpoint::Latest) => Err("the live group has not started it"),
    }
}

/// Plans a backfill of the shards the stream lists (`listed`) from `from`:
/// up to `until` (a time), or up to where the live group in `live` stands.
pub fn plan_backfill(
    listed: &[ShardSpec],
    from: Checkpoint,
    until: Option<i64>,
    live: Option<&GroupSnapshot>,
) -> Result<BackfillPlan, Error> {
    let (group_end, shards) = match (until, live) {
        (Some(t), _) => (
            Checkpoint::AtTimestamp(t),
            listed
                .iter()
                .map(|s| BackfillShard {
                    shard: s.shard_id.clone(),
                    end: None,
                })
                .collect(),
        ),
        (None, Some(live)) => {
            let mut shards = Vec::new();
            let mut unknown = Vec::new();
            for s in listed {
                let state = live.shards.iter().find(|l| l.shard_id == s.shard_id);
                let cp = state.and_then(|l| {
                    if l.depleted {
                        Some(Checkpoint::ShardEnd)
                    } else {
                        l.checkpoint.clone()
                    }
                });
                match end_at_live(cp.as_ref(), !s.parents.is_empty()) {
                    Ok(end) => shards.push(BackfillShard {
                        shard: s.shard_id.clone(),
                        end: Some(end.to_string()),
                    }),
                    Err(_) => unknown.push(s.shard_id.to_string()),
                }
            }
            if !unknown.is_empty() {
                return Err(Error::BackfillRefused(format!(
                    "the live group has not started shard(s) {} yet, so where it will start is not known: wait until it has read them, or give --until <time>",
                    unknown.join(", ")
                )));
            }
            // Shards found later are the live group's alone.
            (Checkpoint::TrimHorizon, shards)
        }
        (None, None) => return Err(Error::bad("--until", "give --until or --until-group")),
    };
    Ok(BackfillPlan {
        from,
        group_end,
        shards,
    })
}

/// Starts the backfill: refuses a group that has state already, starts the
/// group (its stream item), has it learn the stream's shards, plans, asks
/// `confirm` unless `--yes` (prints the plan on a dry run), then records
/// the group's end and sets each shard's start and end.
pub async fn backfill(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    args: &BackfillArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let from = parse_from(&args.from)?;
    let until = args
        .until
        .as_deref()
        .map(|t| parse_time("--until", t))
        .transpose()?;
    let config = store.config();
    let before = store.load_group().await?;
    if before.stream.is_some() || !before.shards.is_empty() {
        return Err(Error::BackfillRefused(format!(
            "group {} already has state on stream {}: a backfill starts a group of its own",
            config.group, config.stream
        )));
    }
    let live = match &args.until_group {
        Some(name) => Some(store.beside(name)?.load_group().await?),
        None => None,
    };
    let (listed, _) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let plan = plan_backfill(&listed, from, until, live.as_ref())?;
    if !args.change.dry_run {
        let question = format!(
            "backfill {} shard(s) of stream {} as group {}, from {} up to {}?",
            plan.shards.len(),
            config.stream,
            config.group,
            plan.from,
            args.until_group.as_ref().map_or_else(
                || plan.group_end.to_string(),
                |g| format!("where group {g} stands")
            ),
        );
        args.change.confirm(&question, confirm)?;
        store
            .start_on_stream(kinesis, TableOptions::default())
            .await?;
        store.checkpoints().set_group_end(&plan.group_end).await?;
        discover_shards(store, kinesis, &before).await?;
        let snapshot = store.load_group().await?;
        for s in &plan.shards {
            let seen = snapshot
                .shards
                .iter()
                .find(|st| st.shard_id == s.shard)
                .expect("planned from the snapshot");
            let mut mv = PositionMove::to(plan.from.clone());
            mv.end = s
                .end
                .as_deref()
                .map(|e| e.parse().expect("an end it wrote"));
            store
                .checkpoints()
                .move_position(&ShardScope::Group, seen, &mv)
                .await?;
        }
    }
    if let Some(json) = args.change.json(&plan) {
        return Ok(json);
    }
    let mut out = format!(
        "{} group {}: {} shard(s) from {}, up to {}\n",
        if args.change.dry_run {
            "would start backfill"
        } else {
            "backfill started as"
        },
        config.group,
        plan.shards.len(),
        plan.from,
        plan.group_end
    );
    for s in plan.shards.iter().filter(|s| s.end.is_some()) {
        out.push_str(&format!(
            "  {} up to {}\n",
            s.shard,
            s.end.as_deref().unwrap_or("-")
        ));
    }
    out.push_str("deploy its functions as any group's (SHARDKEEPER_GROUP set to it); `status` shows when it is finished\n");
    Ok(out)
}
