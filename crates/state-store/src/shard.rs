//! Shard state: creating it (parents recorded), reading it, removing it.

use crate::clock::EpochMillis;
use crate::error::{Result, StateError};
use crate::item::{n, s, str_list, Expr};
use crate::model::ShardState;
use crate::names::ShardId;
use crate::schema::{attr, ShardScope, SK_STREAM};
use crate::sequence::SequenceNumber;
use crate::store::StateStore;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::{BTreeMap, BTreeSet};

/// A shard as the stream describes it: what [`Shards::ensure`] records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSpec {
    /// The shard id.
    pub shard_id: ShardId,
    /// Parent shards (one after a split, two after a merge).
    pub parents: Vec<ShardId>,
    /// Hash key range (start, end).
    pub hash_range: Option<(String, String)>,
    /// First sequence number.
    pub starting_sequence: Option<SequenceNumber>,
    /// Last sequence number, once the shard is closed.
    pub ending_sequence: Option<SequenceNumber>,
}

impl ShardSpec {
    /// Orders shards so every parent comes before its children (parents not in
    /// the list are ignored); ties by shard id.
    pub fn parents_first(specs: Vec<ShardSpec>) -> Vec<ShardSpec> {
        let ids: BTreeSet<ShardId> = specs.iter().map(|s| s.shard_id.clone()).collect();
        let mut pending: BTreeMap<ShardId, ShardSpec> =
            specs.into_iter().map(|s| (s.shard_id.clone(), s)).collect();
        let mut placed: BTreeSet<ShardId> = BTreeSet::new();
        let mut ordered = Vec::with_capacity(pending.len());
        while !pending.is_empty() {
            let ready: Vec<ShardId> = pending
                .values()
                .filter(|s| {
                    s.parents
                        .iter()
                        .all(|p| !ids.contains(p) || placed.contains(p))
                })
                .map(|s| s.shard_id.clone())
                .collect();
            // A cycle cannot happen in a real shard tree; place the rest as they are.
            let batch = if ready.is_empty() {
                pending.keys().cloned().collect()
            } else {
                ready
            };
            for id in batch {
                if let Some(spec) = pending.remove(&id) {
                    placed.insert(id);
                    ordered.push(spec);
                }
            }
        }
        ordered
    }

    /// A shard with no parents and nothing else known.
    pub fn new(shard_id: &str) -> Result<Self> {
        Ok(ShardSpec {
            shard_id: ShardId::new(shard_id)?,
            parents: Vec::new(),
            hash_range: None,
            starting_sequence: None,
            ending_sequence: None,
        })
    }

    /// The same shard with these parents.
    pub fn with_parents(mut self, parents: &[&str]) -> Result<Self> {
        self.parents = parents
            .iter()
            .map(|p| ShardId::new(*p))
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// From a Kinesis `Shard` (ListShards / DescribeStream).
    pub fn from_kinesis(shard: &aws_sdk_kinesis::types::Shard) -> Result<Self> {
        let parents = [shard.parent_shard_id(), shard.adjacent_parent_shard_id()]
            .into_iter()
            .flatten()
            .map(ShardId::new)
            .collect::<Result<_>>()?;
        let range = shard.sequence_number_range();
        Ok(ShardSpec {
            shard_id: ShardId::new(shard.shard_id())?,
            parents,
            hash_range: shard.hash_key_range().map(|r| {
                (
                    r.starting_hash_key().to_owned(),
                    r.ending_hash_key().to_owned(),
                )
            }),
            starting_sequence: range
                .map(|r| SequenceNumber::new(r.starting_sequence_number()))
                .transpose()?,
            ending_sequence: range
                .and_then(|r| r.ending_sequence_number())
                .map(SequenceNumber::new)
                .transpose()?,
        })
    }
}

/// What [`Shards::ensure`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnsureShard {
    /// The shard had no state: it was created.
    Created,
    /// The shard had state already; nothing changed.
    Existing,
    /// The shard had state and is now recorded as closed (its ending sequence number).
    Closed,
}

/// Shard items (see the module docs). From [`StateStore::shards`].
#[derive(Debug, Clone, Copy)]
pub struct Shards<'a> {
    pub(crate) store: &'a StateStore,
}

impl Shards<'_> {
    /// Makes sure the shard has state in `scope`. A new shard records its
    /// parents; the parents that have state and are not depleted are
    /// *pending*, and the shard cannot be leased until each is depleted. A
    /// parent with no state (past retention, or never seen) does not block.
    /// Create parents before children (shard discovery walks parents first).
    /// An existing shard that is now closed gets its ending sequence number.
    pub async fn ensure(self, scope: &ShardScope, spec: &ShardSpec) -> Result<EnsureShard> {
        let at = self.store.shard_at_new(scope, &spec.shard_id).await?;
        let mut pending = Vec::new();
        for parent in &spec.parents {
            if let Some(item) = self
                .store
                .get_item(&self.store.shard_at(scope, parent).await?)
                .await?
            {
                if !ShardState::from_item(&item)?.depleted {
                    pending.push(parent.as_str().to_owned());
                }
            }
        }
        let mut sets = vec![
            "#shard = :shard",
            "#parents = :parents",
            "#counter = :zero",
            "#depleted = :false",
            "#updated = :now",
        ];
        let mut expr = Expr::new()
            .names(&[
                attr::SHARD,
                attr::PARENTS,
                attr::COUNTER,
                attr::DEPLETED,
                attr::UPDATED,
            ])
            .value("shard", s(spec.shard_id.as_str()))
            .value("parents", str_list(&spec.parents))
            .value("zero", n(0))
            .value("false", AttributeValue::Bool(false))
            .value("now", n(self.store.now()));
        if !pending.is_empty() {
            sets.push("#pending = :pending");
            expr = expr
                .names(&[attr::PENDING])
                .value("pending", AttributeValue::Ss(pending));
        }
        if let Some((lo, hi)) = &spec.hash_range {
            sets.push("#hash_lo = :hash_lo, #hash_hi = :hash_hi");
            expr = expr
                .names(&[attr::HASH_LO, attr::HASH_HI])
                .value("hash_lo", s(lo))
                .value("hash_hi", s(hi));
        }
        if let Some(seq) = &spec.starting_sequence {
            sets.push("#seq_lo = :seq_lo");
            expr = expr.names(&[attr::SEQ_LO]).value("seq_lo", s(seq.as_str()));
        }
        if let Some(seq) = &spec.ending_sequence {
            sets.push("#seq_hi = :seq_hi");
            expr = expr.names(&[attr::SEQ_HI]).value("seq_hi", s(seq.as_str()));
        }
        let update = format!("SET {}", sets.join(", "));
        let req = self
            .store
            .update_req(&at, &expr, &update, Some("attribute_not_exists(pk)"));
        if self.store.conditional_update(req).await?.is_ok() {
            return Ok(EnsureShard::Created);
        }
        let Some(end) = &spec.ending_sequence else {
            return Ok(EnsureShard::Existing);
        };
        let expr = Expr::new()
            .names(&[attr::SEQ_HI, attr::UPDATED])
            .value("seq_hi", s(end.as_str()))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &at,
            &expr,
            "SET #seq_hi = :seq_hi, #updated = :now",
            Some("attribute_exists(pk) AND attribute_not_exists(#seq_hi)"),
        );
        Ok(match self.store.conditional_update(req).await? {
            Ok(_) => EnsureShard::Closed,
            Err(_) => EnsureShard::Existing,
        })
    }

    /// The state of one shard; [`StateError::NotFound`] if it has none.
    pub async fn get(self, scope: &ShardScope, shard: &ShardId) -> Result<ShardState> {
        match self
            .store
            .get_item(&self.store.shard_at(scope, shard).await?)
            .await?
        {
            Some(item) => ShardState::from_item(&item),
            None => Err(StateError::not_found(format!("shard {shard} ({scope:?})"))),
        }
    }

    /// Every shard of `scope`, in shard id order.
    pub async fn list(self, scope: &ShardScope) -> Result<Vec<ShardState>> {
        let mut shards = self
            .store
            .query_buckets(&scope.prefix())
            .await?
            .iter()
            .map(ShardState::from_item)
            .collect::<Result<Vec<_>>>()?;
        shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(shards)
    }

    /// Removes a shard's state (lease and checkpoint) because the shard no
    /// longer exists; `true` if there was state to remove.
    pub async fn remove(self, scope: &ShardScope, shard: &ShardId) -> Result<bool> {
        self.store
            .delete_item(
                &self.store.shard_at(scope, shard).await?,
                Some("attribute_exists(pk)"),
                &Expr::new(),
            )
            .await
    }

    /// Removes a depleted shard's state if it is still depleted at
    /// `expected_counter` (the reaper's clean-up of shards past retention);
    /// `false` if it changed or is gone.
    pub async fn remove_depleted(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        expected_counter: u64,
    ) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::DEPLETED, attr::COUNTER])
            .value("true", AttributeValue::Bool(true))
            .value("n", n(expected_counter));
        self.store
            .delete_item(
                &self.store.shard_at(scope, shard).await?,
                Some("#depleted = :true AND #counter = :n"),
                &expr,
            )
            .await
    }

    /// Removes a standalone scope's shard item if it was not written since
    /// `seen_updated` (the reaper's clean-up of a scope whose consumer, or
    /// EFO consumer, is gone and whose positions are past retention);
    /// `false` if it changed or is gone.
    pub async fn remove_scoped(
        self,
        scope: &ShardScope,
        shard: &ShardId,
        seen_updated: crate::clock::EpochMillis,
    ) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::UPDATED])
            .value("seen", n(seen_updated));
        self.store
            .delete_item(
                &self.store.shard_at(scope, shard).await?,
                Some("#updated = :seen"),
                &expr,
            )
            .await
    }

    /// Clears `parent` from the child's pending parents (the parent was
    /// depleted without its children being known, or its state is gone),
    /// if the parent is depleted or has no state, and the group's latest
    /// rewind is still `rewind` (its id; `None`: none), as the caller saw it
    /// when it decided the wait was a leftover; `false` if the child has no
    /// state, the parent is not depleted, or another rewind began since.
    ///
    /// The caller decided from a snapshot of separate queries, eventually
    /// consistent: one key's query may see the table a moment later than
    /// another's (each partition answers from its own replica), so a child
    /// can show up beside no state of a parent created just before it. The
    /// transaction checks the parent itself, strongly consistent.
    ///
    /// An observer reads the home key (where a rewind is recorded, before
    /// its first shard moves) and the shards' keys in separate queries: a
    /// rewind that begins between the two shows a child waiting for a
    /// parent that is still depleted (the rewind reopens it next), which
    /// looks like a leftover. One transaction checks the stream item with
    /// the clear, so that wait stays.
    pub async fn clear_pending_parent(
        self,
        scope: &ShardScope,
        child: &ShardId,
        parent: &ShardId,
        rewind: Option<EpochMillis>,
    ) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::PENDING, attr::UPDATED])
            .value(
                "parent",
                AttributeValue::Ss(vec![parent.as_str().to_owned()]),
            )
            .value("now", n(self.store.now()));
        let clear = self.store.tx_update(
            &self.store.shard_at(scope, child).await?,
            &expr,
            "SET #updated = :now DELETE #pending :parent",
            Some("attribute_exists(pk)"),
        )?;
        let seen = Expr::new().names(&[attr::REWIND_ID]);
        let check = match rewind {
            None => self.store.tx_check(
                &self.store.home(SK_STREAM),
                &seen,
                "attribute_not_exists(#rewind_id)",
            )?,
            Some(id) => self.store.tx_check(
                &self.store.home(SK_STREAM),
                &seen.value("rewind", n(id)),
                "#rewind_id = :rewind",
            )?,
        };
        let parent_done = self.store.tx_check(
            &self.store.shard_at(scope, parent).await?,
            &Expr::new()
                .names(&[attr::DEPLETED])
                .value("yes", AttributeValue::Bool(true)),
            "attribute_not_exists(pk) OR #depleted = :yes",
        )?;
        Ok(self
            .store
            .transact(vec![clear, check, parent_done])
            .await?
            .is_ok())
    }
}
