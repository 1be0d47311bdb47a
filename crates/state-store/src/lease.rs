//! Shard leases: take, renew, release (with hand-off), claim, remove, and who owns what.
//!
//! Every change of owner increments the shard's `counter`. Renewals,
//! checkpoints and releases are conditioned on `owner = me AND counter = n`,
//! so a consumer that lost its lease learns it at its next write
//! ([`StateError::LeaseLost`]) and can never overwrite its successor's work.

use crate::clock::{duration_millis, EpochMillis};
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::model::{Claim, Lease, ShardState};
use crate::names::{ConsumerId, ShardId};
use crate::schema::{attr, ShardScope};
use crate::store::{At, StateStore};
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::BTreeMap;
use std::time::Duration;

/// A renewed lease, and the hand-off claim on it if another consumer asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renewal {
    /// The lease with its new expiry.
    pub lease: Lease,
    /// An open claim: checkpoint, then [`Leases::release`] to hand the shard over.
    pub claim: Option<Claim>,
}

/// The state of a lease a take was decided on: the take applies only if the
/// lease is still exactly so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeFrom {
    /// Free, or expired as an observer judged it: the counter and the
    /// renewal seen (`expires` as stored, `None` when the lease had no
    /// owner). A renewal since changes `expires`, and the take fails.
    Stale {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen.
        expires: Option<EpochMillis>,
    },
    /// Claimed by the taker, and not handed over nor renewed for a term
    /// as an observer judged it: taken while the claim stands, on the
    /// counter and the renewal seen (a renewal since fails the take).
    Claimed {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen.
        expires: Option<EpochMillis>,
    },
    /// Already in the taker's name (given by the rebalancer, or held by
    /// an earlier process under the same consumer id): taken at the counter
    /// seen, which fences out whoever held it under that name. With
    /// `expires`, only if it was not renewed since (a lease an earlier
    /// process under the name may still hold, waited out for a term).
    Named {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen, when the take must find it unchanged.
        expires: Option<EpochMillis>,
    },
}

impl TakeFrom {
    /// The lease counter the take was decided on.
    pub fn counter(&self) -> u64 {
        match self {
            TakeFrom::Stale { counter, .. }
            | TakeFrom::Claimed { counter, .. }
            | TakeFrom::Named { counter, .. } => *counter,
        }
    }
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
        attr::HOLDER,
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

/// Shard leases (see the module docs). From [`StateStore::leases`].
#[derive(Debug, Clone, Copy)]
pub struct Leases<'a> {
    pub(crate) store: &'a StateStore,
}

impl Leases<'_> {
    async fn lease_at(self, shard: &ShardId) -> Result<At> {
        self.store.shard_at(&ShardScope::Group, shard).await
    }

    /// Takes the lease if it is free or expired by this writer's wall clock
    /// (or already this consumer's: re-acquiring moves the counter on), the
    /// shard is not depleted and no parent is pending. Exactly one of many
    /// racing consumers gets `Some(lease)`; the others get `None`.
    ///
    /// Expiry is judged here by comparing the stored `expires` with this
    /// writer's clock, so clock skew between machines moves it: a tool's and
    /// a test's convenience. A consumer group never takes leases this way;
    /// its rebalancer judges expiry by observation and takes with
    /// [`Leases::take`].
    pub async fn acquire(
        self,
        shard: &ShardId,
        consumer: &ConsumerId,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let condition = format!(
            "{LEASABLE} AND (attribute_not_exists(#owner) OR #expires < :now OR #owner = :me)"
        );
        let expr = self.owner_expr(consumer, None, term);
        match self.set_owner(shard, expr, None, &condition).await? {
            Ok(lease) => Ok(Some(lease)),
            Err(_) => Ok(None),
        }
    }

    /// Gives the lease to `new_owner` if it is still exactly as the caller
    /// saw it (`from`): the rebalancer's assignment of a free or expired
    /// lease, its forced take after a hand-off timeout, a consumer taking up
    /// a lease in its name. `holder` is the holding token of the process the
    /// lease is for (its heartbeat token), stored with the lease.
    ///
    /// Safe to apply twice: when the request's answer was lost and the retry
    /// finds the lease already taken by this very take (owner, holder and
    /// the next counter), it reports the take. `None` if the shard changed
    /// since, is depleted, or has a pending parent.
    pub async fn take(
        self,
        shard: &ShardId,
        new_owner: &ConsumerId,
        from: &TakeFrom,
        holder: Option<&str>,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let mut expr = self
            .owner_expr(new_owner, holder, term)
            .value("n", n(from.counter()));
        let (who, expires) = match from {
            TakeFrom::Stale { expires, .. } => ("", Some(*expires)),
            TakeFrom::Claimed { expires, .. } => (" AND #claim_by = :me", Some(*expires)),
            TakeFrom::Named { expires, .. } => (" AND #owner = :me", expires.map(Some)),
        };
        let renewal = match expires {
            None => "",
            Some(None) => " AND attribute_not_exists(#expires)",
            Some(Some(seen)) => {
                expr = expr.value("seen", n(seen));
                " AND #expires = :seen"
            }
        };
        let condition = format!("{LEASABLE} AND #counter = :n{who}{renewal}");
        let old = match self.set_owner(shard, expr, holder, &condition).await? {
            Ok(lease) => return Ok(Some(lease)),
            Err(old) => old,
        };
        // A retry of this take whose first answer was lost finds its own write.
        let Some(holder) = holder else {
            return Ok(None);
        };
        let Some(state) = old.as_ref().map(ShardState::from_item).transpose()? else {
            return Ok(None);
        };
        let ours = state.owner.as_ref() == Some(new_owner)
            && state.holder.as_deref() == Some(holder)
            && state.counter == from.counter() + 1
            && state.is_leasable();
        if !ours {
            return Ok(None);
        }
        tracing::debug!(%shard, owner = %new_owner, "a retried take found its own write");
        Ok(state.expires.map(|expires| Lease {
            shard_id: state.shard_id,
            owner: new_owner.clone(),
            counter: state.counter,
            expires,
        }))
    }

    /// The expression of a take by `owner` for `term` from now.
    fn owner_expr(self, owner: &ConsumerId, holder: Option<&str>, term: Duration) -> Expr {
        let now = self.store.now();
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(now))
            .value("until", n(now + duration_millis(term)))
            .value("one", n(1))
            .value("zero", n(0))
            .value("false", AttributeValue::Bool(false));
        if let Some(holder) = holder {
            expr = expr.value("holder", s(holder));
        }
        expr
    }

    /// Makes `:me` the lease holder until `:until` under `condition`, moving
    /// the counter on, with `holder` as its holding token (`:holder` in
    /// `expr`) or none; the item as it was when the condition failed.
    async fn set_owner(
        self,
        shard: &ShardId,
        expr: Expr,
        holder: Option<&str>,
        condition: &str,
    ) -> Result<std::result::Result<Lease, Option<RawItem>>> {
        let (set_holder, remove_holder) = if holder.is_some() {
            (", #holder = :holder", "")
        } else {
            ("", ", #holder")
        };
        let update = format!(
            "SET #owner = :me, #expires = :until, #updated = :now{set_holder} \
             ADD #counter :one REMOVE #claim_by, #claim_at{remove_holder}"
        );
        let at = self.lease_at(shard).await?;
        let req = self.store.update_req(&at, &expr, &update, Some(condition));
        match self.store.conditional_update(req).await? {
            Ok(item) => lease_from(&item).map(Ok),
            Err(old) => Ok(Err(old)),
        }
    }

    /// Extends the lease by `term` from now. Returns the open hand-off claim,
    /// if any; [`StateError::LeaseLost`] if the lease is no longer held.
    pub async fn renew(self, lease: &Lease, term: Duration) -> Result<Renewal> {
        let now = self.store.now();
        let expr = lease_names(Expr::new())
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter))
            .value("now", n(now))
            .value("until", n(now + duration_millis(term)));
        let req = self.store.update_req(
            &self.lease_at(&lease.shard_id).await?,
            &expr,
            "SET #expires = :until, #updated = :now",
            Some(FENCE),
        );
        match self.store.conditional_update(req).await? {
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
    ///
    /// Safe to apply twice: a retry whose first answer was lost finds the
    /// lease free, or with the claimant, at the next counter, and reports
    /// what its first attempt did.
    pub async fn release(self, lease: &Lease, term: Duration) -> Result<Released> {
        let at = self.lease_at(&lease.shard_id).await?;
        for _ in 0..4 {
            let now = self.store.now();
            let expr = lease_names(Expr::new())
                .value("me", s(lease.owner.as_str()))
                .value("n", n(lease.counter))
                .value("now", n(now))
                .value("one", n(1));
            let free = self.store.update_req(
                &at,
                &expr,
                "SET #updated = :now ADD #counter :one REMOVE #owner, #expires, #holder",
                Some("#owner = :me AND #counter = :n AND attribute_not_exists(#claim_by)"),
            );
            let old = match self.store.conditional_update(free).await? {
                Ok(_) => return Ok(Released::Free),
                Err(old) => old,
            };
            let state = old.as_ref().map(ShardState::from_item).transpose()?;
            let Some(state) = state else {
                return Err(lost(&lease.shard_id, lease, None));
            };
            if state.owner.is_none() && state.counter == lease.counter + 1 {
                // This release's own write, applied once already.
                return Ok(Released::Free);
            }
            if state.owner.as_ref() != Some(&lease.owner) || state.counter != lease.counter {
                return Err(lost(&lease.shard_id, lease, old.as_ref()));
            }
            let Some(claim) = state.claim else { continue };
            let expr = expr
                .value("by", s(claim.by.as_str()))
                .value("until", n(now + duration_millis(term)));
            let hand_off = self.store.update_req(
                &at,
                &expr,
                "SET #owner = :by, #expires = :until, #updated = :now ADD #counter :one REMOVE #claim_by, #claim_at, #holder",
                Some("#owner = :me AND #counter = :n AND #claim_by = :by"),
            );
            let handed = match self.store.conditional_update(hand_off).await? {
                Ok(_) => true,
                Err(old) => old
                    .as_ref()
                    .map(ShardState::from_item)
                    .transpose()?
                    .is_some_and(|now| {
                        now.owner.as_ref() == Some(&claim.by) && now.counter == lease.counter + 1
                    }),
            };
            if handed {
                tracing::debug!(shard = %lease.shard_id, from = %lease.owner, to = %claim.by, "lease handed off");
                self.store
                    .consumers()
                    .notify_assigned(&claim.by, std::slice::from_ref(&lease.shard_id))
                    .await?;
                return Ok(Released::HandedOff(claim.by));
            }
        }
        Err(lost(&lease.shard_id, lease, None))
    }

    /// Asks for a lease held by another consumer: the owner sees the claim at
    /// its next renewal, checkpoints and hands the shard over. `false` if the
    /// lease changed since `expected_counter`, is unowned, already claimed, or
    /// held by the claimant itself.
    pub async fn claim(
        self,
        shard: &ShardId,
        claimant: &ConsumerId,
        expected_counter: u64,
    ) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("n", n(expected_counter))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.lease_at(shard).await?,
            &expr,
            "SET #claim_by = :by, #claim_at = :now, #updated = :now",
            Some("#counter = :n AND attribute_exists(#owner) AND #owner <> :by AND attribute_not_exists(#claim_by)"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// Withdraws `claimant`'s claim on the shard (the claimant died, or the
    /// plan changed); `false` if it holds no claim there.
    pub async fn cancel_claim(self, shard: &ShardId, claimant: &ConsumerId) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.lease_at(shard).await?,
            &expr,
            "SET #updated = :now REMOVE #claim_by, #claim_at",
            Some("#claim_by = :by"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// Frees the shard if `owner` holds it (and, when given, at `counter`):
    /// for operators and the reaper. `true` if it was removed.
    pub async fn remove_owner(
        self,
        shard: &ShardId,
        owner: &ConsumerId,
        counter: Option<u64>,
    ) -> Result<bool> {
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(self.store.now()))
            .value("one", n(1));
        let condition = match counter {
            Some(c) => {
                expr = expr.value("n", n(c));
                FENCE
            }
            None => "#owner = :me",
        };
        self.clear_owner(shard, expr, condition).await
    }

    /// Frees `lease` if it is still exactly as seen: its owner, counter and
    /// stored expiry (a renewal since leaves it held). For the reaper, on a
    /// lease it observed unrenewed for a term. `true` if it was freed.
    pub async fn free_stale(self, lease: &Lease) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter))
            .value("seen", n(lease.expires))
            .value("now", n(self.store.now()))
            .value("one", n(1));
        let condition = "#owner = :me AND #counter = :n AND #expires = :seen";
        self.clear_owner(&lease.shard_id, expr, condition).await
    }

    /// Removes the lease's owner under `condition`, moving the counter on.
    async fn clear_owner(self, shard: &ShardId, expr: Expr, condition: &str) -> Result<bool> {
        let req = self.store.update_req(
            &self.lease_at(shard).await?,
            &expr,
            "SET #updated = :now ADD #counter :one REMOVE #owner, #expires, #claim_by, #claim_at, #holder",
            Some(condition),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// The owner of the shard's lease (expired or not), `None` when free;
    /// [`StateError::NotFound`] if the shard has no state.
    pub async fn get_owner(self, shard: &ShardId) -> Result<Option<ConsumerId>> {
        Ok(self
            .store
            .shards()
            .get(&ShardScope::Group, shard)
            .await?
            .owner)
    }

    /// The shards whose lease is in this consumer's name (not depleted),
    /// whatever their stored expiry says: a consumer takes up the leases
    /// given to it however its clock differs from the giver's.
    pub async fn owned_shards(self, consumer: &ConsumerId) -> Result<Vec<ShardState>> {
        Ok(self
            .store
            .shards()
            .list(&ShardScope::Group)
            .await?
            .into_iter()
            .filter(|sh| !sh.depleted && sh.owner.as_ref() == Some(consumer))
            .collect())
    }

    /// Consumers that hold at least one live lease, with their shards.
    pub async fn list_active_workers(self) -> Result<BTreeMap<ConsumerId, Vec<ShardState>>> {
        let now = self.store.now();
        let mut workers: BTreeMap<ConsumerId, Vec<ShardState>> = BTreeMap::new();
        for shard in self.store.shards().list(&ShardScope::Group).await? {
            if let Some(lease) = shard.live_lease(now).filter(|_| !shard.depleted) {
                workers.entry(lease.owner).or_default().push(shard);
            }
        }
        Ok(workers)
    }
}
