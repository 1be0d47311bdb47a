//! The state store: its configuration, the handles it is seen through, and
//! the thin request helpers every operation uses.

use crate::buckets::Buckets;
use crate::checkpoint::Checkpoints;
use crate::clients::own_dynamodb_client;
use crate::clock::{Clock, EpochMillis, SystemClock};
use crate::consumer::Consumers;
use crate::efo::EfoConsumers;
use crate::error::{Result, Service, StateError};
use crate::item::{s, Expr, RawItem};
use crate::layout::Layout;
use crate::lease::Leases;
use crate::names::GroupName;
use crate::positions::Positions;
use crate::records::RecordState;
use crate::retry::{with_retries, CallError, RetryPolicy, SdkTimeouts};
use crate::schema::{self, PK, SK};
use crate::shard::Shards;
use crate::stream::StreamItem;
use crate::stream_address::StreamAddress;
use crate::table::Table;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, ReturnConsumedCapacity, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

/// What identifies one consumer group's state: the table, the group and the
/// stream ([`StoreConfig::new`], then its builder methods).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// The DynamoDB table holding the state (shared by any number of groups).
    pub table: String,
    /// The consumer group.
    pub group: GroupName,
    /// The stream the group consumes (its state is keyed by the stream's name).
    pub stream: StreamAddress,
    /// Retries of throttled requests.
    pub retry: RetryPolicy,
    /// How many buckets a group gets when this store lays it out (its first
    /// write of a shard item); a group laid out already keeps its own.
    pub buckets: Buckets,
    /// How long the store's client waits to connect and for each attempt.
    pub timeouts: SdkTimeouts,
}

impl StoreConfig {
    /// A configuration for `group` on `stream` (a stream name, or a stream
    /// ARN for a stream of another account) in the default table, validating
    /// both.
    pub fn new(group: &str, stream: &str) -> Result<Self> {
        Ok(StoreConfig {
            table: schema::DEFAULT_TABLE.to_owned(),
            group: GroupName::new(group)?,
            stream: StreamAddress::parse(stream)?,
            retry: RetryPolicy::default(),
            buckets: Buckets::ONE,
            timeouts: SdkTimeouts::default(),
        })
    }

    /// Uses these timeouts on the store's client, and on the library's own
    /// Kinesis clients made for the store's group (the workers', the
    /// rebalancer's and the reaper's: see
    /// [`own_kinesis_client`](crate::own_kinesis_client)).
    pub fn timeouts(mut self, timeouts: SdkTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// Uses another table; the name must follow DynamoDB's rules (3-255 of `[A-Za-z0-9_.-]`).
    pub fn table(mut self, table: &str) -> Result<Self> {
        let ok_chars = table
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !(3..=255).contains(&table.len()) || !ok_chars {
            return Err(StateError::validation(
                "table name",
                format!("{table:?}: 3 to 255 of ASCII letters, digits, '_', '.', '-'"),
            ));
        }
        self.table = table.to_owned();
        Ok(self)
    }

    /// Sets the retry policy for throttled requests.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how many buckets a new group is laid out with (see [`Buckets`]).
    pub fn buckets(mut self, buckets: Buckets) -> Self {
        self.buckets = buckets;
        self
    }
}

/// Which sort keys of one partition key a Query reads.
#[derive(Debug, Clone)]
pub(crate) enum SkRange {
    /// Every item.
    All,
    /// Sort keys starting with the string.
    Prefix(String),
    /// Sort keys from the first to the second (both included).
    Between(&'static str, &'static str),
    /// Sort keys from the string on.
    From(&'static str),
}

/// Counters of what the store saw, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Conditional writes that lost (normal under contention).
    pub lost_conditions: u64,
    /// Read capacity units the table reported for the store's reads
    /// (Query and GetItem ask for it), in thousandths: what the reads cost,
    /// counted at the client.
    pub read_milliunits: u64,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: aws_sdk_dynamodb::Client,
    pub(crate) config: StoreConfig,
    pub(crate) pk: String,
    pub(crate) clock: Arc<dyn Clock>,
    /// The group's bucket count once read from its layout item (0: not yet).
    pub(crate) layout: AtomicU16,
    stopped: AtomicBool,
    lost_conditions: AtomicU64,
    read_milliunits: AtomicU64,
    /// A bounded group's end, once read (see [`StateStore::group_end`]).
    pub(crate) group_end: std::sync::OnceLock<Option<crate::Checkpoint>>,
}

/// The shared state of one consumer group on one stream, in one DynamoDB table.
///
/// Its operations are on handles, one per concept ([`StateStore::leases`],
/// [`StateStore::checkpoints`], ...: see the crate docs); a handle is a
/// borrowed view, free to make.
///
/// Cheap to clone: clones share the client, the clock and the counters.
#[derive(Debug, Clone)]
pub struct StateStore {
    pub(crate) inner: Arc<Inner>,
}

impl StateStore {
    /// A store for `config`, using the system clock. Nothing is sent until a call.
    pub fn new(client: aws_sdk_dynamodb::Client, config: StoreConfig) -> Self {
        Self::with_clock(client, config, Arc::new(SystemClock))
    }

    /// A store with an injected clock (tests move time without sleeping).
    pub fn with_clock(
        client: aws_sdk_dynamodb::Client,
        config: StoreConfig,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let client = own_dynamodb_client(&client, &config.timeouts);
        let pk = schema::partition_key(&config.group, config.stream.name());
        StateStore {
            inner: Arc::new(Inner {
                client,
                config,
                pk,
                clock,
                layout: AtomicU16::new(0),
                stopped: AtomicBool::new(false),
                lost_conditions: AtomicU64::new(0),
                read_milliunits: AtomicU64::new(0),
                group_end: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    /// An item under the home key.
    pub(crate) fn home(&self, sk: impl Into<String>) -> At {
        At {
            pk: self.inner.pk.clone(),
            sk: sk.into(),
        }
    }

    /// Shard leases: take, release, claim, and who owns what.
    pub fn leases(&self) -> Leases<'_> {
        Leases { store: self }
    }

    /// Checkpoints: fenced, un-leased and EFO-locked writes, reads, depletion
    /// at SHARD_END, and an operator's reset.
    pub fn checkpoints(&self) -> Checkpoints<'_> {
        Checkpoints { store: self }
    }

    /// The group's consumers: heartbeats (registration), the active flag,
    /// given shards, and reaping dead ones.
    pub fn consumers(&self) -> Consumers<'_> {
        Consumers { store: self }
    }

    /// The enhanced fan-out consumers of the pool and their locks.
    pub fn efo_consumers(&self) -> EfoConsumers<'_> {
        EfoConsumers { store: self }
    }

    /// Shard items: creating them (parents recorded), reading, removing.
    pub fn shards(&self) -> Shards<'_> {
        Shards { store: self }
    }

    /// Per-record state of event-source-mapped processing: batch progress,
    /// attempts of failing records, parked records.
    pub fn record_state(&self) -> RecordState<'_> {
        RecordState { store: self }
    }

    /// DynamoDB Streams shard positions.
    pub fn positions(&self) -> Positions<'_> {
        Positions { store: self }
    }

    /// The group's layout: home key, buckets, respread.
    pub fn layout(&self) -> Layout<'_> {
        Layout { store: self }
    }

    /// The state table itself: created, checked, tagged.
    pub fn table(&self) -> Table<'_> {
        Table { store: self }
    }

    /// The stream item: the stream's creation time and ARN, and the reset
    /// when the stream was re-created.
    pub fn stream_item(&self) -> StreamItem<'_> {
        StreamItem { store: self }
    }

    /// The DynamoDB client.
    pub fn client(&self) -> &aws_sdk_dynamodb::Client {
        &self.inner.client
    }

    /// The store of another group, `group`, on the same stream and table,
    /// with the same client, clock, retries and timeouts: a live group a
    /// backfill reads up to, the group an event-source-mapped processor
    /// keeps its progress in.
    pub fn beside(&self, group: &str) -> Result<StateStore> {
        let mut config = self.config().clone();
        config.group = GroupName::new(group)?;
        Ok(StateStore::with_clock(
            self.client().clone(),
            config,
            self.inner.clock.clone(),
        ))
    }

    /// Now, by the store's clock.
    pub fn now(&self) -> EpochMillis {
        self.inner.clock.now_millis()
    }

    /// A monotonic reading of the store's clock (see [`Clock::monotonic_millis`]):
    /// what an observer measures how long a lease or heartbeat went unchanged with.
    pub fn monotonic_now(&self) -> EpochMillis {
        self.inner.clock.monotonic_millis()
    }

    /// Counters of what the store saw.
    pub fn stats(&self) -> StoreStats {
        StoreStats {
            lost_conditions: self.inner.lost_conditions.load(Ordering::Relaxed),
            read_milliunits: self.inner.read_milliunits.load(Ordering::Relaxed),
        }
    }

    /// Stops the store: calls in progress end after their current attempt (no
    /// more retries) and every later call fails with [`StateError::Stopped`].
    pub fn stop(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
    }

    /// True once [`StateStore::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.load(Ordering::SeqCst)
    }

    pub(crate) fn table_name(&self) -> &str {
        &self.inner.config.table
    }

    /// Sends a request with the store's retries; a lost condition is counted.
    pub(crate) async fn call<T, E, R, F, Fut>(
        &self,
        operation: &'static str,
        send: F,
    ) -> Result<T, CallError<E>>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
    {
        let stopped = || self.is_stopped();
        let out = with_retries(
            &self.inner.config.retry,
            Service::DynamoDb,
            operation,
            stopped,
            send,
        )
        .await;
        if let Err(CallError::Condition(_)) = &out {
            self.inner.lost_conditions.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(operation, group = %self.inner.pk, "condition not met");
        }
        out
    }

    /// Adds the read units a read's answer reported to the store's count.
    fn count_read(&self, consumed: Option<&aws_sdk_dynamodb::types::ConsumedCapacity>) {
        if let Some(units) = consumed.and_then(|c| c.capacity_units) {
            let milli = (units * 1000.0).round().max(0.0) as u64;
            self.inner
                .read_milliunits
                .fetch_add(milli, Ordering::Relaxed);
        }
    }

    /// Like [`StateStore::call`] for calls that have no condition.
    pub(crate) async fn call_plain<T, E, R, F, Fut>(
        &self,
        operation: &'static str,
        send: F,
    ) -> Result<T>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
        R: std::fmt::Debug + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
    {
        match self.call(operation, send).await {
            Ok(out) => Ok(out),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(e)) => Err(StateError::Sdk {
                service: Service::DynamoDb,
                operation,
                code: e.code().map(str::to_owned),
                message: crate::retry::error_chain(&e),
            }),
        }
    }

    /// An UpdateItem on one item of this group, returning the new item.
    pub(crate) fn update_req(
        &self,
        at: &At,
        expr: &Expr,
        update: &str,
        condition: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let expr = expr.used_in(&[update, condition.unwrap_or("")]);
        self.client()
            .update_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// An Update of one item of this group as one part of a transaction.
    pub(crate) fn tx_update(
        &self,
        at: &At,
        expr: &Expr,
        update: &str,
        condition: Option<&str>,
    ) -> Result<TransactWriteItem> {
        let expr = expr.used_in(&[update, condition.unwrap_or("")]);
        let update = Update::builder()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .update_expression(update)
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .build()
            .map_err(|e| StateError::validation("transaction", e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// A ConditionCheck of one item of this group as one part of a transaction.
    pub(crate) fn tx_check(
        &self,
        at: &At,
        expr: &Expr,
        condition: &str,
    ) -> Result<TransactWriteItem> {
        let expr = expr.used_in(&[condition]);
        let check = ConditionCheck::builder()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .condition_expression(condition)
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt())
            .build()
            .map_err(|e| StateError::validation("transaction", e.to_string()))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Sends a TransactWriteItems: `Ok(Ok(()))` when it applied,
    /// `Ok(Err(codes))` when it was cancelled, with each part's
    /// cancellation code (`"None"` where that part passed; empty when the
    /// server named no reasons). Nothing is written when cancelled.
    pub(crate) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> Result<std::result::Result<(), Vec<String>>> {
        let req = self
            .client()
            .transact_write_items()
            .set_transact_items(Some(items));
        match self.call("TransactWriteItems", || req.clone().send()).await {
            Ok(_) => Ok(Ok(())),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(e)) => {
                let codes = match &e {
                    TransactWriteItemsError::TransactionCanceledException(c) => c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect(),
                    _ => Vec::new(),
                };
                Ok(Err(codes))
            }
        }
    }

    /// Sends a conditional update: `Ok(Ok(new item))` when it applied,
    /// `Ok(Err(old item))` when the condition failed (`None` if there was no item).
    pub(crate) async fn conditional_update(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> Result<std::result::Result<RawItem, Option<RawItem>>> {
        match self.call("UpdateItem", || req.clone().send()).await {
            Ok(out) => Ok(Ok(out.attributes.unwrap_or_default())),
            Err(CallError::Failed(e)) => Err(e),
            Err(CallError::Condition(UpdateItemError::ConditionalCheckFailedException(e))) => {
                Ok(Err(e.item))
            }
            Err(CallError::Condition(_)) => Ok(Err(None)),
        }
    }

    /// A strongly consistent GetItem of one item of this group.
    pub(crate) async fn get_item(&self, at: &At) -> Result<Option<RawItem>> {
        let req = self
            .client()
            .get_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .consistent_read(true)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        let out = self.call_plain("GetItem", || req.clone().send()).await?;
        self.count_read(out.consumed_capacity.as_ref());
        Ok(out.item)
    }

    /// A DeleteItem of one item of this group, optionally conditional:
    /// `true` if it was deleted (or there was nothing and no condition).
    pub(crate) async fn delete_item(
        &self,
        at: &At,
        condition: Option<&str>,
        expr: &Expr,
    ) -> Result<bool> {
        let expr = expr.used_in(&[condition.unwrap_or("")]);
        let req = self
            .client()
            .delete_item()
            .table_name(self.table_name())
            .key(PK, s(&at.pk))
            .key(SK, s(&at.sk))
            .set_condition_expression(condition.map(str::to_owned))
            .set_expression_attribute_names(expr.names_opt())
            .set_expression_attribute_values(expr.values_opt());
        match self.call("DeleteItem", || req.clone().send()).await {
            Ok(_) => Ok(true),
            Err(CallError::Condition(_)) => Ok(false),
            Err(CallError::Failed(e)) => Err(e),
        }
    }

    /// Every item under the home key whose sort key starts with `prefix`
    /// (strongly consistent, paginated).
    pub(crate) async fn query_home(&self, prefix: &str) -> Result<Vec<RawItem>> {
        self.query_key(&self.inner.pk, prefix).await
    }

    /// Every item under partition key `pk` whose sort key starts with
    /// `prefix` (strongly consistent, paginated).
    pub(crate) async fn query_key(&self, pk: &str, prefix: &str) -> Result<Vec<RawItem>> {
        let range = if prefix.is_empty() {
            SkRange::All
        } else {
            SkRange::Prefix(prefix.to_owned())
        };
        self.query_range(pk, &range, true).await
    }

    /// Every item under partition key `pk` whose sort key lies in `range`
    /// (paginated; `consistent`: strongly consistent, else eventually, at
    /// half the read units).
    pub(crate) async fn query_range(
        &self,
        pk: &str,
        range: &SkRange,
        consistent: bool,
    ) -> Result<Vec<RawItem>> {
        let mut items = Vec::new();
        let mut start: Option<RawItem> = None;
        loop {
            let mut req = self
                .client()
                .query()
                .table_name(self.table_name())
                .consistent_read(consistent)
                .return_consumed_capacity(ReturnConsumedCapacity::Total)
                .expression_attribute_names("#pk", PK)
                .expression_attribute_values(":pk", s(pk))
                .set_exclusive_start_key(start.take());
            req = match range {
                SkRange::All => req.key_condition_expression("#pk = :pk"),
                SkRange::Prefix(prefix) => req
                    .key_condition_expression("#pk = :pk AND begins_with(#sk, :from)")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(prefix.as_str())),
                SkRange::Between(from, to) => req
                    .key_condition_expression("#pk = :pk AND #sk BETWEEN :from AND :to")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(*from))
                    .expression_attribute_values(":to", s(*to)),
                SkRange::From(from) => req
                    .key_condition_expression("#pk = :pk AND #sk >= :from")
                    .expression_attribute_names("#sk", SK)
                    .expression_attribute_values(":from", s(*from)),
            };
            let out = self.call_plain("Query", || req.clone().send()).await?;
            self.count_read(out.consumed_capacity.as_ref());
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(key) if !key.is_empty() => start = Some(key),
                _ => return Ok(items),
            }
        }
    }
}

/// Where one item lives: its partition key and its sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct At {
    pub(crate) pk: String,
    pub(crate) sk: String,
}

impl At {
    /// The item's key attributes.
    pub(crate) fn key(&self) -> RawItem {
        [(PK.to_owned(), s(&self.pk)), (SK.to_owned(), s(&self.sk))]
            .into_iter()
            .collect()
    }
}

/// The sort key of a raw item, without its prefix.
pub(crate) fn sk_suffix<'a>(item: &'a RawItem, prefix: &str) -> Option<&'a str> {
    match item.get(SK) {
        Some(aws_sdk_dynamodb::types::AttributeValue::S(sk)) => sk.strip_prefix(prefix),
        _ => None,
    }
}
