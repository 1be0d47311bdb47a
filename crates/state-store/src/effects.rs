//! Progress and effects in one transaction: a commit that writes a batch's
//! or a shard's progress together with the effects of the records it covers
//! (writes into DynamoDB that the handler staged), both or neither.
//!
//! The progress is the transaction's first item; its condition lets it move
//! strictly forward only, so a transaction sent again after its answer was
//! lost, or an earlier attempt's of the same records, writes nothing: the
//! effects it carries were applied once, with the progress that covers them.

use crate::error::{Result, Service, StateError};
use crate::item::{Expr, RawItem};
use crate::model::stored_checkpoint;
use crate::retry::CallError;
use crate::sequence::Checkpoint;
use crate::store::{At, StateStore};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update};
use std::time::Duration;

/// The condition that moves a stored checkpoint strictly forward (see
/// [`crate::checkpoint`]'s `MONOTONIC`, which also lets it stay).
pub(crate) const STRICTLY_FORWARD: &str = "(attribute_not_exists(#cp_ord) OR #cp_ord < :ord)";

/// How often a transaction cancelled for a reason that passes later (a
/// conflict with another transaction, throttling) is sent in all.
const ATTEMPTS: u32 = 4;

/// What a commit of progress with effects did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectsOutcome {
    /// The progress and every effect were written.
    Stored,
    /// The stored progress is already at or past this one: nothing was
    /// written (the records' effects were written with it).
    Stale {
        /// The stored checkpoint.
        current: Checkpoint,
    },
    /// A condition of an effect failed: nothing was written.
    Conflict {
        /// Which effect (its index in the effects given), when the server
        /// named it.
        index: Option<usize>,
        /// The cancellation's code for it (`ConditionalCheckFailed`,
        /// `ValidationError`, ...).
        code: String,
    },
}

/// One progress item's write: where, its expression's names and values, its
/// update and its condition, and the condition read off an item (`holds`:
/// whether the write's condition holds for it, for a server that names no
/// cancellation reasons).
pub(crate) struct ProgressWrite {
    pub(crate) at: At,
    pub(crate) expr: Expr,
    pub(crate) update: String,
    pub(crate) condition: String,
    pub(crate) holds: ItemTest,
}

/// A test of a stored item (`None`: no item).
pub(crate) type ItemTest = Box<dyn Fn(Option<&RawItem>) -> Result<bool> + Send + Sync>;

/// Writes `progress` and `effects` in one transaction. `judge` reads the
/// progress item as it was when the write's condition failed (`None`: no
/// item) and says what that means: the write was there already
/// ([`EffectsOutcome::Stale`]), or the error to end with (a lost lease,
/// progress another writer moved).
pub(crate) async fn commit_with_effects(
    store: &StateStore,
    progress: ProgressWrite,
    effects: Vec<TransactWriteItem>,
    judge: impl Fn(Option<&RawItem>) -> Result<EffectsOutcome>,
) -> Result<EffectsOutcome> {
    let expr = progress
        .expr
        .used_in(&[&progress.update, &progress.condition]);
    let write = Update::builder()
        .table_name(store.table_name())
        .set_key(Some(progress.at.key()))
        .update_expression(&progress.update)
        .condition_expression(&progress.condition)
        .set_expression_attribute_names(expr.names_opt())
        .set_expression_attribute_values(expr.values_opt())
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|e| StateError::validation("transaction", e.to_string()))?;
    let mut items = Vec::with_capacity(1 + effects.len());
    items.push(TransactWriteItem::builder().update(write).build());
    items.extend(effects);
    let req = store
        .client()
        .transact_write_items()
        .set_transact_items(Some(items));
    let mut attempt = 0;
    loop {
        attempt += 1;
        let reasons = match store
            .call("TransactWriteItems", || req.clone().send())
            .await
        {
            Ok(_) => return Ok(EffectsOutcome::Stored),
            Err(CallError::Failed(e)) => return Err(e),
            Err(CallError::Condition(TransactWriteItemsError::TransactionCanceledException(e))) => {
                e.cancellation_reasons().to_vec()
            }
            Err(CallError::Condition(_)) => Vec::new(),
        };
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        if code(0) == "ConditionalCheckFailed" {
            return judge(reasons[0].item());
        }
        if reasons.is_empty() {
            // A server that names no reasons: the progress item tells
            // whether it was the progress; else an effect, not named.
            let old = store.get_item(&progress.at).await?;
            if !(progress.holds)(old.as_ref())? {
                return judge(old.as_ref());
            }
            return Ok(EffectsOutcome::Conflict {
                index: None,
                code: "unnamed".to_owned(),
            });
        }
        let failed = (1..reasons.len()).find(|&i| !passes_later(code(i)));
        if let Some(i) = failed {
            return Ok(EffectsOutcome::Conflict {
                index: Some(i - 1),
                code: code(i).to_owned(),
            });
        }
        if attempt >= ATTEMPTS {
            return Err(StateError::Sdk {
                service: Service::DynamoDb,
                operation: "TransactWriteItems",
                code: reasons
                    .iter()
                    .filter_map(|r| r.code())
                    .find(|c| *c != "None")
                    .map(str::to_owned),
                message: format!(
                    "the progress's transaction with its effects was cancelled {attempt} times: not stored"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(25 << attempt)).await;
    }
}

/// A cancellation code of a transaction's part that may pass if sent
/// again (`"None"`: that part passed).
pub(crate) fn passes_later(code: &str) -> bool {
    matches!(
        code,
        "None"
            | "TransactionConflict"
            | "ThrottlingError"
            | "ProvisionedThroughputExceeded"
            | "RequestLimitExceeded"
    )
}

/// [`EffectsOutcome::Stale`] with the checkpoint `item` holds.
pub(crate) fn stale(item: Option<&RawItem>) -> Result<EffectsOutcome> {
    Ok(EffectsOutcome::Stale {
        current: crate::checkpoint::stored_or_start(item)?,
    })
}

impl crate::checkpoint::Checkpoints<'_> {
    /// Stores a checkpoint for a leased shard as
    /// [`Checkpoints::save`](crate::Checkpoints::save) does (fenced by the
    /// lease: [`StateError::LeaseLost`] once it is lost), and `effects`
    /// with it, in one transaction: both or neither. A checkpoint not
    /// strictly past the stored one writes nothing
    /// ([`EffectsOutcome::Stale`]: the records' effects were written with
    /// it).
    pub async fn save_with(
        self,
        lease: &crate::model::Lease,
        cp: &Checkpoint,
        arrival: Option<crate::clock::EpochMillis>,
        effects: Vec<TransactWriteItem>,
    ) -> Result<EffectsOutcome> {
        use crate::item::{n, s};
        use crate::schema::{attr, ShardScope};
        let (expr, update) = crate::checkpoint::checkpoint_expr(cp, arrival, self.store.now());
        let expr = expr
            .names(&[attr::OWNER, attr::COUNTER])
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter));
        let at = self
            .store
            .shard_at(&ShardScope::Group, &lease.shard_id)
            .await?;
        let held = {
            let lease = lease.clone();
            move |old: Option<&RawItem>| -> Result<bool> {
                Ok(old
                    .map(crate::model::ShardState::from_item)
                    .transpose()?
                    .is_some_and(|st| {
                        st.owner.as_ref() == Some(&lease.owner) && st.counter == lease.counter
                    }))
            }
        };
        let forward = cp.order_key();
        let holds = {
            let held = held.clone();
            move |old: Option<&RawItem>| -> Result<bool> {
                let current = old.map(stored_checkpoint).transpose()?.flatten();
                Ok(held(old)? && current.is_none_or(|c| c.order_key() < forward))
            }
        };
        let progress = ProgressWrite {
            at,
            expr,
            update,
            condition: format!("#owner = :me AND #counter = :n AND {STRICTLY_FORWARD}"),
            holds: Box::new(holds),
        };
        // The lease holder is the shard's one writer: held, a checkpoint
        // not forward is its own, written before (an answer lost).
        let judge = |old: Option<&RawItem>| {
            if held(old)? {
                stale(old)
            } else {
                Err(crate::lease::lost(&lease.shard_id, lease, old))
            }
        };
        commit_with_effects(self.store, progress, effects, judge).await
    }
}
