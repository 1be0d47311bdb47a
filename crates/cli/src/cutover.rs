//! `cutover`: a consumer moved between an event source mapping and the
//! worker fleet, either way, losing nothing.
//!
//! - From the mapping (disabled first, its last invocations over): each
//!   shard's fleet position is the furthest progress the mapping's
//!   consumer stored there (its batches' and its floor's; with a
//!   ParallelizationFactor of 1 a shard's batches run one after another,
//!   so every record up to it is done). A shard with no progress stored
//!   starts at `TRIM_HORIZON`. The positions are set with the guarded
//!   reset, as `import` sets them.
//! - To the mapping (the fleet stopped first): each shard's fleet
//!   checkpoint becomes a floor on the mapping's consumer, so its batches
//!   skip the records the fleet processed; the mapping is created at the
//!   earliest arrival time any shard still needs (less a second), or at
//!   `TRIM_HORIZON` if a shard has not started.
//!
//! The decisions per shard are pure (`fleet_start`, `esm_floor`,
//! `mapping_start`).

use crate::args::{ChangeOptions, Target};
use crate::commands::parse_time;
use crate::error::Error;
use crate::positions::{apply_moves, plan_moves};
use clap::{Args, Subcommand};
use serde::Serialize;
use shardkeeper::consumer::{discover_shards, list_stream_shards};
use shardkeeper::group::{plan_reset, ResetRefused, ResetReport};
use shardkeeper::state::{
    call_kinesis, kinesis_stream_summary, Checkpoint, Clock as _, EpochMillis, ForStream,
    SequenceNumber, ShardId, ShardProgress, ShardScope, ShardState, StateStore, SystemClock,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// `cutover`.
#[derive(Debug, Clone, Args)]
pub struct CutoverArgs {
    /// Which way.
    #[command(subcommand)]
    pub direction: CutoverDirection,
}

/// Which way a cut-over goes.
#[derive(Debug, Clone, Subcommand)]
pub enum CutoverDirection {
    /// From an event source mapping (disabled first) to the worker fleet:
    /// sets the fleet group's positions to what the mapping's consumer
    /// completed in each shard.
    FromEsm(CutoverFromEsmArgs),
    /// From the worker fleet (stopped first) to an event source mapping:
    /// sets a floor on each of the mapping's consumer's shards and prints
    /// the time to create the mapping at.
    ToEsm(CutoverToEsmArgs),
}

/// An event-source-mapped processor's consumer: where it keeps its
/// progress, and under which name.
#[derive(Debug, Clone, Args)]
pub struct EsmConsumer {
    /// The group the processor keeps its progress in (its
    /// `SHARDKEEPER_GROUP`).
    #[arg(long)]
    pub esm_group: String,
    /// The processor's consumer name (`ProcessingOptions::consumer`; by
    /// default the name of the function the mapping invokes).
    #[arg(long)]
    pub consumer: String,
}

/// `cutover from-esm`.
#[derive(Debug, Clone, Args)]
pub struct CutoverFromEsmArgs {
    /// The fleet's group (and with `--kinesis-endpoint-url`, where its
    /// stream is).
    #[command(flatten)]
    pub target: Target,
    /// The event-source-mapped processor's consumer.
    #[command(flatten)]
    pub esm: EsmConsumer,
    /// Count only progress stored at or after this time (RFC 3339 or ms):
    /// when the mapping's ParallelizationFactor was last set to 1.
    #[arg(long)]
    pub since: Option<String>,
    /// The event source mapping's UUID: Lambda's `GetEventSourceMapping`
    /// must show it disabled, reading the group's stream, at a
    /// ParallelizationFactor of 1, or nothing is written.
    #[arg(long)]
    pub mapping: Option<String>,
    /// Lambda's endpoint for `--mapping` (a local emulator; default: the
    /// region's).
    #[arg(long)]
    pub lambda_endpoint_url: Option<String>,
    /// Move even while the fleet's registered consumers hold leases.
    #[arg(long)]
    pub force: bool,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// `cutover to-esm`.
#[derive(Debug, Clone, Args)]
pub struct CutoverToEsmArgs {
    /// The fleet's group (and with `--kinesis-endpoint-url`, where its
    /// stream is).
    #[command(flatten)]
    pub target: Target,
    /// The event-source-mapped processor's consumer.
    #[command(flatten)]
    pub esm: EsmConsumer,
    /// Dry run, confirmation, output.
    #[command(flatten)]
    pub change: ChangeOptions,
}

/// How long a floor stays: longer than any overlap a new mapping reads.
const FLOOR_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the fleet starts a shard of which the mapping's consumer completed
/// `progress`: after the furthest record done; at `TRIM_HORIZON` if it never
/// stored progress there. `Err` if it stored progress only before the time
/// asked for.
pub fn fleet_start(progress: &ShardProgress) -> Result<Checkpoint, &'static str> {
    match (&progress.furthest, progress.stored, progress.counted) {
        (Some(cp), _, counted) if counted > 0 => Ok(cp.clone()),
        (_, 0, _) => Ok(Checkpoint::TrimHorizon),
        _ => Err("it stored progress only before --since"),
    }
}

/// The floor the fleet's state of a shard sets on the mapping's consumer:
/// the records it processed (all of a depleted shard; none past a pin).
pub fn esm_floor(state: &ShardState) -> Option<Checkpoint> {
    if state.depleted {
        return Some(Checkpoint::ShardEnd);
    }
    match &state.checkpoint {
        Some(
            cp @ (Checkpoint::After { .. } | Checkpoint::ShardEnd | Checkpoint::AtSequence(_)),
        ) => Some(cp.clone()),
        _ => None,
    }
}

/// What a new mapping must read of a shard the fleet left at `state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MappingStart {
    /// Nothing (read to its end).
    Nothing,
    /// From its oldest record.
    TrimHorizon,
    /// From the records that arrived at this time.
    At(EpochMillis),
    /// From this record's arrival time (to be looked up).
    ArrivalOf(SequenceNumber),
}

/// Where a new mapping must start reading a shard the fleet left at
/// `state` (`now`: the time a `LATEST` start not pinned yet stands for).
pub fn mapping_start(state: Option<&ShardState>, now: EpochMillis) -> MappingStart {
    let Some(state) = state else {
        return MappingStart::TrimHorizon;
    };
    if state.depleted {
        return MappingStart::Nothing;
    }
    match &state.checkpoint {
        None | Some(Checkpoint::TrimHorizon) => MappingStart::TrimHorizon,
        Some(Checkpoint::Latest) => MappingStart::At(now),
        Some(Checkpoint::AtTimestamp(t)) => MappingStart::At(*t),
        Some(Checkpoint::ShardEnd) => MappingStart::Nothing,
        Some(Checkpoint::After { sequence, .. }) => match state.checkpoint_arrival {
            Some(t) => MappingStart::At(t),
            None => MappingStart::ArrivalOf(sequence.clone()),
        },
        Some(Checkpoint::AtSequence(n)) => MappingStart::ArrivalOf(n.clone()),
    }
}

/// What `cutover from-esm` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FromEsmReport {
    /// Each shard's fleet position.
    pub positions: BTreeMap<String, String>,
    /// Shards the mapping's consumer stored no progress for: the fleet
    /// reads them from `TRIM_HORIZON` (records older than its progress
    /// items' two days are read again).
    pub from_trim_horizon: Vec<String>,
    /// The guarded resets' outcome (none on a dry run).
    pub reset: Option<ResetReport>,
}

/// From the event source mapping to the fleet; see the module docs.
pub async fn from_esm(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    lambda: &aws_sdk_lambda::Client,
    args: &CutoverFromEsmArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let since = args
        .since
        .as_deref()
        .map(|t| parse_time("--since", t))
        .transpose()?;
    let config = store.config();
    let esm = store.beside(&args.esm.esm_group)?;
    let arn = kinesis_stream_summary(kinesis, &config.stream, &config.retry)
        .await?
        .arn;
    if let Some(uuid) = &args.mapping {
        crate::mapping::check(lambda, uuid, &arn).await?;
    }
    let (listed, _) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let mut report = FromEsmReport::default();
    let mut wanted = Vec::new();
    let mut refused = Vec::new();
    for spec in &listed {
        let progress = esm
            .record_state()
            .shard_progress(&args.esm.consumer, &arn, spec.shard_id.as_str(), since)
            .await?;
        match fleet_start(&progress) {
            Ok(cp) => {
                if progress.stored == 0 {
                    report.from_trim_horizon.push(spec.shard_id.to_string());
                }
                report
                    .positions
                    .insert(spec.shard_id.to_string(), cp.to_string());
                wanted.push((spec.shard_id.clone(), cp));
            }
            Err(why) => refused.push(format!("{} ({why})", spec.shard_id)),
        }
    }
    if !refused.is_empty() {
        return Err(Error::bad(
            "--since",
            format!(
                "no progress of the mapping's consumer counts for shard(s) {}",
                refused.join(", ")
            ),
        ));
    }
    if !args.change.dry_run {
        // Nothing is written before the operator agreed: refused (live
        // leases without --force) first, the shards the group has no state
        // for yet recorded after.
        let snapshot = store.load_group().await?;
        plan_moves(&snapshot, wanted.clone(), args.force)?;
        let question = format!(
            "set {} shard position(s) of group {} on stream {} to what consumer {} completed under the event source mapping (the mapping must be disabled and its last invocations over)?",
            wanted.len(),
            config.group,
            config.stream,
            args.esm.consumer
        );
        args.change.confirm(&question, confirm)?;
        let snapshot = if crate::rewind::unrecorded(&snapshot, &listed) > 0 {
            discover_shards(store, kinesis, &snapshot).await?;
            store.load_group().await?
        } else {
            snapshot
        };
        let moves = plan_moves(&snapshot, wanted, args.force)?;
        report.reset = Some(apply_moves(store, &snapshot, moves).await?);
    }
    if let Some(json) = args.change.json(&report) {
        return Ok(json);
    }
    let mut out = format!(
        "{} the fleet's positions from consumer {}'s progress:\n",
        if args.change.dry_run {
            "would set"
        } else {
            "set"
        },
        args.esm.consumer
    );
    for (shard, cp) in &report.positions {
        out.push_str(&format!("  {shard} -> {cp}\n"));
    }
    if !report.from_trim_horizon.is_empty() {
        out.push_str(&format!(
            "no progress stored, read from TRIM_HORIZON: {}\n",
            report.from_trim_horizon.join(", ")
        ));
    }
    if let Some(reset) = &report.reset {
        out.push_str(&crate::render::reset(reset));
    }
    Ok(out)
}

/// What `cutover to-esm` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ToEsmReport {
    /// Each shard's floor on the mapping's consumer.
    pub floors: BTreeMap<String, String>,
    /// Where to create the mapping: `AT_TIMESTAMP` or `TRIM_HORIZON`.
    pub starting_position: String,
    /// With `AT_TIMESTAMP`: the time (ms).
    pub starting_timestamp_ms: Option<EpochMillis>,
    /// The command that creates the mapping there.
    pub command: String,
    /// The floors were written (not on a dry run).
    pub written: bool,
}

/// The arrival time of record `sequence` of `shard`.
async fn arrival_of(
    kinesis: &aws_sdk_kinesis::Client,
    store: &StateStore,
    shard: &ShardId,
    sequence: &SequenceNumber,
) -> Result<Option<EpochMillis>, Error> {
    let config = store.config();
    let req = kinesis
        .get_shard_iterator()
        .for_stream(&config.stream)
        .shard_id(shard.as_str())
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::AtSequenceNumber)
        .starting_sequence_number(sequence.as_str());
    let it = call_kinesis(&config.retry, "GetShardIterator", || req.clone().send()).await?;
    let Some(iterator) = it.shard_iterator() else {
        return Ok(None);
    };
    let req = kinesis.get_records().shard_iterator(iterator).limit(1);
    let out = call_kinesis(&config.retry, "GetRecords", || req.clone().send()).await?;
    Ok(out
        .records()
        .first()
        .and_then(|r| r.approximate_arrival_timestamp())
        .and_then(|t| t.to_millis().ok()))
}

/// From the fleet to the event source mapping; see the module docs.
pub async fn to_esm(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    args: &CutoverToEsmArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let config = store.config();
    let esm = store.beside(&args.esm.esm_group)?;
    let snapshot = store.load_group().await?;
    // Refused as a reset of every shard would be: while registered
    // consumers hold leases.
    if let Err(shardkeeper::Error::ResetRefused(held @ ResetRefused::LeasesHeld(_))) =
        plan_reset(&snapshot, &ShardScope::Group, None, false)
    {
        return Err(Error::Refused(held));
    }
    let arn = kinesis_stream_summary(kinesis, &config.stream, &config.retry)
        .await?
        .arn;
    let (listed, _) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let mut report = ToEsmReport::default();
    let mut floors = Vec::new();
    let (mut trim_horizon, mut earliest) = (false, None::<EpochMillis>);
    for spec in &listed {
        let state = snapshot.shards.iter().find(|s| s.shard_id == spec.shard_id);
        if let Some(floor) = state.and_then(esm_floor) {
            report
                .floors
                .insert(spec.shard_id.to_string(), floor.to_string());
            floors.push((spec.shard_id.clone(), floor));
        }
        let at = match mapping_start(state, SystemClock.now_millis()) {
            MappingStart::Nothing => continue,
            MappingStart::TrimHorizon => None,
            MappingStart::At(t) => Some(t),
            MappingStart::ArrivalOf(seq) => {
                arrival_of(kinesis, store, &spec.shard_id, &seq).await?
            }
        };
        match at {
            Some(t) => earliest = Some(earliest.map_or(t, |e| e.min(t))),
            None => trim_horizon = true,
        }
    }
    // Arrival times may be whole seconds; the floors skip the overlap.
    let start = earliest.filter(|_| !trim_horizon).map(|t| t - 1_000);
    report.starting_position = match start {
        Some(_) => "AT_TIMESTAMP".to_owned(),
        None => "TRIM_HORIZON".to_owned(),
    };
    report.starting_timestamp_ms = start;
    report.command = format!(
        "aws lambda create-event-source-mapping --function-name {} --event-source-arn {arn} \
         --starting-position {}{} --function-response-types ReportBatchItemFailures",
        args.esm.consumer,
        report.starting_position,
        start.map_or(String::new(), |t| format!(
            " --starting-position-timestamp {}",
            t as f64 / 1000.0
        )),
    );
    if !args.change.dry_run {
        let question = format!(
            "set {} floor(s) on consumer {} from group {}'s checkpoints (the fleet must be stopped)?",
            floors.len(),
            args.esm.consumer,
            config.group
        );
        args.change.confirm(&question, confirm)?;
        for (shard, floor) in &floors {
            esm.record_state()
                .set_shard_floor(&args.esm.consumer, &arn, shard.as_str(), floor, FLOOR_TTL)
                .await?;
        }
        report.written = true;
    }
    if let Some(json) = args.change.json(&report) {
        return Ok(json);
    }
    let mut out = format!(
        "{} floor(s) on consumer {}:\n",
        if report.written { "set" } else { "would set" },
        args.esm.consumer
    );
    for (shard, floor) in &report.floors {
        out.push_str(&format!("  {shard} up to {floor}\n"));
    }
    out.push_str(&format!(
        "create the mapping with the processor keeping its progress in group {}:\n  {}\n",
        args.esm.esm_group, report.command
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(furthest: Option<&str>, stored: usize, counted: usize) -> ShardProgress {
        let mut p = ShardProgress::default();
        p.furthest = furthest.map(|s| Checkpoint::after(s).unwrap());
        p.stored = stored;
        p.counted = counted;
        p
    }

    #[test]
    fn the_fleet_starts_after_the_furthest_progress_or_at_the_oldest_record() {
        assert_eq!(
            fleet_start(&progress(Some("90"), 3, 2)),
            Ok(Checkpoint::after("90").unwrap())
        );
        assert_eq!(
            fleet_start(&progress(None, 0, 0)),
            Ok(Checkpoint::TrimHorizon)
        );
        assert!(fleet_start(&progress(Some("90"), 3, 0)).is_err());
    }
}
