//! Shard leases: take, renew, release (with hand-off), claim, remove, and who owns what.
//!
//! Every change of owner increments the shard's `counter`. Renewals,
//! checkpoints and releases are conditioned on `owner = me AND counter = n`,
//! so a consumer that lost its lease learns it at its next write
//! ([`StateError::LeaseLost`]) and can never overwrite its successor's work.

use crate::clock::duration_millis;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::model::{Claim, Lease, ShardState};
use crate::names::{ConsumerId, ShardId};
use crate::schema::{attr, ShardScope};
use crate::store::StateStore;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::BTreeMap;
use std::time::Duration;

/// A renewed lease, and the hand-off claim on it if another consumer asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The lease with its new expiry.
    pub lease: Lease,
    /// An open claim: checkpoint, then [`StateStore::release_lease`] to hand the shard over.
    pub claim: Option<Claim>,
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The shard is free.
    Free,
    /// The shard went straight to the consumer that claimed it.
    HandedOff(ConsumerId),
}

const LEASABLE: &str = "attribute_exists(pk) AND #depleted = :false \
     AND (attribute_not_exists(#pending) OR size(#pending) = :zero)";
const FENCE: &str = "#owner = :me AND #counter = :n";

fn lease_names(expr: Expr) -> Expr {
    expr.names(&[
        attr::OWNER,
        attr::EXPIRES,
        attr::COUNTER,
        attr::CLAIM_BY,
        attr::CLAIM_AT,
        attr::DEPLETED,
        attr::PENDING,
        attr::UPDATED,
    ])
}

/// Describes the stored lease for a `LeaseLost` error.
pub(crate) fn lost(shard: &ShardId, lease: &Lease, old: Option<&RawItem>) -> StateError {
    let reason = match old.map(ShardState::from_item) {
        None => "the shard has no state".to_owned(),
        Some(Err(e)) => e.to_string(),
        Some(Ok(state)) => format!(
            "held by {} at counter {} (this consumer {} had counter {})",
            state
                .owner
                .as_ref()
                .map(ConsumerId::as_str)
                .unwrap_or("nobody"),
            state.counter,
            lease.owner,
            lease.counter
        ),
    };
    StateError::LeaseLost {
        shard_id: shard.to_string(),
        reason,
    }
}

fn lease_from(item: &RawItem) -> Result<Lease> {
    let state = ShardState::from_item(item)?;
    match (state.owner, state.expires) {
        (Some(owner), Some(expires)) => Ok(Lease {
            shard_id: state.shard_id,
            owner,
            counter: state.counter,
            expires,
        }),
        _ => Err(StateError::Corrupt {
            key: state.shard_id.to_string(),
            reason: "lease write returned no owner".to_owned(),
        }),
    }
}

impl StateStore {
    fn lease_sk(shard: &ShardId) -> String {
        ShardScope::Group.shard_sk(shard)
    }

    /// Takes the lease if it is free or expired (or already this consumer's:
    /// re-acquiring moves the counter on, fencing out an earlier incarnation
    /// with the same id), the shard is not depleted and no parent is pending.
    /// Exactly one of many racing consumers gets `Some(lease)`; the others get `None`.
    pub async fn acquire_lease(
        &self,
        shard: &ShardId,
        consumer: &ConsumerId,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let condition = format!(
            "{LEASABLE} AND (attribute_not_exists(#owner) OR #expires < :now OR #owner = :me)"
        );
        self.set_owner(shard, consumer, None, &condition, term)
            .await
    }

    /// Gives the lease to `new_owner` if its counter is still `expected_counter`
    /// (the state the caller decided on): the rebalancer's assignment and the
    /// forced take after a hand-off timeout. `None` if the shard changed since,
    /// is depleted, or has a pending parent.
    pub async fn take_lease(
        &self,
        shard: &ShardId,
        new_owner: &ConsumerId,
        expected_counter: u64,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let condition = format!("{LEASABLE} AND #counter = :n");
        self.set_owner(shard, new_owner, Some(expected_counter), &condition, term)
            .await
    }

    /// Makes `owner` the lease holder for `term` under `condition`, moving the counter on.
    async fn set_owner(
        &self,
        shard: &ShardId,
        owner: &ConsumerId,
        expected_counter: Option<u64>,
        condition: &str,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let now = self.now();
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(now))
            .value("until", n(now + duration_millis(term)))
            .value("one", n(1))
            .value("zero", n(0))
            .value("false", AttributeValue::Bool(false));
        if let Some(counter) = expected_counter {
            expr = expr.value("n", n(counter));
        }
        let req = self.update_req(
            &Self::lease_sk(shard),
            &expr,
            "SET #owner = :me, #expires = :until, #updated = :now ADD #counter :one REMOVE #claim_by, #claim_at",
            Some(condition),
        );
        match self.conditional_update(req).await? {
            Ok(item) => lease_from(&item).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// Extends the lease by `term` from now. Returns the open hand-off claim,
    /// if any; [`StateError::LeaseLost`] if the lease is no longer held.
    pub async fn renew_lease(&self, lease: &Lease, term: Duration) -> Result<Renewal> {
        let now = self.now();
        let expr = lease_names(Expr::new())
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter))
            .value("now", n(now))
            .value("until", n(now + duration_millis(term)));
        let req = self.update_req(
            &Self::lease_sk(&lease.shard_id),
            &expr,
            "SET #expires = :until, #updated = :now",
            Some(FENCE),
        );
        match self.conditional_update(req).await? {
            Ok(item) => {
                let state = ShardState::from_item(&item)?;
                Ok(Renewal {
                    lease: Lease {
                        expires: state.expires.unwrap_or(now),
                        ..lease.clone()
                    },
                    claim: state.claim,
                })
            }
            Err(old) => Err(lost(&lease.shard_id, lease, old.as_ref())),
        }
    }

    /// Releases the lease. If another consumer claimed it, the shard goes
    /// straight to that consumer for `term` (the hand-off), else it is free.
    /// Checkpoint before releasing. [`StateError::LeaseLost`] if not held.
    pub async fn release_lease(&self, lease: &Lease, term: Duration) -> Result<Released> {
        let sk = Self::lease_sk(&lease.shard_id);
        for _ in 0..4 {
            let now = self.now();
            let expr = lease_names(Expr::new())
                .value("me", s(lease.owner.as_str()))
                .value("n", n(lease.counter))
                .value("now", n(now))
                .value("one", n(1));
            let free = self.update_req(
                &sk,
                &expr,
                "SET #updated = :now ADD #counter :one REMOVE #owner, #expires",
                Some("#owner = :me AND #counter = :n AND attribute_not_exists(#claim_by)"),
            );
            let old = match self.conditional_update(free).await? {
                Ok(_) => return Ok(Released::Free),
                Err(old) => old,
            };
            let claimed = old
                .as_ref()
                .map(ShardState::from_item)
                .transpose()?
                .filter(|st| {
                    st.owner.as_ref() == Some(&lease.owner) && st.counter == lease.counter
                });
            let Some(state) = claimed else {
                return Err(lost(&lease.shard_id, lease, old.as_ref()));
            };
            let Some(claim) = state.claim else { continue };
            let expr = expr
                .value("by", s(claim.by.as_str()))
                .value("until", n(now + duration_millis(term)));
            let hand_off = self.update_req(
                &sk,
                &expr,
                "SET #owner = :by, #expires = :until, #updated = :now ADD #counter :one REMOVE #claim_by, #claim_at",
                Some("#owner = :me AND #counter = :n AND #claim_by = :by"),
            );
            if self.conditional_update(hand_off).await?.is_ok() {
                tracing::debug!(shard = %lease.shard_id, from = %lease.owner, to = %claim.by, "lease handed off");
                self.notify_assigned(&claim.by).await?;
                return Ok(Released::HandedOff(claim.by));
            }
        }
        Err(lost(&lease.shard_id, lease, None))
    }

    /// Asks for a lease held by another consumer: the owner sees the claim at
    /// its next renewal, checkpoints and hands the shard over. `false` if the
    /// lease changed since `expected_counter`, is unowned, already claimed, or
    /// held by the claimant itself.
    pub async fn claim_lease(
        &self,
        shard: &ShardId,
        claimant: &ConsumerId,
        expected_counter: u64,
    ) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("n", n(expected_counter))
            .value("now", n(self.now()));
        let req = self.update_req(
            &Self::lease_sk(shard),
            &expr,
            "SET #claim_by = :by, #claim_at = :now, #updated = :now",
            Some("#counter = :n AND attribute_exists(#owner) AND #owner <> :by AND attribute_not_exists(#claim_by)"),
        );
        Ok(self.conditional_update(req).await?.is_ok())
    }

    /// Withdraws `claimant`'s claim on the shard (the claimant died, or the
    /// plan changed); `false` if it holds no claim there.
    pub async fn cancel_claim(&self, shard: &ShardId, claimant: &ConsumerId) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("now", n(self.now()));
        let req = self.update_req(
            &Self::lease_sk(shard),
            &expr,
            "SET #updated = :now REMOVE #claim_by, #claim_at",
            Some("#claim_by = :by"),
        );
        Ok(self.conditional_update(req).await?.is_ok())
    }

    /// Frees the shard if `owner` holds it (and, when given, at `counter`):
    /// for operators and the reaper. `true` if it was removed.
    pub async fn remove_lease_owner(
        &self,
        shard: &ShardId,
        owner: &ConsumerId,
        counter: Option<u64>,
    ) -> Result<bool> {
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(self.now()))
            .value("one", n(1));
        let condition = match counter {
            Some(c) => {
                expr = expr.value("n", n(c));
                FENCE
            }
            None => "#owner = :me",
        };
        let req = self.update_req(
            &Self::lease_sk(shard),
            &expr,
            "SET #updated = :now ADD #counter :one REMOVE #owner, #expires, #claim_by, #claim_at",
            Some(condition),
        );
        Ok(self.conditional_update(req).await?.is_ok())
    }

    /// The owner of the shard's lease (expired or not), `None` when free;
    /// [`StateError::NotFound`] if the shard has no state.
    pub async fn get_lease_owner(&self, shard: &ShardId) -> Result<Option<ConsumerId>> {
        Ok(self.get_shard(&ShardScope::Group, shard).await?.owner)
    }

    /// The shards this consumer holds a live lease on (not expired, not depleted).
    pub async fn owned_shards(&self, consumer: &ConsumerId) -> Result<Vec<ShardState>> {
        let now = self.now();
        Ok(self
            .list_shards(&ShardScope::Group)
            .await?
            .into_iter()
            .filter(|sh| !sh.depleted && sh.live_lease(now).is_some_and(|l| &l.owner == consumer))
            .collect())
    }

    /// Consumers that hold at least one live lease, with their shards.
    pub async fn list_active_workers(&self) -> Result<BTreeMap<ConsumerId, Vec<ShardState>>> {
        let now = self.now();
        let mut workers: BTreeMap<ConsumerId, Vec<ShardState>> = BTreeMap::new();
        for shard in self.list_shards(&ShardScope::Group).await? {
            if let Some(lease) = shard.live_lease(now).filter(|_| !shard.depleted) {
                workers.entry(lease.owner).or_default().push(shard);
            }
        }
        Ok(workers)
    }
}
