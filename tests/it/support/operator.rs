//! An operator's moves of a running group back to a time, through the CLI
//! crate's own functions, run again as their reports ask: the stress runs'
//! and the simulator's operator.

use shardkeeper::state::StateStore;
use std::collections::BTreeSet;
use std::time::Duration;

/// Moves the running group back to `to` (ms): a rewind (run again until
/// its report says it is finished) or a forced reset, which ends the live
/// leases, run again for the shards it reports changed meanwhile. Returns
/// the depleted shards a reset left alone (docs/OPERATIONS.md: "Depleted
/// shards are left alone").
pub async fn move_back(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    to: i64,
    rewind: bool,
) -> BTreeSet<String> {
    let target = crate::support::common::cli_target(store);
    if rewind {
        let args = shardkeeper_cli::args::RewindArgs {
            target,
            to: Some(to.to_string()),
            shard: None,
            to_sequence: None,
            change: crate::support::common::scripted(),
        };
        for _ in 0..200 {
            match shardkeeper_cli::rewind::rewind(store, kinesis, &args, |_| true).await {
                Ok(out) => {
                    let outcome: serde_json::Value = serde_json::from_str(&out).unwrap();
                    if outcome["report"]["finished"] == true {
                        return BTreeSet::new();
                    }
                }
                Err(e) => tracing::debug!(error = %e, "rewind failed; again"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("the rewind to {to} never finished");
    }
    // A forced reset: run again for the shards it reports changed since
    // it read them (as its report asks), until none is.
    let mut shards: Vec<Option<String>> = vec![None];
    let mut left_alone = BTreeSet::new();
    for _ in 0..200 {
        let Some(shard) = shards.pop() else {
            return left_alone;
        };
        let args = shardkeeper_cli::args::ResetArgs {
            target: target.clone(),
            to: format!("at-timestamp={to}"),
            shard: shard.clone(),
            consumer: None,
            efo: None,
            yes: true,
            force: true,
            dry_run: false,
            json: true,
        };
        match shardkeeper_cli::commands::reset(store, &args, |_| true).await {
            Ok(out) => {
                let report: serde_json::Value = serde_json::from_str(&out).unwrap();
                let ids = |field: &str| -> Vec<String> {
                    report[field]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                };
                left_alone.extend(ids("skipped_depleted"));
                shards.extend(ids("changed").into_iter().map(Some));
            }
            // A shard it reported changed was depleted since: a reset
            // leaves it alone.
            Err(shardkeeper_cli::error::Error::Refused(
                shardkeeper::group::ResetRefused::NothingToReset,
            )) if shard.is_some() => {
                left_alone.extend(shard);
            }
            Err(e) => {
                tracing::debug!(error = %e, "reset failed; again");
                shards.push(shard);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    panic!("the reset to {to} never went through");
}
