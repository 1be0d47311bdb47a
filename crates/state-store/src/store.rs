//! The state store: its configuration, the handles it is seen through, and
//! the thin request helpers every operation uses.

mod requests;

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
use std::time::Duration;

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
    /// This handle's bound on one call's time (see
    /// [`StateStore::with_call_limit`]).
    call_limit: Option<Duration>,
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
            call_limit: None,
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

    /// A handle on the same store (the same client, clock, counters and
    /// stop) whose calls start no attempt once `limit` has passed since
    /// their first ([`RetryPolicy::max_elapsed`], the shorter of this and
    /// the configuration's): a call whose every attempt hangs ends within
    /// `limit` plus one attempt's timeout. A consumer session bounds its
    /// calls, and its worker's, by its lease term, so a hung call never
    /// outlasts what its heartbeats on the side allow the worker's loop.
    pub fn with_call_limit(&self, limit: Duration) -> StateStore {
        StateStore {
            inner: self.inner.clone(),
            call_limit: Some(limit),
        }
    }

    /// The retry policy of this handle's calls: the configuration's, bounded
    /// by [`StateStore::with_call_limit`].
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        let policy = self.inner.config.retry;
        let bound = match (policy.max_elapsed, self.call_limit) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        policy.max_elapsed(bound)
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
