//! Applies planned actions with the state store's conditional writes.
//!
//! Each action is one conditional write on the state it was planned from, so
//! two overlapping rebalancers or reapers cannot undo each other: the second
//! one's stale actions lose their conditions and are counted as lost, never
//! reported as errors. Only throttling that outlasts the retry policy and
//! other service errors end an execution early.

use crate::group::{Action, ActionKind};
use crate::state::{EfoName, ShardScope, StateError, StateStore};
use crate::Result;
use std::collections::BTreeMap;
use std::time::Duration;

/// What an execution did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExecutionReport {
    /// Actions applied, by kind.
    pub applied: BTreeMap<ActionKind, u64>,
    /// Actions whose condition was lost (the state changed since planning), by kind.
    pub lost: BTreeMap<ActionKind, u64>,
    /// Leases freed by reaping their consumer.
    pub leases_released: u64,
    /// EFO consumers unlocked by reaping their holder.
    pub efo_released: u64,
    /// EFO consumers deregistered from Kinesis.
    pub efo_deregistered: Vec<EfoName>,
}

impl ExecutionReport {
    /// Applied actions of one kind.
    pub fn applied(&self, kind: ActionKind) -> u64 {
        self.applied.get(&kind).copied().unwrap_or(0)
    }

    /// Lost conditions in all.
    pub fn lost_total(&self) -> u64 {
        self.lost.values().sum()
    }

    fn count(&mut self, kind: ActionKind, applied: bool) {
        let map = if applied {
            &mut self.applied
        } else {
            &mut self.lost
        };
        *map.entry(kind).or_default() += 1;
    }

    /// Adds another report's counts to this one.
    pub fn merge(&mut self, other: ExecutionReport) {
        for (k, v) in other.applied {
            *self.applied.entry(k).or_default() += v;
        }
        for (k, v) in other.lost {
            *self.lost.entry(k).or_default() += v;
        }
        self.leases_released += other.leases_released;
        self.efo_released += other.efo_released;
        self.efo_deregistered.extend(other.efo_deregistered);
    }
}

/// Applies `actions` in order. `kinesis` is needed only for
/// [`Action::DeregisterEfo`]; without it those actions are skipped as lost.
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub async fn execute(
    store: &StateStore,
    kinesis: Option<&aws_sdk_kinesis::Client>,
    actions: &[Action],
    lease_term: Duration,
) -> Result<ExecutionReport> {
    let mut report = ExecutionReport::default();
    let group = ShardScope::Group;
    for action in actions {
        let applied = match action {
            Action::Assign {
                shard,
                to,
                from_state,
                holder,
            }
            | Action::ForceTake {
                shard,
                to,
                from_state,
                holder,
                ..
            } => {
                // The give tells `to` in its own transaction.
                let taken = store
                    .leases()
                    .give(shard, to, from_state, holder.as_deref(), lease_term)
                    .await?
                    .is_some();
                if let (true, Action::ForceTake { from, .. }) = (taken, action) {
                    tracing::info!(%shard, %from, %to, "claim not honoured in time: lease taken");
                }
                taken
            }
            Action::Claim {
                shard,
                from,
                to,
                counter,
            } => store.leases().claim(shard, to, from, *counter).await?,
            Action::CancelClaim { shard, claimant } => {
                store.leases().cancel_claim(shard, claimant).await?
            }
            Action::ClearPendingParent {
                shard,
                parent,
                rewind,
            } => {
                store
                    .shards()
                    .clear_pending_parent(&group, shard, parent, *rewind)
                    .await?
            }
            Action::ReapConsumer { seen, leases, efo } => {
                match store.consumers().reap(seen, leases, efo).await? {
                    Some(done) => {
                        report.leases_released += done.leases_released.len() as u64;
                        report.efo_released += done.efo_released.len() as u64;
                        true
                    }
                    None => false,
                }
            }
            Action::ReleaseEfo { lock } => store.efo_consumers().release(lock).await?,
            Action::DeregisterEfo {
                name,
                arn,
                lock_counter,
            } => match kinesis {
                Some(kinesis) => {
                    let removed = store
                        .efo_consumers()
                        .remove_idle(kinesis, name, arn, *lock_counter)
                        .await;
                    // An item naming a consumer that is not this pool's on
                    // this stream is left alone (and said), not deregistered.
                    let done = match removed {
                        Err(StateError::Validation { field, reason }) => {
                            tracing::warn!(efo = %name, field, %reason, "enhanced fan-out consumer kept");
                            false
                        }
                        other => other?,
                    };
                    if done {
                        report.efo_deregistered.push(name.clone());
                    }
                    done
                }
                None => false,
            },
            Action::RemoveShard { shard, counter } => {
                store
                    .shards()
                    .remove_depleted(&group, shard, *counter)
                    .await?
            }
            Action::RemoveScopedShard {
                scope,
                shard,
                updated,
            } => store.shards().remove_scoped(scope, shard, *updated).await?,
        };
        report.count(action.kind(), applied);
    }
    Ok(report)
}
