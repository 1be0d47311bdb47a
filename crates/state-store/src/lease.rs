//! Shard leases: take, release (with hand-off), claim, remove, and who owns
//! what.
//!
//! A lease lives by its owner's session (its heartbeat), not by renewals:
//! a take from an owner that did not release it is conditioned on the
//! owner's session as seen, and notes the revocation on the owner's item
//! (see [`TakeFrom`]). Every change of owner increments the shard's
//! `counter`; checkpoints and releases are conditioned on `owner = me AND
//! counter = n`, so a consumer that lost its lease learns it at its next
//! write ([`StateError::LeaseLost`]) and can never overwrite its
//! successor's work. [`Leases::renew`] is kept for the upgrade window.

mod hand_off;
mod owners;

use crate::clock::{duration_millis, EpochMillis};
use crate::consumer::Revocation;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::model::{Claim, Lease, SessionSeen, ShardState};
use crate::names::{ConsumerId, ShardId};
use crate::schema::{attr, consumer_sk, ShardScope};
use crate::store::{At, StateStore};
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
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
/// lease is still exactly so, and, when it had an owner, only if the owner's
/// session is still as seen.
///
/// A take from an owner (`session` given) is one transaction: the lease
/// moves, and the owner's item notes the revocation (or, for an owner seen
/// unregistered, is checked to be still absent). A heartbeat of the owner
/// that lands first fails the take; one that lands after it carries the
/// revocation in its answer, so the owner never counts that heartbeat as
/// keeping the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeFrom {
    /// Free, or stale as an observer judged it (its owner's session, and
    /// the lease itself, unchanged for a term): the counter and the stored
    /// expiry seen (`None` when the lease had no owner), and the owner's
    /// session seen.
    Stale {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen.
        expires: Option<EpochMillis>,
        /// The owner's session seen (`None`: the lease had no owner).
        session: Option<SessionSeen>,
    },
    /// Claimed by the taker, and its owner's session seen stale: taken
    /// while the claim stands, on the counter, the stored expiry and the
    /// owner's session seen.
    Claimed {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen.
        expires: Option<EpochMillis>,
        /// The owner's session seen.
        session: Option<SessionSeen>,
    },
    /// Already in the taker's name (given by the rebalancer, or held by
    /// another process under the same consumer id): taken at the counter
    /// seen, which fences out whoever held it under that name. With
    /// `expires`, only if it was not renewed since.
    Named {
        /// The lease counter seen.
        counter: u64,
        /// The stored expiry seen, when the take must find it unchanged.
        expires: Option<EpochMillis>,
        /// Held by another process under the id (its holding token on the
        /// lease is not the taker's): taken only while the id's item still
        /// carries the taker's token (the take's `holder`). That process
        /// may be a newer one that took the id over since the taker's last
        /// heartbeat, and is processing under the lease.
        from_another: bool,
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

    /// The owner's session the take is conditioned on, if any.
    pub fn session(&self) -> Option<&SessionSeen> {
        match self {
            TakeFrom::Stale { session, .. } | TakeFrom::Claimed { session, .. } => session.as_ref(),
            TakeFrom::Named { .. } => None,
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
/// The update that frees a lease, moving the counter on.
const CLEAR_OWNER: &str = "SET #updated = :now ADD #counter :one \
     REMOVE #owner, #expires, #claim_by, #claim_at, #holder";

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

/// Whether a transaction of `count` parts whose last is a give's note was
/// cancelled by that note's condition alone (its receiver at the bound of
/// names, or not registered).
fn only_the_note_failed(codes: &[String], count: usize) -> bool {
    codes.len() == count
        && codes[..count - 1].iter().all(|c| c == "None")
        && codes[count - 1] == "ConditionalCheckFailed"
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

pub(crate) fn lease_from(item: &RawItem) -> Result<Lease> {
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

/// The update of a take: `:me` holds the lease until `:until`, the counter
/// moves on, the claim goes, and `holder` is its holding token (`:holder`)
/// or none.
fn owner_update(holder: Option<&str>) -> String {
    let (set_holder, remove_holder) = if holder.is_some() {
        (", #holder = :holder", "")
    } else {
        ("", ", #holder")
    };
    format!(
        "SET #owner = :me, #expires = :until, #updated = :now{set_holder} \
         ADD #counter :one REMOVE #claim_by, #claim_at{remove_holder}"
    )
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

    /// Takes the lease if it is free or already this consumer's
    /// (re-acquiring moves the counter on), or if its owner is gone: no
    /// longer registered (it left, or the reaper removed it) and its stored
    /// expiry past by this writer's clock. The shard must not be depleted
    /// nor have a pending parent. Exactly one of many racing consumers gets
    /// `Some(lease)`; the others get `None`.
    ///
    /// It follows sessions: a registered owner's lease is never taken,
    /// whatever its stored expiry says (sessions do not renew it; their
    /// heartbeat keeps every lease). Taking a dead but still registered
    /// owner's lease is the rebalancer's, which judges sessions by
    /// observation ([`Leases::take`]); the reaper unregisters a consumer
    /// whose heartbeat it saw stale, and its leases are free to acquire then.
    pub async fn acquire(
        self,
        shard: &ShardId,
        consumer: &ConsumerId,
        term: Duration,
    ) -> Result<Option<Lease>> {
        let condition = format!("{LEASABLE} AND (attribute_not_exists(#owner) OR #owner = :me)");
        let (expr, _) = self.owner_expr(consumer, None, term);
        if let Ok(lease) = self.set_owner(shard, expr, None, &condition).await? {
            return Ok(Some(lease));
        }
        let seen = match self.store.shards().get(&ShardScope::Group, shard).await {
            Ok(seen) => seen,
            Err(StateError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let (Some(owner), Some(expires)) = (seen.owner.clone(), seen.expires) else {
            return Ok(None);
        };
        if owner == *consumer || expires >= self.store.now() {
            return Ok(None);
        }
        let from = TakeFrom::Stale {
            counter: seen.counter,
            expires: Some(expires),
            session: Some(SessionSeen::Unregistered { consumer: owner }),
        };
        self.take(shard, consumer, &from, None, term).await
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
        self.take_noted(shard, new_owner, from, holder, term, false)
            .await
    }

    /// [`Leases::take`] by another party for `to` (the rebalancer's
    /// assignment, its forced take after a hand-off timeout), which tells
    /// `to` in the same transaction: its assignment counter moves and the
    /// shard is named on its item (see [`Heartbeat`](crate::Heartbeat)), so
    /// a lease is never given without its note, whatever stops the giver
    /// after the write. While [`MAX_GIVEN`](crate::MAX_GIVEN) names wait on
    /// `to`'s item, the counter alone moves (its next heartbeat reads every
    /// shard). `None` also if `to` is not registered.
    pub async fn give(
        self,
        shard: &ShardId,
        to: &ConsumerId,
        from: &TakeFrom,
        holder: Option<&str>,
        term: Duration,
    ) -> Result<Option<Lease>> {
        self.take_noted(shard, to, from, holder, term, true).await
    }

    async fn take_noted(
        self,
        shard: &ShardId,
        new_owner: &ConsumerId,
        from: &TakeFrom,
        holder: Option<&str>,
        term: Duration,
        noted: bool,
    ) -> Result<Option<Lease>> {
        let (expr, until) = self.owner_expr(new_owner, holder, term);
        let mut expr = expr.value("n", n(from.counter()));
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
        // The id still this process's (see `TakeFrom::Named`).
        let id_still_mine = match from {
            TakeFrom::Named {
                from_another: true, ..
            } => holder,
            _ => None,
        };
        let old = match (from.session(), noted) {
            (None, false) if id_still_mine.is_none() => {
                match self.set_owner(shard, expr, holder, &condition).await? {
                    Ok(lease) => return Ok(Some(lease)),
                    Err(old) => old,
                }
            }
            (session, _) => {
                let at = self.lease_at(shard).await?;
                let revocation = Revocation {
                    shard_id: shard.clone(),
                    counter: from.counter(),
                };
                // The note names the shard, or at the bound moves the
                // counter alone.
                let mut named = true;
                loop {
                    let mut parts = vec![self.store.tx_update(
                        &at,
                        &expr,
                        &owner_update(holder),
                        Some(&condition),
                    )?];
                    if let Some(session) = session {
                        parts.push(self.session_part(session, &revocation)?);
                    }
                    if let Some(token) = id_still_mine {
                        parts.push(self.store.tx_check(
                            &self.store.home(consumer_sk(new_owner)),
                            &Expr::new().names(&[attr::TOKEN]).value("token", s(token)),
                            "#token = :token",
                        )?);
                    }
                    if noted {
                        parts.push(self.store.consumers().given_part(new_owner, shard, named)?);
                    }
                    let count = parts.len();
                    match self.store.transact(parts).await? {
                        Ok(()) => {
                            return Ok(Some(Lease {
                                shard_id: shard.clone(),
                                owner: new_owner.clone(),
                                counter: from.counter() + 1,
                                expires: until,
                            }))
                        }
                        Err(codes) => {
                            if noted && named && only_the_note_failed(&codes, count) {
                                named = false;
                                continue;
                            }
                            break self.store.get_item(&at).await?;
                        }
                    }
                }
            }
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

    /// The expression of a take by `owner` for `term` from now, and its expiry.
    fn owner_expr(
        self,
        owner: &ConsumerId,
        holder: Option<&str>,
        term: Duration,
    ) -> (Expr, EpochMillis) {
        let now = self.store.now();
        let until = now + duration_millis(term);
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(now))
            .value("until", n(until))
            .value("one", n(1))
            .value("zero", n(0))
            .value("false", AttributeValue::Bool(false));
        if let Some(holder) = holder {
            expr = expr.value("holder", s(holder));
        }
        (expr, until)
    }

    /// The part of a take from an owner that checks the owner's session is
    /// still as seen: a note of the revocation on its item, on the heartbeat
    /// seen, or a check that it is still not registered.
    fn session_part(
        self,
        session: &SessionSeen,
        revocation: &Revocation,
    ) -> Result<aws_sdk_dynamodb::types::TransactWriteItem> {
        let at = self.store.home(consumer_sk(session.consumer()));
        match session {
            SessionSeen::Unregistered { .. } => {
                self.store
                    .tx_check(&at, &Expr::new(), "attribute_not_exists(pk)")
            }
            SessionSeen::Beating {
                heartbeat, beat, ..
            } => {
                let mut expr = Expr::new()
                    .names(&[attr::HEARTBEAT, attr::BEAT, attr::REVOKED])
                    .value("hb", n(*heartbeat))
                    .value("revoked", AttributeValue::Ss(vec![revocation.encode()]));
                let beat = match beat {
                    Some(beat) => {
                        expr = expr.value("beat", n(*beat));
                        "#beat = :beat"
                    }
                    None => "attribute_not_exists(#beat)",
                };
                let condition = format!("#heartbeat = :hb AND {beat}");
                self.store
                    .tx_update(&at, &expr, "ADD #revoked :revoked", Some(&condition))
            }
        }
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
        let update = owner_update(holder);
        let at = self.lease_at(shard).await?;
        let req = self.store.update_req(&at, &expr, &update, Some(condition));
        match self.store.conditional_update(req).await? {
            Ok(item) => lease_from(&item).map(Ok),
            Err(old) => Ok(Err(old)),
        }
    }
}
