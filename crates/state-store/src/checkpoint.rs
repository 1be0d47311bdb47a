//! Checkpoints: fenced by the lease, never moving backwards; un-leased ones
//! for event-source-mapped handlers; depletion at SHARD_END.

use crate::clock::EpochMillis;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::lease::lost;
use crate::model::{stored_checkpoint, EfoLock, Lease, ShardState};
use crate::names::ShardId;
use crate::schema::{attr, efo_sk, ShardScope};
use crate::sequence::Checkpoint;
use crate::shard::ShardSpec;
use crate::store::StateStore;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};

/// What a checkpoint write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointOutcome {
    /// The checkpoint was stored (or was already exactly this).
    Stored,
    /// The stored checkpoint is already past this one: nothing was written.
    Stale {
        /// The stored checkpoint.
        current: Checkpoint,
    },
}

/// What [`Checkpoints::mark_depleted`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Depleted {
    /// Children whose state was created or updated (pending parent cleared).
    pub children: Vec<ShardId>,
    /// Children that start at their starting sequence number because the
    /// parent had a checkpoint (as lifion-kinesis does).
    pub children_started: Vec<ShardId>,
}

pub(crate) const MONOTONIC: &str = "(attribute_not_exists(#cp_ord) OR #cp_ord <= :ord)";
const CP_SET: &str = "SET #cp = :cp, #cp_sub = :cp_sub, #cp_ord = :ord, #updated = :now";

/// The names, values and `SET` clause that store `cp` (and its arrival time).
pub(crate) fn checkpoint_expr(
    cp: &Checkpoint,
    arrival: Option<EpochMillis>,
    now: EpochMillis,
) -> (Expr, String) {
    let mut expr = Expr::new()
        .names(&[attr::CP, attr::CP_SUB, attr::CP_ORD, attr::UPDATED])
        .value("cp", s(cp.stored_text()))
        .value("cp_sub", n(cp.stored_sub_sequence()))
        .value("ord", s(cp.order_key()))
        .value("now", n(now));
    let mut update = CP_SET.to_owned();
    if let Some(t) = arrival {
        expr = expr.names(&[attr::CP_ARRIVAL]).value("arrival", n(t));
        update.push_str(", #cp_arrival = :arrival");
    }
    (expr, update)
}

/// Why a standalone EFO consumer's checkpoint transaction was cancelled,
/// from its two cancellation reasons (the lock check, the checkpoint write;
/// `"None"` where that part passed).
#[derive(Debug, PartialEq, Eq)]
enum Cancelled {
    /// The lock check failed: the EFO consumer is no longer this one's.
    LockLost,
    /// The checkpoint would move backwards.
    Stale,
    /// Nothing was written for another reason: its code, or `None` when the
    /// same write may pass later (a conflict with another transaction,
    /// throttling, no reason named).
    Other(Option<String>),
}

fn cancelled(lock_check: &str, write: &str) -> Cancelled {
    let passes_later = crate::effects::passes_later;
    match (lock_check, write) {
        ("ConditionalCheckFailed", _) => Cancelled::LockLost,
        ("None", "ConditionalCheckFailed") => Cancelled::Stale,
        (first, second) => Cancelled::Other(
            [first, second]
                .into_iter()
                .find(|c| !passes_later(c))
                .map(str::to_owned),
        ),
    }
}

pub(crate) fn stale_from(item: Option<&RawItem>) -> Result<CheckpointOutcome> {
    Ok(CheckpointOutcome::Stale {
        current: stored_or_start(item)?,
    })
}

/// The checkpoint `item` holds; `TRIM_HORIZON` where it holds none.
pub(crate) fn stored_or_start(item: Option<&RawItem>) -> Result<Checkpoint> {
    Ok(item
        .map(stored_checkpoint)
        .transpose()?
        .flatten()
        .unwrap_or(Checkpoint::TrimHorizon))
}

/// Checkpoints (see the module docs); an operator's reset is here too.
/// From [`StateStore::checkpoints`].
#[derive(Debug, Clone, Copy)]
pub struct Checkpoints<'a> {
    pub(crate) store: &'a StateStore,
}

impl Checkpoints<'_> {
    /// Stores a checkpoint for a leased shard, fenced by the lease: it applies
    /// only while `lease.owner` holds the lease at `lease.counter`
    /// ([`StateError::LeaseLost`] otherwise), and only if it does not move the
    /// stored checkpoint backwards ([`CheckpointOutcome::Stale`]). One
    /// UpdateItem of one small item, whatever the shard count.
    pub async fn save(
        self,
        lease: &Lease,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        let (expr, update) = checkpoint_expr(cp, arrival, self.store.now());
        let expr = expr
            .names(&[attr::OWNER, attr::COUNTER])
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter));
        let condition = format!("#owner = :me AND #counter = :n AND {MONOTONIC}");
        let req = self.store.update_req(
            &self
                .store
                .shard_at(&ShardScope::Group, &lease.shard_id)
                .await?,
            &expr,
            &update,
            Some(&condition),
        );
        match self.store.conditional_update(req).await? {
            Ok(_) => Ok(CheckpointOutcome::Stored),
            Err(old) => {
                let still_held = old
                    .as_ref()
                    .map(ShardState::from_item)
                    .transpose()?
                    .is_some_and(|st| {
                        st.owner.as_ref() == Some(&lease.owner) && st.counter == lease.counter
                    });
                if still_held {
                    stale_from(old.as_ref())
                } else {
                    Err(lost(&lease.shard_id, lease, old.as_ref()))
                }
            }
        }
    }

    /// Stores a checkpoint with no lease: for event-source-mapped handlers
    /// (Lambda owns the shard) and standalone consumers (each owns its scope).
    /// Monotonic: never moves the stored checkpoint backwards. Creates the
    /// shard's item if it has none.
    pub async fn save_unleased(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        self.save_unleased_expiring(scope, shard, cp, arrival, None)
            .await
    }

    /// [`Checkpoints::save_unleased`] on an item that expires by TTL
    /// after `ttl` (for checkpoints of short-lived scopes, such as one
    /// event-source-mapping batch).
    pub async fn save_unleased_expiring(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
        ttl: Option<std::time::Duration>,
    ) -> Result<CheckpointOutcome> {
        let (expr, update) = checkpoint_expr(cp, arrival, self.store.now());
        let mut expr = expr.names(&[attr::SHARD]).value("shard", s(shard.as_str()));
        let mut update = format!("{update}, #shard = :shard");
        if let Some(ttl) = ttl {
            expr = expr
                .names(&[crate::schema::TTL])
                .value("ttl", n(self.store.now() / 1000 + ttl.as_secs() as i64));
            update.push_str(", #expires_ttl = :ttl");
        }
        let at = self.store.shard_at_new(scope, shard).await?;
        let req = self.store.update_req(&at, &expr, &update, Some(MONOTONIC));
        match self.store.conditional_update(req).await? {
            Ok(_) => Ok(CheckpointOutcome::Stored),
            Err(old) => stale_from(old.as_ref()),
        }
    }

    /// Stores a checkpoint of a standalone EFO consumer, fenced by its EFO
    /// lock: one transaction checks that `lock` is still held and writes the
    /// monotonic checkpoint. [`StateError::LeaseLost`] if the lock was lost.
    pub async fn save_efo(
        self,
        lock: &EfoLock,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        let build = |e: aws_sdk_dynamodb::error::BuildError| {
            StateError::validation("transaction", e.to_string())
        };
        let shard_at = self
            .store
            .shard_at_new(&ShardScope::Efo(lock.name.clone()), shard)
            .await?;
        let check = ConditionCheck::builder()
            .table_name(self.store.table_name())
            .set_key(Some(self.store.home(efo_sk(&lock.name)).key()))
            .condition_expression("#used_by = :me AND #lock_counter = :n")
            .expression_attribute_names("#used_by", attr::USED_BY)
            .expression_attribute_names("#lock_counter", attr::LOCK_COUNTER)
            .expression_attribute_values(":me", s(lock.consumer.as_str()))
            .expression_attribute_values(":n", n(lock.lock_counter))
            .build()
            .map_err(build)?;
        let (expr, update) = checkpoint_expr(cp, arrival, self.store.now());
        let expr = expr.names(&[attr::SHARD]).value("shard", s(shard.as_str()));
        let write = Update::builder()
            .table_name(self.store.table_name())
            .set_key(Some(shard_at.key()))
            .update_expression(format!("{update}, #shard = :shard"))
            .condition_expression(MONOTONIC)
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .map_err(build)?;
        let req = self
            .store
            .client()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().condition_check(check).build())
            .transact_items(TransactWriteItem::builder().update(write).build());
        match self
            .store
            .call("TransactWriteItems", || req.clone().send())
            .await
        {
            Ok(_) => Ok(CheckpointOutcome::Stored),
            Err(crate::retry::CallError::Failed(e)) => Err(e),
            Err(crate::retry::CallError::Condition(err)) => {
                let reasons = match &err {
                    TransactWriteItemsError::TransactionCanceledException(e) => {
                        e.cancellation_reasons().to_vec()
                    }
                    _ => Vec::new(),
                };
                let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                let lock_lost = || StateError::LeaseLost {
                    shard_id: shard.to_string(),
                    reason: format!(
                        "enhanced fan-out consumer {} is no longer locked by {} at counter {}",
                        lock.name, lock.consumer, lock.lock_counter
                    ),
                };
                if reasons.is_empty() {
                    // A server that names no reasons: the lock tells.
                    let held = self
                        .store
                        .efo_consumers()
                        .list()
                        .await?
                        .into_iter()
                        .any(|e| e.lock().as_ref() == Some(lock));
                    if !held {
                        return Err(lock_lost());
                    }
                    let scope = ShardScope::Efo(lock.name.clone());
                    let current = self.store.shards().get(&scope, shard).await?.checkpoint;
                    if let Some(current) = current.filter(|c| c.order_key() > cp.order_key()) {
                        return Ok(CheckpointOutcome::Stale { current });
                    }
                }
                match cancelled(code(0), code(1)) {
                    Cancelled::LockLost => Err(lock_lost()),
                    Cancelled::Stale => stale_from(reasons.get(1).and_then(|r| r.item())),
                    Cancelled::Other(named) => Err(StateError::Sdk {
                        service: crate::error::Service::DynamoDb,
                        operation: "TransactWriteItems",
                        code: named,
                        message: format!(
                            "the checkpoint's transaction was cancelled ({}, {}): not stored",
                            code(0),
                            code(1)
                        ),
                    }),
                }
            }
        }
    }

    /// The stored checkpoint of a shard; [`StateError::NotFound`] if the shard
    /// has no state or no checkpoint yet.
    pub async fn fetch(self, scope: &ShardScope, shard: &ShardId) -> Result<Checkpoint> {
        self.store
            .shards()
            .get(scope, shard)
            .await?
            .checkpoint
            .ok_or_else(|| StateError::not_found(format!("checkpoint of shard {shard}")))
    }

    /// Marks a leased shard depleted at SHARD_END (fenced by the lease, which
    /// ends with it), then makes its children leasable: each child gets state
    /// if it has none, this parent leaves its pending set, and, if this parent
    /// had a checkpoint, a child with no checkpoint starts at its starting
    /// sequence number. Idempotent: repeating it after it applied is not an error.
    ///
    /// The shard's write decides: once it applied, the depletion succeeded
    /// and the lease is gone, whatever happens to the children's writes. A
    /// child's write that fails ends them (logged; the report lists the
    /// children done): the rebalancer gives a child its state and clears a
    /// wait for a depleted parent. (Were the failure returned, the caller
    /// would keep a lease that no longer exists, and its next checkpoint of
    /// the shard would be refused as a lost lease.)
    pub async fn mark_depleted(self, lease: &Lease, children: &[ShardSpec]) -> Result<Depleted> {
        self.deplete(&ShardScope::Group, &lease.shard_id, Some(lease), children)
            .await
    }

    /// [`Checkpoints::mark_depleted`] for the standalone scopes, where no lease exists.
    pub async fn mark_depleted_unleased(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        self.deplete(scope, shard, None, children).await
    }

    async fn deplete(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        lease: Option<&Lease>,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        let (expr, update) = checkpoint_expr(&Checkpoint::ShardEnd, None, self.store.now());
        let mut expr = expr
            .names(&[
                attr::DEPLETED,
                attr::OWNER,
                attr::EXPIRES,
                attr::CLAIM_BY,
                attr::CLAIM_AT,
                attr::COUNTER,
                attr::HOLDER,
            ])
            .value("true", AttributeValue::Bool(true))
            .value("one", n(1));
        let mut update = format!("{update}, #depleted = :true");
        let condition = match lease {
            Some(lease) => {
                expr = expr
                    .value("me", s(lease.owner.as_str()))
                    .value("n", n(lease.counter));
                update.push_str(
                    " ADD #counter :one REMOVE #owner, #expires, #claim_by, #claim_at, #holder",
                );
                "#owner = :me AND #counter = :n"
            }
            None => "attribute_exists(pk)",
        };
        let req = self
            .store
            .update_req(
                &self.store.shard_at(scope, shard).await?,
                &expr,
                &update,
                Some(condition),
            )
            .return_values(ReturnValue::AllOld);
        let previous = match self.store.conditional_update(req).await? {
            Ok(old) => ShardState::from_item(&old)?,
            Err(old) => {
                let state = old.as_ref().map(ShardState::from_item).transpose()?;
                match (state, lease) {
                    (Some(st), _) if st.depleted => st,
                    (None, None) => {
                        return Err(StateError::not_found(format!("shard {shard} ({scope:?})")))
                    }
                    (_, Some(lease)) => return Err(lost(shard, lease, old.as_ref())),
                    (Some(st), None) => st,
                }
            }
        };
        let inherit = previous
            .checkpoint
            .as_ref()
            .is_some_and(Checkpoint::has_progress);
        let mut report = Depleted {
            children: Vec::new(),
            children_started: Vec::new(),
        };
        for child in children {
            if let Err(e) = self
                .child_of_depleted(scope, shard, child, inherit, &mut report)
                .await
            {
                tracing::warn!(%shard, child = %child.shard_id, error = %e, "the shard is depleted, but a child's write failed: the rebalancer makes the child leasable");
                break;
            }
        }
        Ok(report)
    }

    /// A depleted shard's `child`: its state if it has none, the parent out
    /// of its pending set, and its start if it inherits one (see
    /// [`Checkpoints::mark_depleted`]).
    async fn child_of_depleted(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        child: &ShardSpec,
        inherit: bool,
        report: &mut Depleted,
    ) -> Result<()> {
        self.store.shards().ensure(scope, child).await?;
        let mut expr = Expr::new()
            .names(&[attr::PENDING, attr::UPDATED])
            .value(
                "parent",
                AttributeValue::Ss(vec![shard.as_str().to_owned()]),
            )
            .value("now", n(self.store.now()));
        let mut update = "SET #updated = :now".to_owned();
        let start = child.starting_sequence.clone().filter(|_| inherit);
        if let Some(seq) = &start {
            let cp = Checkpoint::AtSequence(seq.clone());
            expr = expr
                .names(&[attr::CP, attr::CP_SUB, attr::CP_ORD])
                .value("cp", s(cp.stored_text()))
                .value("zero", n(0))
                .value("ord", s(cp.order_key()));
            update.push_str(
                ", #cp = if_not_exists(#cp, :cp), #cp_sub = if_not_exists(#cp_sub, :zero), \
                 #cp_ord = if_not_exists(#cp_ord, :ord)",
            );
        }
        update.push_str(" DELETE #pending :parent");
        let req = self.store.update_req(
            &self.store.shard_at(scope, &child.shard_id).await?,
            &expr,
            &update,
            Some("attribute_exists(pk)"),
        );
        if self.store.conditional_update(req).await?.is_ok() {
            report.children.push(child.shard_id.clone());
            if start.is_some() {
                report.children_started.push(child.shard_id.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_efo_checkpoint_is_told_apart_by_its_reasons() {
        assert_eq!(
            cancelled("ConditionalCheckFailed", "None"),
            Cancelled::LockLost
        );
        assert_eq!(
            cancelled("None", "ConditionalCheckFailed"),
            Cancelled::Stale
        );
        // A conflict or throttling is not a stale checkpoint: it may pass later.
        assert_eq!(
            cancelled("None", "TransactionConflict"),
            Cancelled::Other(None)
        );
        assert_eq!(
            cancelled("TransactionConflict", "None"),
            Cancelled::Other(None)
        );
        assert_eq!(
            cancelled("ThrottlingError", "ThrottlingError"),
            Cancelled::Other(None)
        );
        assert_eq!(
            cancelled("None", "ValidationError"),
            Cancelled::Other(Some("ValidationError".to_owned()))
        );
    }
}
