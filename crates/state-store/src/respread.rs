//! Moving a group's shard items to another bucket count (an operator's
//! step, with the group's functions stopped).
//!
//! 1. The layout item is marked `moving_to`. From then on a store that has
//!    not read the layout yet refuses to start with
//!    [`StateError::Respreading`], so no new process writes under either
//!    layout while items move. (Processes already running keep the layout
//!    they read: stop them first.)
//! 2. Every shard item of the old layout is moved in one transaction each:
//!    the copy is put under its new bucket key and the old one deleted, so
//!    an item is in exactly one place at any moment.
//! 3. The layout item records the new count and loses the mark; a spread
//!    group's stream item is raised to the layout version older code
//!    refuses.
//!
//! Each step can be repeated: a move cut short is finished by running it
//! again with the same count (items already in place are left).

use crate::batch::SK_BATCH;
use crate::buckets::Buckets;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::layout::Layout;
use crate::layout::{moving_to, SK_BUCKETS};
use crate::records::{SK_ATTEMPTS, SK_PARKED};
use crate::retry::CallError;
use crate::schema::{attr, PK, SCHEMA_VERSION, SK, SK_DDBPOS, SK_EFOSHARD, SK_OWN, SK_SHARD};
use crate::store::{sk_suffix, At};
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};

/// What [`Layout::respread`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Respread {
    /// The bucket count before.
    pub from: Buckets,
    /// The bucket count now.
    pub to: Buckets,
    /// Items moved to another key.
    pub moved: usize,
    /// Items already under their key.
    pub in_place: usize,
}

/// The spread key of a shard item, from its sort key: what
/// [`Buckets::of`] was given when it was written. `None` for an item that is
/// not about a shard.
pub(crate) fn spread_key(sk: &str) -> Option<String> {
    let last = |rest: &str| rest.rsplit('#').next().map(str::to_owned);
    if let Some(shard) = sk.strip_prefix(SK_SHARD) {
        return Some(shard.to_owned());
    }
    if let Some(rest) = sk
        .strip_prefix(SK_OWN)
        .or_else(|| sk.strip_prefix(SK_EFOSHARD))
    {
        return last(rest);
    }
    if let Some(shard) = sk.strip_prefix(SK_DDBPOS) {
        return Some(shard.to_owned());
    }
    // `BATCH#[<consumer>#]<arn>#<place>#<first>`: the place (a shard or an
    // event id), or, in an item written before places, the first record's
    // sequence number (stored sortable: three digits of length first).
    if let Some(rest) = sk.strip_prefix(SK_BATCH) {
        let mut parts = rest.rsplit('#');
        let first = parts.next()?;
        let shard = parts.next()?;
        return Some(if shard.is_empty() {
            first.get(3..)?.to_owned()
        } else {
            shard.to_owned()
        });
    }
    // `RECORD#` / `PARKED#` `[[<consumer>#]<arn>#]<place>#<seq>#<sub>`.
    if let Some(rest) = sk
        .strip_prefix(SK_ATTEMPTS)
        .or_else(|| sk.strip_prefix(SK_PARKED))
    {
        let mut parts = rest.rsplit('#');
        let _sub = parts.next()?;
        let seq = parts.next()?;
        let shard = parts.next()?;
        return Some(if shard.is_empty() {
            seq.get(3..)?.to_owned()
        } else {
            shard.to_owned()
        });
    }
    None
}

impl Layout<'_> {
    /// Moves the group's shard items to `to` buckets (see the module docs).
    /// Run it with every function of the group stopped.
    pub async fn respread(self, to: Buckets) -> Result<Respread> {
        let layout = self.store.home(SK_BUCKETS);
        let stored = self.store.get_item(&layout).await?;
        let from = match &stored {
            Some(item) => self.store.layout_of(item)?,
            None => Buckets::ONE,
        };
        let moving = stored.as_ref().map(moving_to).transpose()?.flatten();
        if let Some(other) = moving.filter(|m| *m != to.count()) {
            return Err(StateError::Respreading {
                from: from.count(),
                to: other,
            });
        }
        // 1. Mark.
        let expr = Expr::new()
            .names(&[attr::BUCKETS, attr::MOVING_TO, attr::UPDATED])
            .value("from", n(from.count()))
            .value("to", n(to.count()))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &layout,
            &expr,
            "SET #buckets = :from, #moving_to = :to, #updated = :now",
            Some("attribute_not_exists(pk) OR (#buckets = :from AND (attribute_not_exists(#moving_to) OR #moving_to = :to))"),
        );
        if self.store.conditional_update(req).await?.is_err() {
            return Err(StateError::Respreading {
                from: from.count(),
                to: to.count(),
            });
        }
        // 2. Move: every shard item under the old keys and the new ones (a
        // run cut short left some in each).
        let mut items = self.store.query_all(from, "", true).await?;
        if to != from {
            items.extend(self.store.query_all(to, "", false).await?);
        }
        let mut seen = std::collections::HashSet::new();
        let text = |item: &RawItem, k: &str| {
            item.get(k)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default()
        };
        items.retain(|item| seen.insert((text(item, PK), text(item, SK))));
        let mut report = Respread {
            from,
            to,
            moved: 0,
            in_place: 0,
        };
        for item in items {
            let (Some(pk), Some(sk)) = (
                item.get(PK).and_then(|v| v.as_s().ok()),
                item.get(SK).and_then(|v| v.as_s().ok()),
            ) else {
                continue;
            };
            let Some(by) = spread_key(sk) else { continue };
            let target = self.bucket_key(to, to.of(&by));
            if &target == pk {
                report.in_place += 1;
                continue;
            }
            self.move_item(&item, &target).await?;
            report.moved += 1;
        }
        // 3. Record the new count.
        let expr = Expr::new()
            .names(&[attr::BUCKETS, attr::MOVING_TO, attr::UPDATED])
            .value("to", n(to.count()))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &layout,
            &expr,
            "SET #buckets = :to, #updated = :now REMOVE #moving_to",
            Some("#moving_to = :to"),
        );
        self.store.conditional_update(req).await?.ok();
        self.store.forget_layout();
        if self.store.stream_item().state().await?.is_some() {
            self.store.raise_schema(SCHEMA_VERSION).await?;
        }
        Ok(report)
    }

    /// Puts `item` under `pk` and deletes it where it was, in one
    /// transaction, on the item as read: a writer still running from before
    /// the mark that changed it since fails the move, and the item is read
    /// again and moved as it is now, so its write is not lost.
    async fn move_item(self, item: &RawItem, pk: &str) -> Result<()> {
        let old = At {
            pk: item
                .get(PK)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .unwrap_or_default(),
            sk: sk_suffix(item, "").unwrap_or_default().to_owned(),
        };
        let mut item = item.clone();
        for _ in 0..MOVE_ATTEMPTS {
            if self.try_move(&item, &old, pk).await? {
                return Ok(());
            }
            match self.store.get_item(&old).await? {
                Some(now) => item = now,
                // Gone from the old key since (moved by another run).
                None => return Ok(()),
            }
        }
        Err(StateError::Sdk {
            service: crate::error::Service::DynamoDb,
            operation: "TransactWriteItems",
            code: None,
            message: format!(
                "item {} kept changing while it was moved ({MOVE_ATTEMPTS} attempts): stop the group's functions and run the move again",
                old.sk
            ),
        })
    }

    /// One move of `item` from `old` to `pk`; `false` if the item changed
    /// since it was read (or is already at `pk`).
    async fn try_move(self, item: &RawItem, old: &At, pk: &str) -> Result<bool> {
        let build = |e: aws_sdk_dynamodb::error::BuildError| {
            StateError::validation("transaction", e.to_string())
        };
        let mut copy = item.clone();
        copy.insert(PK.to_owned(), s(pk));
        let (unchanged, expr) = unchanged(item);
        let put = Put::builder()
            .table_name(self.store.table_name())
            .set_item(Some(copy))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(build)?;
        let delete = Delete::builder()
            .table_name(self.store.table_name())
            .set_key(Some(old.key()))
            .condition_expression(unchanged)
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .build()
            .map_err(build)?;
        let req = self
            .store
            .client()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(put).build())
            .transact_items(TransactWriteItem::builder().delete(delete).build());
        match self
            .store
            .call("TransactWriteItems", || req.clone().send())
            .await
        {
            Ok(_) => Ok(true),
            Err(CallError::Condition(_)) => Ok(false),
            Err(CallError::Failed(e)) => Err(e),
        }
    }
}

/// How many times an item that keeps changing is read again and moved.
const MOVE_ATTEMPTS: usize = 5;

/// A condition that the item is still as read: each of its scalar
/// attributes equal, each set, list or map of the same size (every write
/// of the store also moves a scalar: `updated`, a counter, a position).
fn unchanged(item: &RawItem) -> (String, Expr) {
    let mut expr = Expr::new();
    let mut parts = vec!["attribute_exists(pk)".to_owned()];
    let mut names: Vec<&String> = item.keys().filter(|k| *k != PK && *k != SK).collect();
    names.sort();
    for (i, name) in names.into_iter().enumerate() {
        let size = match &item[name] {
            AttributeValue::Ss(v) => Some(v.len()),
            AttributeValue::Ns(v) => Some(v.len()),
            AttributeValue::Bs(v) => Some(v.len()),
            AttributeValue::L(v) => Some(v.len()),
            AttributeValue::M(v) => Some(v.len()),
            AttributeValue::Null(_) => continue,
            _ => None,
        };
        expr.names.insert(format!("#u{i}"), name.clone());
        match size {
            Some(len) => {
                parts.push(format!("size(#u{i}) = :u{i}"));
                expr = expr.value(&format!("u{i}"), n(len as u64));
            }
            None => {
                parts.push(format!("#u{i} = :u{i}"));
                expr = expr.value(&format!("u{i}"), item[name].clone());
            }
        }
    }
    (parts.join(" AND "), expr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::BatchKey;
    use crate::names::{ConsumerId, EfoName, ShardId};
    use crate::records::RecordKey;
    use crate::schema::{position_sk, ShardScope};
    use crate::sequence::SequenceNumber;

    #[test]
    fn every_shard_item_is_found_again_by_the_key_it_was_spread_by() {
        let shard = ShardId::new("shardId-000000000007").unwrap();
        let seq = SequenceNumber::new("4959033827149025660855969").unwrap();
        let arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders";
        let scopes = [
            ShardScope::Group,
            ShardScope::Consumer(ConsumerId::new("c1").unwrap()),
            ShardScope::Efo(EfoName::new("pool-1").unwrap()),
        ];
        for scope in &scopes {
            assert_eq!(
                spread_key(&scope.shard_sk(&shard)).as_deref(),
                Some(shard.as_str())
            );
        }
        assert_eq!(
            spread_key(&position_sk(&shard)).as_deref(),
            Some(shard.as_str())
        );
        for shard_named in [true, false] {
            let batch = BatchKey {
                consumer: "orders-fn".to_owned(),
                stream: arn.to_owned(),
                shard: shard_named.then(|| shard.to_string()),
                first_event_id: (!shard_named).then(|| "c4ca4238a0b9".to_owned()),
                first: seq.clone(),
            };
            assert_eq!(
                spread_key(&batch.sort_key()).as_deref(),
                Some(batch.spread_by())
            );
            for (consumer, source) in [
                (Some("orders-fn".to_owned()), Some(arn.to_owned())),
                (None, Some(arn.to_owned())),
                (None, None),
            ] {
                let record = RecordKey {
                    consumer,
                    source,
                    shard_id: shard_named.then(|| shard.clone()),
                    event_id: (!shard_named).then(|| "c4ca4238a0b9".to_owned()),
                    sequence: seq.clone(),
                    sub_sequence: 3,
                };
                for sk in [record.attempts_sk(), record.parked_sk()] {
                    assert_eq!(spread_key(&sk).as_deref(), Some(record.spread_by()), "{sk}");
                }
            }
        }
        // Items written before consumers and event ids: a DynamoDB Streams
        // record or batch spread by its sequence number.
        assert_eq!(
            spread_key(&format!("BATCH#{arn}##{}", seq.sortable())).as_deref(),
            Some(seq.as_str())
        );
        assert_eq!(
            spread_key(&format!("RECORD#{arn}##{}#0", seq.sortable())).as_deref(),
            Some(seq.as_str())
        );
        assert_eq!(spread_key("CONSUMER#c1"), None);
        assert_eq!(spread_key("STREAM"), None);
        assert_eq!(spread_key(SK_BUCKETS), None);
    }
}
