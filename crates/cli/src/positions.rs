//! `export` and `import`: a group's positions (each shard's checkpoint) as
//! a JSON file, read from one group and set on another with the guarded
//! reset (refused while registered consumers hold the leases, unless
//! forced; each shard moved only if unchanged since read).

use crate::args::ImportArgs;
use crate::error::Error;
use crate::render;
use serde::{Deserialize, Serialize};
use shardkeeper::group::{apply_reset, plan_reset, ResetPlan, ResetRefused, ResetReport};
use shardkeeper::state::{
    Checkpoint, EpochMillis, GroupSnapshot, ShardId, ShardScope, ShardSpec, ShardState, StateStore,
    StreamAddress,
};
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

/// Checkpoints to set on a group's shards, planned with the guarded reset:
/// shards the group does not have are left out, depleted ones left alone.
#[derive(Debug, Clone)]
pub(crate) struct Moves {
    plans: Vec<(ResetPlan, Checkpoint)>,
    /// Shards the group does not have.
    pub(crate) unknown: Vec<String>,
    skipped_depleted: Vec<ShardId>,
}

impl Moves {
    /// Shards that will move.
    pub(crate) fn len(&self) -> usize {
        self.plans.len()
    }

    /// The shards that will move, each once.
    pub(crate) fn shards(&self) -> impl Iterator<Item = &str> {
        self.plans
            .iter()
            .flat_map(|(plan, _)| plan.shards.iter().map(|s| s.shard_id.as_str()))
    }
}

/// Plans moving each shard of `wanted` to its checkpoint, in order: refused
/// as a whole (nothing written) while registered consumers hold any of the
/// leases, unless `force`.
pub(crate) fn plan_moves(
    snapshot: &GroupSnapshot,
    wanted: impl IntoIterator<Item = (ShardId, Checkpoint)>,
    force: bool,
) -> Result<Moves, Error> {
    let mut moves = Moves {
        plans: Vec::new(),
        unknown: Vec::new(),
        skipped_depleted: Vec::new(),
    };
    let mut held = Vec::new();
    for (shard, cp) in wanted {
        match plan_reset(snapshot, &ShardScope::Group, Some(&shard), force) {
            Ok(plan) => moves.plans.push((plan, cp)),
            Err(shardkeeper::Error::ResetRefused(ResetRefused::UnknownShard(s))) => {
                moves.unknown.push(s.to_string())
            }
            Err(shardkeeper::Error::ResetRefused(ResetRefused::NothingToReset)) => {
                moves.skipped_depleted.push(shard)
            }
            Err(shardkeeper::Error::ResetRefused(ResetRefused::LeasesHeld(h))) => held.extend(h),
            Err(e) => return Err(e.into()),
        }
    }
    if !held.is_empty() {
        return Err(Error::Refused(ResetRefused::LeasesHeld(held)));
    }
    Ok(moves)
}

/// Applies `moves`, each shard only if unchanged since read. A shard moved
/// to `SHARD_END` is also marked depleted, which makes its children (the
/// snapshot's shards naming it as a parent) leasable.
pub(crate) async fn apply_moves(
    store: &StateStore,
    snapshot: &GroupSnapshot,
    moves: Moves,
) -> Result<ResetReport, Error> {
    let mut report = ResetReport {
        skipped_depleted: moves.skipped_depleted,
        ..ResetReport::default()
    };
    for (plan, cp) in moves.plans {
        let done = apply_reset(store, &plan, &cp).await?;
        if cp == Checkpoint::ShardEnd {
            for shard in &done.reset {
                let children: Vec<ShardSpec> = snapshot
                    .shards
                    .iter()
                    .filter(|s| s.parents.contains(shard))
                    .map(ShardState::spec)
                    .collect();
                store
                    .checkpoints()
                    .mark_depleted_unleased(&ShardScope::Group, shard, &children)
                    .await?;
            }
        }
        report.reset.extend(done.reset);
        report.changed.extend(done.changed);
        report.skipped_depleted.extend(done.skipped_depleted);
    }
    Ok(report)
}

/// How far ahead of this machine's clock a time in a positions file may
/// be (clock skew between the machine that wrote it and this one).
const FUTURE_SKEW_MS: EpochMillis = 5 * 60 * 1000;

/// Refuses a positions file of another stream (its sequence numbers mean
/// nothing on this one), or with a time still to come (a typo, or a file
/// from a machine whose clock is far off): nothing is written.
fn refuse_foreign(
    positions: &Positions,
    wanted: &BTreeMap<ShardId, Checkpoint>,
    stream: &StreamAddress,
    now: EpochMillis,
) -> Result<(), Error> {
    let theirs = StreamAddress::parse(&positions.stream)
        .map_err(|e| Error::bad("--file", format!("its stream: {e}")))?;
    if theirs.name() != stream.name() {
        return Err(Error::bad(
            "--file",
            format!(
                "exported from stream {}, not {}: positions of one stream mean nothing on another",
                positions.stream, stream
            ),
        ));
    }
    for (shard, cp) in wanted {
        if let Checkpoint::AtTimestamp(t) = cp {
            if *t > now + FUTURE_SKEW_MS {
                return Err(Error::bad(
                    "--file",
                    format!("shard {shard}: AT_TIMESTAMP {t} is still to come"),
                ));
            }
        }
    }
    Ok(())
}

/// Sets the group's checkpoints to a positions file's: refused as a whole
/// (nothing written) while registered consumers hold any of the leases,
/// unless `--force`; prints the plan and stops with `--dry-run`; asks
/// `confirm` unless `--yes`; then moves each shard the group has with the
/// guarded reset.
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
    let config = store.config();
    refuse_foreign(&positions, &wanted, &config.stream, store.now())?;
    let snapshot = store.load_group().await?;
    let moves = plan_moves(&snapshot, wanted, args.force)?;
    let question = format!(
        "set {} shard checkpoint(s) of group {} on stream {} to those exported from group {}{}?",
        moves.len(),
        config.group,
        config.stream,
        positions.group,
        if args.force {
            ", ending the live leases held on them"
        } else {
            ""
        }
    );
    if args.dry_run {
        return Ok(crate::commands::dry_run(&question, moves.shards()));
    }
    if !args.yes && !confirm(&question) {
        return Err(Error::NotConfirmed);
    }
    let unknown = moves.unknown.clone();
    let report = ImportReport {
        reset: apply_moves(store, &snapshot, moves).await?,
        unknown,
        without_checkpoint: positions
            .shards
            .iter()
            .filter(|p| p.checkpoint.is_none())
            .map(|p| p.shard.clone())
            .collect(),
    };
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
