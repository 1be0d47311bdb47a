//! `export` and `import`: a group's positions (each shard's checkpoint) as
//! a JSON file, read from one group and set on another with the guarded
//! reset (refused while registered consumers hold the leases, unless
//! forced; each shard moved only if unchanged since read).

use crate::args::ImportArgs;
use crate::error::Error;
use crate::render;
use serde::{Deserialize, Serialize};
use shardkeeper::group::{apply_reset, plan_reset, ResetRefused, ResetReport};
use shardkeeper::state::{Checkpoint, ShardId, ShardScope, StateStore};
use std::collections::BTreeMap;

/// The format name a positions file carries.
pub const FORMAT: &str = "shardkeeper-positions/1";

/// A positions file: where each shard of a group stood when exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Positions {
    /// [`FORMAT`].
    pub format: String,
    /// The group exported.
    pub group: String,
    /// Its stream.
    pub stream: String,
    /// Each shard of the group's scope.
    pub shards: Vec<Position>,
}

/// One shard's position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The shard id.
    pub shard: String,
    /// Its checkpoint: `TRIM_HORIZON`, `LATEST`, `AT_TIMESTAMP:<ms>`,
    /// `AT_SEQUENCE_NUMBER:<n>`, `<n>` (after that record) or `<n>/<sub>`
    /// (after that user record of a KPL aggregate), `SHARD_END`; none:
    /// nothing stored yet.
    pub checkpoint: Option<String>,
    /// Read to its end and done.
    pub depleted: bool,
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// The guarded resets' outcome.
    #[serde(flatten)]
    pub reset: ResetReport,
    /// Shards of the file the group does not have: left out.
    pub unknown: Vec<String>,
    /// Shards of the file without a checkpoint: left as they are.
    pub without_checkpoint: Vec<String>,
}

/// The group's positions as pretty JSON.
pub async fn export(store: &StateStore) -> Result<String, Error> {
    let snapshot = store.load_group().await?;
    let config = store.config();
    let positions = Positions {
        format: FORMAT.to_owned(),
        group: config.group.to_string(),
        stream: config.stream.to_string(),
        shards: snapshot
            .shards
            .iter()
            .map(|s| Position {
                shard: s.shard_id.to_string(),
                checkpoint: s.checkpoint.as_ref().map(ToString::to_string),
                depleted: s.depleted,
            })
            .collect(),
    };
    Ok(serde_json::to_string_pretty(&positions).expect("positions serialize") + "\n")
}

/// Reads and checks a positions file: every checkpoint parses.
pub fn parse(text: &str) -> Result<(Positions, BTreeMap<ShardId, Checkpoint>), Error> {
    let positions: Positions = serde_json::from_str(text)
        .map_err(|e| Error::bad("--file", format!("not a positions file: {e}")))?;
    if positions.format != FORMAT {
        return Err(Error::bad(
            "--file",
            format!("format {:?}, expected {FORMAT:?}", positions.format),
        ));
    }
    let mut wanted = BTreeMap::new();
    for p in &positions.shards {
        let Some(cp) = &p.checkpoint else { continue };
        let shard = ShardId::new(&p.shard)?;
        let cp: Checkpoint = cp
            .parse()
            .map_err(|e| Error::bad("--file", format!("shard {}: {e}", p.shard)))?;
        wanted.insert(shard, cp);
    }
    Ok((positions, wanted))
}

/// Sets the group's checkpoints to a positions file's: refused as a whole
/// (nothing written) while registered consumers hold any of the leases,
/// unless `--force`; asks `confirm` unless `--yes`; then moves each shard
/// the group has with the guarded reset.
pub async fn import(
    store: &StateStore,
    args: &ImportArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(&args.file)?
    };
    let (positions, wanted) = parse(&text)?;
    let snapshot = store.load_group().await?;
    let mut report = ImportReport {
        without_checkpoint: positions
            .shards
            .iter()
            .filter(|p| p.checkpoint.is_none())
            .map(|p| p.shard.clone())
            .collect(),
        ..ImportReport::default()
    };
    let mut plans = Vec::new();
    let mut held = Vec::new();
    for (shard, cp) in &wanted {
        match plan_reset(&snapshot, &ShardScope::Group, Some(shard), args.force) {
            Ok(plan) => plans.push((plan, cp)),
            Err(shardkeeper::Error::ResetRefused(ResetRefused::UnknownShard(s))) => {
                report.unknown.push(s.to_string())
            }
            Err(shardkeeper::Error::ResetRefused(ResetRefused::NothingToReset)) => {
                report.reset.skipped_depleted.push(shard.clone())
            }
            Err(shardkeeper::Error::ResetRefused(ResetRefused::LeasesHeld(h))) => held.extend(h),
            Err(e) => return Err(e.into()),
        }
    }
    if !held.is_empty() {
        return Err(Error::Refused(ResetRefused::LeasesHeld(held)));
    }
    let config = store.config();
    let question = format!(
        "set {} shard checkpoint(s) of group {} on stream {} to those exported from group {}{}?",
        plans.len(),
        config.group,
        config.stream,
        positions.group,
        if args.force {
            ", ending the live leases held on them"
        } else {
            ""
        }
    );
    if !args.yes && !confirm(&question) {
        return Err(Error::NotConfirmed);
    }
    for (plan, cp) in plans {
        let done = apply_reset(store, &plan, cp).await?;
        report.reset.reset.extend(done.reset);
        report.reset.changed.extend(done.changed);
        report.reset.skipped_depleted.extend(done.skipped_depleted);
    }
    if args.json {
        return Ok(serde_json::to_string_pretty(&report).expect("report serializes") + "\n");
    }
    let mut out = render::reset(&report.reset);
    if !report.unknown.is_empty() {
        out.push_str(&format!(
            "not in the group, left out: {}\n",
            report.unknown.join(", ")
        ));
    }
    if !report.without_checkpoint.is_empty() {
        out.push_str(&format!(
            "no checkpoint in the file, left as they are: {}\n",
            report.without_checkpoint.join(", ")
        ));
    }
    Ok(out)
}
