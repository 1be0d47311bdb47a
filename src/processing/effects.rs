//! Effects: writes into DynamoDB that a handler stages for the record it
//! handles, and that the processor commits in one `TransactWriteItems` with
//! the progress that covers the record (docs/PROCESSING.md, "Effects").
//! - A handler stages with [`stage_effect`] during its call.
//! - A record's effects are kept once its call succeeded, and dropped when
//!   it fails, panics or is given up.
//! - They are committed with the first commit whose checkpoint covers the
//!   record, in transactions split between records at DynamoDB's limits.
//! - A record done past the progress (after a failure) keeps no effects: it
//!   runs again, and its effect is applied with the run the progress covers.

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use std::cell::RefCell;
use std::collections::HashMap;

/// The most items one transaction holds (DynamoDB's limit), the progress
/// item among them.
const MAX_TRANSACTION_ITEMS: usize = 100;

/// The most effect items one record may stage: a transaction's items but
/// the progress item.
pub const MAX_EFFECT_ITEMS: usize = MAX_TRANSACTION_ITEMS - 1;

/// The most bytes of effects one transaction carries (their attribute
/// names and values, expressions and table names): DynamoDB's 4 MB for a
/// transaction's items, less a margin for the progress item (at most 64 KB: a batch's progress keeps at most 1,000
/// records done past its checkpoint).
pub const MAX_EFFECT_BYTES: usize = 4_000_000 - 64 * 1024;

/// Why an effect could not be staged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EffectError {
    /// Nothing collects effects here: outside a record handler's call, in
    /// a batch handler's (`BATCHED`), in a task the handler spawned, at
    /// [`ProcessingOptions::concurrency`](crate::processing::ProcessingOptions::concurrency)
    /// above 1, or in a mode whose progress is not stored (no state store).
    #[error("no effects are collected here: stage them in a record handler's own call, at concurrency 1, with a state store")]
    NotCollected,
    /// The record's effects would be more items than one transaction holds
    /// beside its progress ([`MAX_EFFECT_ITEMS`]).
    #[error("a record's effects are at most {MAX_EFFECT_ITEMS} items")]
    TooMany,
    /// The record's effects would be more bytes than one transaction holds
    /// beside its progress ([`MAX_EFFECT_BYTES`]).
    #[error("a record's effects are at most {MAX_EFFECT_BYTES} bytes, {bytes} staged")]
    TooLarge {
        /// The bytes the record's effects would have.
        bytes: usize,
    },
}

/// Stages `item` (a `Put`, `Update`, `Delete` or `ConditionCheck`, in any
/// table the function may write) as an effect of the record being handled:
/// it is applied, with the record's progress, in one transaction, once the
/// record's call has succeeded, or not at all. A condition of it that fails
/// fails the record ([`crate::processing::RecordError::Effect`]): counted,
/// retried, parked at its limit, as a handler error is.
///
/// Staged items are not visible to the record's own reads, nor to the next
/// records' before the commit (every second, or every
/// `checkpoint_records`): write with update expressions (`ADD`, `SET ...
/// if_not_exists`) rather than reading first.
pub fn stage_effect(item: TransactWriteItem) -> Result<(), EffectError> {
    STAGED
        .try_with(|staged| staged.borrow_mut().push(item))
        .unwrap_or(Err(EffectError::NotCollected))
}

tokio::task_local! {
    static STAGED: RefCell<Effects>;
}

/// How many effects the record being handled has staged so far (0 where
/// none are collected).
pub(crate) fn staged_count() -> usize {
    STAGED.try_with(|s| s.borrow().items.len()).unwrap_or(0)
}

/// The effects one record's call staged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Effects {
    pub(crate) items: Vec<TransactWriteItem>,
    pub(crate) bytes: usize,
}

impl Effects {
    fn push(&mut self, item: TransactWriteItem) -> Result<(), EffectError> {
        if self.items.len() >= MAX_EFFECT_ITEMS {
            return Err(EffectError::TooMany);
        }
        let bytes = self.bytes + effect_bytes(&item);
        if bytes > MAX_EFFECT_BYTES {
            return Err(EffectError::TooLarge { bytes });
        }
        self.items.push(item);
        self.bytes = bytes;
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Runs `work` (a record handler's call) collecting the effects it stages.
pub(crate) async fn collecting<F: std::future::Future>(work: F) -> (F::Output, Effects) {
    let (output, staged) = STAGED
        .scope(RefCell::new(Effects::default()), async move {
            let output = work.await;
            (output, STAGED.with(|s| s.take()))
        })
        .await;
    (output, staged)
}

/// The size of an effect as DynamoDB counts a transaction's: its key's and
/// item's attribute names and values, and its expressions with their names
/// and values (an upper bound of what the item adds).
pub(crate) fn effect_bytes(item: &TransactWriteItem) -> usize {
    let attrs = |m: Option<&HashMap<String, AttributeValue>>| -> usize {
        m.map_or(0, |m| m.iter().map(|(k, v)| k.len() + value_bytes(v)).sum())
    };
    let names = |m: Option<&HashMap<String, String>>| -> usize {
        m.map_or(0, |m| m.iter().map(|(k, v)| k.len() + v.len()).sum())
    };
    let text = |s: Option<&str>| s.map_or(0, str::len);
    if let Some(p) = item.put() {
        p.table_name().len()
            + attrs(Some(p.item()))
            + text(p.condition_expression())
            + names(p.expression_attribute_names())
            + attrs(p.expression_attribute_values())
    } else if let Some(u) = item.update() {
        u.table_name().len()
            + attrs(Some(u.key()))
            + u.update_expression().len()
            + text(u.condition_expression())
            + names(u.expression_attribute_names())
            + attrs(u.expression_attribute_values())
    } else if let Some(d) = item.delete() {
        d.table_name().len()
            + attrs(Some(d.key()))
            + text(d.condition_expression())
            + names(d.expression_attribute_names())
            + attrs(d.expression_attribute_values())
    } else if let Some(c) = item.condition_check() {
        c.table_name().len()
            + attrs(Some(c.key()))
            + c.condition_expression().len()
            + names(c.expression_attribute_names())
            + attrs(c.expression_attribute_values())
    } else {
        0
    }
}

/// An attribute value's size as DynamoDB counts it (numbers at most 21
/// bytes, 1 byte for each null and boolean, 3 bytes for each list and map).
fn value_bytes(v: &AttributeValue) -> usize {
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => n.len().min(21),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(v) => v.iter().map(String::len).sum(),
        AttributeValue::Ns(v) => v.iter().map(|n| n.len().min(21)).sum(),
        AttributeValue::Bs(v) => v.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(v) => 3 + v.iter().map(|x| 1 + value_bytes(x)).sum::<usize>(),
        AttributeValue::M(m) => {
            3 + m
                .iter()
                .map(|(k, x)| 1 + k.len() + value_bytes(x))
                .sum::<usize>()
        }
        _ => 0,
    }
}

/// How many of `pending`'s records (each with its effects) the next
/// transaction takes: as many as fit [`MAX_TRANSACTION_ITEMS`] (less the
/// progress item) and [`MAX_EFFECT_BYTES`], at least one, never splitting a
/// record's; `None` when nothing is pending.
pub(crate) fn next_transaction<'a>(
    pending: impl IntoIterator<Item = &'a Effects>,
) -> Option<usize> {
    let (mut records, mut items, mut bytes) = (0, 0, 0);
    for effects in pending {
        let fits = items + effects.items.len() <= MAX_EFFECT_ITEMS
            && bytes + effects.bytes <= MAX_EFFECT_BYTES;
        if records > 0 && !fits {
            break;
        }
        records += 1;
        items += effects.items.len();
        bytes += effects.bytes;
    }
    (records > 0).then_some(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::Put;

    fn put(bytes: usize) -> TransactWriteItem {
        let put = Put::builder()
            .table_name("t")
            .item("pk", AttributeValue::S("x".repeat(bytes)))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    #[tokio::test]
    async fn a_call_stages_its_effects_and_nothing_outside_one() {
        assert_eq!(stage_effect(put(1)), Err(EffectError::NotCollected));
        let ((), staged) = collecting(async {
            stage_effect(put(1)).unwrap();
            stage_effect(put(2)).unwrap();
        })
        .await;
        assert_eq!(staged.items.len(), 2);
        assert_eq!(staged.bytes, effect_bytes(&put(1)) + effect_bytes(&put(2)));
        // A spawned task is outside the call.
        let ((), staged) = collecting(async {
            let spawned = tokio::spawn(async { stage_effect(put(1)) }).await.unwrap();
            assert_eq!(spawned, Err(EffectError::NotCollected));
        })
        .await;
        assert!(staged.is_empty());
    }

    #[tokio::test]
    async fn a_record_stages_at_most_one_transactions_worth() {
        let ((), staged) = collecting(async {
            for _ in 0..MAX_EFFECT_ITEMS {
                stage_effect(put(1)).unwrap();
            }
            assert_eq!(stage_effect(put(1)), Err(EffectError::TooMany));
        })
        .await;
        assert_eq!(staged.items.len(), MAX_EFFECT_ITEMS);
        let ((), staged) = collecting(async {
            stage_effect(put(MAX_EFFECT_BYTES / 2)).unwrap();
            assert!(matches!(
                stage_effect(put(MAX_EFFECT_BYTES / 2)),
                Err(EffectError::TooLarge { .. })
            ));
        })
        .await;
        assert_eq!(staged.items.len(), 1);
    }

    #[test]
    fn transactions_split_between_records_at_the_limits() {
        let of = |items: usize, bytes: usize| Effects {
            items: (0..items).map(|_| put(1)).collect(),
            bytes,
        };
        assert_eq!(next_transaction(&[]), None);
        // 40 + 40 items fit, the third record's 40 would not.
        let pending = [of(40, 10), of(40, 10), of(40, 10)];
        assert_eq!(next_transaction(&pending), Some(2));
        assert_eq!(next_transaction(&pending[2..]), Some(1));
        // By bytes: two records of 1.5 MB each, not three.
        let big = MAX_EFFECT_BYTES * 2 / 5;
        let pending = [of(1, big), of(1, big), of(1, big)];
        assert_eq!(next_transaction(&pending), Some(2));
        // A record with no effects costs nothing.
        let pending = [of(99, 10), of(0, 0), of(1, 1)];
        assert_eq!(next_transaction(&pending), Some(2));
    }
}
