//! The group's layout item (`BUCKETS`): how many bucket keys its shard
//! items are spread over, and where one item lives.
//!
//! - The first write of a shard item lays the group out: it records the
//!   store's configured bucket count, unless the home key already holds
//!   state of a group written before buckets existed, which keeps one bucket.
//! - Every other call reads the layout; a group with no layout item yet has
//!   one bucket (nothing was spread), and the answer is not kept, so a later
//!   layout is seen.
//! - A layout once read is kept for the life of the store: the functions
//!   never change it.

use crate::buckets::Buckets;
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, ItemReader, RawItem};
use crate::names::ShardId;
use crate::records::SK_PARKED;
use crate::schema::{attr, ShardScope, SK, SK_DDBPOS, SK_EFOSHARD, SK_OWN, SK_SHARD, SK_STREAM};
use crate::store::{At, SkRange, StateStore};
use std::sync::atomic::Ordering;

/// Sort key of the layout item.
pub(crate) const SK_BUCKETS: &str = "BUCKETS";

/// How many bucket queries run at once in a read of every bucket.
const CONCURRENT_QUERIES: usize = 16;

/// The group's layout: its home key, its buckets, where an item lives, and
/// moving its shard items to another bucket count. From [`StateStore::layout`].
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    pub(crate) store: &'a StateStore,
}

impl<'a> Layout<'a> {
    /// The home key of this group: the partition key of its own items (and
    /// of every item while it has one bucket).
    pub fn partition_key(self) -> &'a str {
        &self.store.inner.pk
    }

    /// The partition key of bucket `bucket` of `buckets`: the home key when
    /// there is one bucket, else `<home key>#<bucket>`.
    pub fn bucket_key(self, buckets: Buckets, bucket: u16) -> String {
        if buckets == Buckets::ONE {
            self.store.inner.pk.clone()
        } else {
            format!("{}#{bucket}", self.store.inner.pk)
        }
    }

    /// The group's bucket count as stored (one bucket while it has no layout).
    pub async fn buckets(self) -> Result<Buckets> {
        if let Some(known) = self.store.known_layout() {
            return Ok(known);
        }
        // Boxed: the slow path runs about once per store, and every call on
        // a shard item would otherwise carry its future.
        Ok(Box::pin(self.store.stored_layout())
            .await?
            .unwrap_or(Buckets::ONE))
    }

    /// The partition key the items of `shard` (or of a record spread by its
    /// sequence number) live under.
    pub async fn key_of(self, shard: &str) -> Result<String> {
        Ok(self.store.spread(shard, String::new()).await?.pk)
    }
}

impl StateStore {
    /// The group's bucket count, laying the group out first if it has no
    /// layout yet (see the module docs).
    pub(crate) async fn laid_out(&self) -> Result<Buckets> {
        match self.known_layout() {
            Some(known) => Ok(known),
            None => Box::pin(self.lay_out()).await,
        }
    }

    async fn lay_out(&self) -> Result<Buckets> {
        if let Some(stored) = self.stored_layout().await? {
            return Ok(stored);
        }
        let wanted = if self.home_holds_shard_state().await? {
            Buckets::ONE
        } else {
            self.config().buckets
        };
        let expr = Expr::new()
            .names(&[attr::BUCKETS, attr::UPDATED])
            .value("b", n(wanted.count()))
            .value("now", n(self.now()));
        let req = self.update_req(
            &self.home(SK_BUCKETS),
            &expr,
            "SET #buckets = :b, #updated = :now",
            Some("attribute_not_exists(pk)"),
        );
        match self.conditional_update(req).await? {
            Ok(item) => self.note_layout(&item),
            // Another process laid it out first (or this one, whose answer
            // was lost): the stored one holds.
            Err(Some(item)) => self.note_layout(&item),
            Err(None) => self
                .stored_layout()
                .await?
                .ok_or_else(|| StateError::not_found("the group's layout item")),
        }
    }

    /// Where the item with sort key `sk`, spread by `by`, lives.
    pub(crate) async fn spread(&self, by: &str, sk: impl Into<String>) -> Result<At> {
        let buckets = self.layout().buckets().await?;
        Ok(self.at_bucket(buckets, by, sk))
    }

    /// Like [`StateStore::spread`], for a write that may create the item:
    /// the group is laid out first.
    pub(crate) async fn spread_new(&self, by: &str, sk: impl Into<String>) -> Result<At> {
        let buckets = self.laid_out().await?;
        Ok(self.at_bucket(buckets, by, sk))
    }

    /// Where the item of `shard` in `scope` lives.
    pub(crate) async fn shard_at(&self, scope: &ShardScope, shard: &ShardId) -> Result<At> {
        self.spread(shard.as_str(), scope.shard_sk(shard)).await
    }

    /// Like [`StateStore::shard_at`], for a write that may create the item.
    pub(crate) async fn shard_at_new(&self, scope: &ShardScope, shard: &ShardId) -> Result<At> {
        self.spread_new(shard.as_str(), scope.shard_sk(shard)).await
    }

    fn at_bucket(&self, buckets: Buckets, by: &str, sk: impl Into<String>) -> At {
        At {
            pk: self.layout().bucket_key(buckets, buckets.of(by)),
            sk: sk.into(),
        }
    }

    /// Every item in every bucket whose sort key starts with `prefix`, in
    /// sort-key order: one Query per bucket, several at once.
    pub(crate) async fn query_buckets(&self, prefix: &str) -> Result<Vec<RawItem>> {
        let buckets = self.layout().buckets().await?;
        self.query_all(buckets, prefix, false).await
    }

    /// The items of every bucket of `buckets` (and of the home key too when
    /// `with_home`, read once when it is the only bucket) whose sort key
    /// starts with `prefix`, in sort-key order.
    pub(crate) async fn query_all(
        &self,
        buckets: Buckets,
        prefix: &str,
        with_home: bool,
    ) -> Result<Vec<RawItem>> {
        let mut keys: Vec<String> = (0..buckets.count())
            .map(|b| self.layout().bucket_key(buckets, b))
            .collect();
        if with_home && buckets != Buckets::ONE {
            keys.push(self.layout().partition_key().to_owned());
        }
        let range = if prefix.is_empty() {
            SkRange::All
        } else {
            SkRange::Prefix(prefix.to_owned())
        };
        let reads = keys.into_iter().map(|pk| (pk, range.clone())).collect();
        self.query_keys(reads, true).await
    }

    /// The items of each (partition key, sort-key range) of `reads`, read
    /// [`CONCURRENT_QUERIES`] at a time, in sort-key order.
    pub(crate) async fn query_keys(
        &self,
        reads: Vec<(String, SkRange)>,
        consistent: bool,
    ) -> Result<Vec<RawItem>> {
        if let [(pk, range)] = reads.as_slice() {
            // One read (a group from before buckets): no task to spawn.
            return self.query_range(pk, range, consistent).await;
        }
        let mut items = Vec::new();
        let mut running = tokio::task::JoinSet::new();
        let mut reads = reads.into_iter();
        loop {
            while running.len() < CONCURRENT_QUERIES {
                let Some((pk, range)) = reads.next() else {
                    break;
                };
                let store = self.clone();
                running.spawn(async move { store.query_range(&pk, &range, consistent).await });
            }
            match running.join_next().await {
                Some(done) => items.extend(done.map_err(|e| StateError::Sdk {
                    service: crate::error::Service::DynamoDb,
                    operation: "Query",
                    code: None,
                    message: format!("a bucket query stopped: {e}"),
                })??),
                None => break,
            }
        }
        items.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
        Ok(items)
    }

    /// Keeps the layout found in a layout item, and returns it; a layout
    /// being moved is [`StateError::Respreading`].
    pub(crate) fn note_layout(&self, item: &RawItem) -> Result<Buckets> {
        let buckets = self.layout_of(item)?;
        if let Some(to) = moving_to(item)? {
            return Err(StateError::Respreading {
                from: buckets.count(),
                to,
            });
        }
        self.inner.layout.store(buckets.count(), Ordering::Relaxed);
        Ok(buckets)
    }

    /// The bucket count a layout item records.
    pub(crate) fn layout_of(&self, item: &RawItem) -> Result<Buckets> {
        let count = ItemReader::new(item).u64_or(attr::BUCKETS, 1)?;
        let buckets = u16::try_from(count)
            .ok()
            .and_then(|c| Buckets::new(c).ok())
            .ok_or_else(|| StateError::Corrupt {
                key: SK_BUCKETS.to_owned(),
                reason: format!("bucket count {count} is no power of two up to 1024"),
            })?;
        Ok(buckets)
    }

    /// Forgets the layout read (its item was deleted).
    pub(crate) fn forget_layout(&self) {
        self.inner.layout.store(0, Ordering::Relaxed);
    }

    fn known_layout(&self) -> Option<Buckets> {
        match self.inner.layout.load(Ordering::Relaxed) {
            0 => None,
            n => Buckets::new(n).ok(),
        }
    }

    async fn stored_layout(&self) -> Result<Option<Buckets>> {
        match self.get_item(&self.home(SK_BUCKETS)).await? {
            Some(item) => Ok(Some(self.note_layout(&item)?)),
            None => Ok(None),
        }
    }

    /// Whether the home key holds state of a group written before buckets
    /// existed: its stream item or any shard item (the short-lived attempt
    /// counters and batch progress do not count: losing one repeats
    /// records, never skips one). One Query of at most one item per kind,
    /// once in a group's life.
    async fn home_holds_shard_state(&self) -> Result<bool> {
        for prefix in [
            SK_STREAM,
            SK_SHARD,
            SK_OWN,
            SK_EFOSHARD,
            SK_DDBPOS,
            SK_PARKED,
        ] {
            let req = self
                .client()
                .query()
                .table_name(self.table_name())
                .consistent_read(true)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .projection_expression("#sk")
                .expression_attribute_names("#pk", crate::schema::PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":pk", s(self.layout().partition_key()))
                .expression_attribute_values(":prefix", s(prefix))
                .limit(1);
            let out = self.call_plain("Query", || req.clone().send()).await?;
            if out.count() > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The bucket count a layout item says its items are moving to, if any.
pub(crate) fn moving_to(item: &RawItem) -> Result<Option<u16>> {
    Ok(ItemReader::new(item)
        .opt_i64(attr::MOVING_TO)?
        .map(|to| u16::try_from(to).unwrap_or(u16::MAX)))
}

fn sort_key(item: &RawItem) -> &str {
    match item.get(SK) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)) => sk,
        _ => "",
    }
}
