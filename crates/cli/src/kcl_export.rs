//! `export-kcl`: a group's positions written back into a KCL lease table,
//! for a rollback to the KCL application the group replaced.
//!
//! - Refuses while the group's consumers hold leases (stop the fleet
//!   first), and while the KCL table's leases are renewed (the KCL
//!   application runs already).
//! - Plans one lease a shard (pure: [`kcl_lease_item`]), in KCL's own item
//!   format (see [`crate::kcl`]): `leaseKey` the shard id, `checkpoint` and
//!   `checkpointSubSequenceNumber` where the group stands, no owner, the
//!   parents in `parentShardId`. A position KCL has no form for (a shard
//!   reset to a sequence number, nothing of it processed yet) refuses the
//!   export, naming the shards.
//! - With `--dry-run` stops there; otherwise asks, then writes each lease
//!   over the table's (which must exist: KCL made it, or `aws dynamodb
//!   create-table` with the hash key `leaseKey`, a string).

use crate::args::ExportKclArgs;
use crate::error::Error;
use crate::kcl::renewed_between;
use crate::kcl_import::read_kcl_leases;
use aws_sdk_dynamodb::types::AttributeValue;
use serde::Serialize;
use shardkeeper::state::{call_aws, Checkpoint, Service, ShardState, StateStore};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What an export did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct KclExportReport {
    /// Each shard's lease, as its `checkpoint` text (a sequence number
    /// with `/<sub-sequence>` inside an aggregate, or a KCL sentinel).
    pub leases: BTreeMap<String, String>,
    /// Leases written (none on a dry run).
    pub written: usize,
}

/// The KCL lease of `shard` where the group stands: its item, and its
/// checkpoint as text. `Err` names why KCL cannot hold it.
pub fn kcl_lease_item(
    shard: &ShardState,
) -> Result<(HashMap<String, AttributeValue>, String), String> {
    let (checkpoint, sub) = match (&shard.checkpoint, shard.depleted) {
        (_, true) | (Some(Checkpoint::ShardEnd), _) => ("SHARD_END".to_owned(), 0),
        (None | Some(Checkpoint::TrimHorizon), _) => ("TRIM_HORIZON".to_owned(), 0),
        (Some(Checkpoint::Latest), _) => ("LATEST".to_owned(), 0),
        (Some(Checkpoint::AtTimestamp(_)), _) => ("AT_TIMESTAMP".to_owned(), 0),
        (
            Some(Checkpoint::After {
                sequence,
                sub_sequence,
            }),
            _,
        ) => (sequence.as_str().to_owned(), *sub_sequence),
        (Some(Checkpoint::AtSequence(seq)), _) => {
            return Err(format!(
                "reset to {seq} with nothing of it processed: KCL checkpoints only after a record"
            ))
        }
    };
    let text = if sub > 0 {
        format!("{checkpoint}/{sub}")
    } else {
        checkpoint.clone()
    };
    let mut item = HashMap::from([
        (
            "leaseKey".to_owned(),
            AttributeValue::S(shard.shard_id.to_string()),
        ),
        ("checkpoint".to_owned(), AttributeValue::S(checkpoint)),
        (
            "checkpointSubSequenceNumber".to_owned(),
            AttributeValue::N(sub.to_string()),
        ),
        ("leaseCounter".to_owned(), AttributeValue::N("0".to_owned())),
        (
            "ownerSwitchesSinceCheckpoint".to_owned(),
            AttributeValue::N("0".to_owned()),
        ),
    ]);
    if !shard.parents.is_empty() {
        item.insert(
            "parentShardId".to_owned(),
            AttributeValue::Ss(shard.parents.iter().map(|p| p.to_string()).collect()),
        );
    }
    Ok((item, text))
}

/// Exports the group's positions into `--kcl-table`; see the module's
/// documentation for the steps.
pub async fn export_kcl(
    store: &StateStore,
    dynamodb: &aws_sdk_dynamodb::Client,
    args: &ExportKclArgs,
    confirm: impl FnOnce(&str) -> bool,
) -> Result<String, Error> {
    let config = store.config();
    let snapshot = store.load_group().await?;
    let now = store.now();
    let held: Vec<String> = snapshot
        .shards
        .iter()
        .filter(|s| s.owner.is_some() && s.expires.is_some_and(|e| e > now))
        .map(|s| s.shard_id.to_string())
        .collect();
    if !held.is_empty() {
        return Err(Error::bad(
            "--kcl-table",
            format!(
                "the group's consumers hold leases on {}: stop the fleet first",
                held.join(", ")
            ),
        ));
    }
    let mut report = KclExportReport::default();
    let mut items = Vec::new();
    let mut refused = Vec::new();
    for shard in &snapshot.shards {
        match kcl_lease_item(shard) {
            Ok((item, text)) => {
                report.leases.insert(shard.shard_id.to_string(), text);
                items.push(item);
            }
            Err(why) => refused.push(format!("{} ({why})", shard.shard_id)),
        }
    }
    if !refused.is_empty() {
        return Err(Error::bad("--kcl-table", refused.join("; ")));
    }
    if !args.change.dry_run {
        let first = read_kcl_leases(dynamodb, &args.kcl_table, &config.retry).await?;
        tokio::time::sleep(Duration::from_millis(args.watch_ms)).await;
        let second = read_kcl_leases(dynamodb, &args.kcl_table, &config.retry).await?;
        let renewed = renewed_between(&first, &second);
        if !renewed.is_empty() {
            return Err(Error::KclRunning(renewed));
        }
        let question = format!(
            "write {} lease(s) of group {} on stream {} into KCL table {}, over the leases there?",
            items.len(),
            config.group,
            config.stream,
            args.kcl_table
        );
        args.change.confirm(&question, confirm)?;
        for item in items {
            let req = dynamodb
                .put_item()
                .table_name(&args.kcl_table)
                .set_item(Some(item));
            call_aws(&config.retry, Service::DynamoDb, "PutItem", || {
                req.clone().send()
            })
            .await?;
            report.written += 1;
        }
    }
    if let Some(json) = args.change.json(&report) {
        return Ok(json);
    }
    let mut out = format!(
        "{} {} KCL lease(s) into {}:\n",
        if args.change.dry_run {
            "would write"
        } else {
            "wrote"
        },
        report.leases.len(),
        args.kcl_table
    );
    for (shard, cp) in &report.leases {
        out.push_str(&format!("  {shard} -> {cp}\n"));
    }
    Ok(out)
}
