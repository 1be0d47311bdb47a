//! `status`, `parked` and `reset`: read the group, decide (pure), write (thin).

use crate::args::{ParkedArgs, ResetArgs, StatusArgs};
use crate::error::Error;
use crate::render;
use shardkeeper::group::{apply_reset, plan_reset, GroupStatus};
use shardkeeper::state::{Checkpoint, ConsumerId, EfoName, ShardId, ShardScope, StateStore};
use std::time::Duration;

/// The group's status as tables, or as JSON with `--json`.
pub async fn status(store: &StateStore, args: &StatusArgs) -> Result<String, Error> {
    let snapshot = store.load_group().await?;
    let status = GroupStatus::from_snapshot(
        &snapshot,
        Duration::from_secs(args.heartbeat_timeout_seconds),
    );
    if args.json {
        Ok(serde_json::to_string_pretty(&status).expect("status serializes") + "\n")
    } else {
        Ok(render::status(&status))
    }
}

/// The parked records as a table, or as JSON with `--json`.
pub async fn parked(store: &StateStore, args: &ParkedArgs) -> Result<String, Error> {
    let parked = store.list_parked().await?;
    if args.json {
        let rows: Vec<serde_json::Value> = parked.iter().map(render::parked_json).collect();
        Ok(serde_json::to_string_pretty(&rows).expect("parked records serialize") + "\n")
    } else {
        Ok(render::parked(&parked, store.now()))
    }
}

/// Parses `--to`: `trim-horizon`, `latest`, `at-timestamp=<RFC 3339 or
/// ms>`, `at-sequence=<sequence number>`.
pub fn parse_target(text: &str) -> Result<Checkpoint, Error> {
    let (kind, value) = match text.split_once('=') {
        Some((k, v)) => (k, Some(v)),
        None => (text, None),
    };
    match (kind.to_ascii_lowercase().as_str(), value) {
        ("trim-horizon", None) => Ok(Checkpoint::TrimHorizon),
        ("latest", None) => Ok(Checkpoint::Latest),
        ("at-timestamp", Some(v)) => {
            let ms = match v.parse::<i64>() {
                Ok(ms) => ms,
                Err(_) => chrono::DateTime::parse_from_rfc3339(v)
                    .map_err(|e| Error::bad("--to", format!("{v:?} is not a timestamp: {e}")))?
                    .timestamp_millis(),
            };
            Ok(Checkpoint::AtTimestamp(ms))
        }
        ("at-sequence", Some(v)) => Ok(Checkpoint::AtSequence(
            shardkeeper::state::SequenceNumber::new(v)?,
        )),
        _ => Err(Error::bad(
            "--to",
            format!(
                "{text:?}: expected trim-horizon, latest, at-timestamp=<RFC 3339 or ms> \
                 or at-sequence=<sequence number>"
            ),
        )),
    }
}

/// Resets checkpoints: plans (refusing while leases are held unless
/// `--force`), asks `confirm` with a description of the plan unless
/// `--yes`, then applies.
pub async fn reset(
    store: &StateStore,
    args: &ResetArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let to = parse_target(&args.to)?;
    let scope = match (&args.consumer, &args.efo) {
        (Some(c), _) => ShardScope::Consumer(ConsumerId::new(c)?),
        (_, Some(e)) => ShardScope::Efo(EfoName::new(e)?),
        _ => ShardScope::Group,
    };
    let shard = args.shard.as_deref().map(ShardId::new).transpose()?;
    let snapshot = store.load_group().await?;
    let plan = plan_reset(&snapshot, &scope, shard.as_ref(), args.force, store.now())?;
    let config = store.config();
    let question = format!(
        "reset {} shard(s) of group {} on stream {} to {to}{}?",
        plan.shards.len(),
        config.group,
        config.stream,
        if plan.evict {
            ", ending the live leases held on them"
        } else {
            ""
        }
    );
    if !args.yes && !confirm(&question) {
        return Err(Error::NotConfirmed);
    }
    let report = apply_reset(store, &plan, &to).await?;
    if args.json {
        Ok(serde_json::to_string_pretty(&report).expect("report serializes") + "\n")
    } else {
        Ok(render::reset(&report))
    }
}
