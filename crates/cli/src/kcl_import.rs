//! `import-kcl`: a KCL application's positions into a group.
//!
//! - Reads the KCL lease table twice, `--watch-ms` apart, and refuses while
//!   any lease's counter or owner moved (the KCL application still renews).
//! - Lists the stream's shards, plans the import (pure, in [`crate::kcl`]),
//!   and with `--dry-run` stops there.
//! - Has the group learn the stream's shards (as its rebalancer would),
//!   then moves each shard the table has a lease for with the guarded
//!   reset, refused as a whole while the group's own consumers hold leases
//!   unless `--force`.

use crate::args::ImportKclArgs;
use crate::commands::parse_time;
use crate::error::Error;
use crate::kcl::{plan_kcl_import, renewed_between, KclLease, KclPlan};
use crate::positions::{apply_moves, plan_moves};
use crate::render;
use serde::Serialize;
use shardkeeper::consumer::{discover_shards, list_stream_shards};
use shardkeeper::group::ResetReport;
use shardkeeper::state::{call_aws, Service, StateStore};
use std::time::Duration;

/// What an import of a KCL lease table did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KclImportReport {
    /// What the table asked for.
    pub plan: KclPlan,
    /// The guarded resets' outcome (none on a dry run).
    pub reset: Option<ResetReport>,
}

/// Every lease of a KCL lease table (one consistent Scan, paged).
pub async fn read_kcl_leases(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    retry: &shardkeeper::state::RetryPolicy,
) -> Result<Vec<KclLease>, Error> {
    let mut leases = Vec::new();
    let mut start = None;
    loop {
        let req = client
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take());
        let out = call_aws(retry, Service::DynamoDb, "Scan", || req.clone().send()).await?;
        for item in out.items() {
            leases.extend(KclLease::from_item(item)?);
        }
        match out.last_evaluated_key() {
            Some(key) if !key.is_empty() => start = Some(key.clone()),
            _ => return Ok(leases),
        }
    }
}

/// Imports the KCL lease table `--kcl-table` into the group; see the
/// module's documentation for the steps.
pub async fn import_kcl(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    dynamodb: &aws_sdk_dynamodb::Client,
    args: &ImportKclArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let at_timestamp = args
        .at_timestamp
        .as_deref()
        .map(|v| parse_time("--at-timestamp", v))
        .transpose()?;
    let config = store.config();
    let first = read_kcl_leases(dynamodb, &args.kcl_table, &config.retry).await?;
    tokio::time::sleep(Duration::from_millis(args.watch_ms)).await;
    let leases = read_kcl_leases(dynamodb, &args.kcl_table, &config.retry).await?;
    let renewed = renewed_between(&first, &leases);
    if !renewed.is_empty() {
        return Err(Error::KclRunning(renewed));
    }
    let (listed, _) = list_stream_shards(kinesis, &config.stream, &config.retry).await?;
    let plan = plan_kcl_import(&leases, &config.stream, &listed, at_timestamp)?;
    let mut report = KclImportReport { plan, reset: None };
    if !args.change.dry_run {
        // Nothing is written before the operator agreed: the shards the
        // group has no state for yet are recorded after.
        let snapshot = store.load_group().await?;
        let unrecorded = crate::rewind::unrecorded(&snapshot, &listed);
        // Refused (live leases without --force) before anything is asked.
        plan_moves(&snapshot, report.plan.moves.clone(), args.force)?;
        let question = format!(
            "set {} shard checkpoint(s) of group {} on stream {} to those of KCL table {}{}?",
            report.plan.moves.len(),
            config.group,
            config.stream,
            args.kcl_table,
            if args.force {
                ", ending the live leases held on them"
            } else {
                ""
            }
        );
        args.change.confirm(&question, confirm)?;
        let snapshot = if unrecorded > 0 {
            discover_shards(store, kinesis, &snapshot).await?;
            store.load_group().await?
        } else {
            snapshot
        };
        let moves = plan_moves(&snapshot, report.plan.moves.clone(), args.force)?;
        report.reset = Some(apply_moves(store, &snapshot, moves).await?);
    }
    if let Some(json) = args.change.json(&report) {
        return Ok(json);
    }
    Ok(render::kcl_import(&report))
}
