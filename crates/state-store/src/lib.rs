//! The shardkeeper state store: shard leases, fenced checkpoints, consumer
//! heartbeats and enhanced fan-out consumer locks for Kinesis Data Streams and
//! DynamoDB Streams consumers, in one DynamoDB table with one item per entity.
//!
//! Every state change is one small conditional write of one item, so a
//! checkpoint costs one request and one write unit whatever the shard count,
//! and contention is decided by DynamoDB, not by a lock service.
//!
//! A [`StateStore`] is seen through one handle per concept, each a cheap
//! borrowed view with the calls on that concept:
//!
//! | handle | what it holds |
//! | --- | --- |
//! | [`StateStore::leases`] ([`Leases`]) | shard leases: acquire, take, release, claims, owners |
//! | [`StateStore::checkpoints`] ([`Checkpoints`]) | fenced, un-leased and EFO-locked checkpoints, depletion, an operator's reset |
//! | [`StateStore::consumers`] ([`Consumers`]) | heartbeats (registration), the active flag, given shards, reaping |
//! | [`StateStore::efo_consumers`] ([`EfoConsumers`]) | the enhanced fan-out consumer pool and its locks |
//! | [`StateStore::shards`] ([`Shards`]) | shard items: creating (parents recorded), reading, removing |
//! | [`StateStore::record_state`] ([`RecordState`]) | event-source-mapped batch progress, attempts, parked records |
//! | [`StateStore::positions`] ([`Positions`]) | DynamoDB Streams shard positions |
//! | [`StateStore::layout`] ([`Layout`]) | the home key, buckets, where an item lives, respread |
//! | [`StateStore::table`] ([`Table`]) | the table: created if missing, checked, tagged |
//! | [`StateStore::stream_item`] ([`StreamItem`]) | the stream item, and the reset when the stream was re-created |
//!
//! The store itself keeps construction, its configuration and clock,
//! [`StateStore::start`], and the reads and deletes of the whole group.
//!
//! ```no_run
//! use shardkeeper_state::{Checkpoint, ConsumerId, ConsumerInfo, ShardId, ShardScope, ShardSpec,
//!     StartOptions, StateStore, StoreConfig};
//! use std::time::Duration;
//!
//! # async fn demo(client: aws_sdk_dynamodb::Client) -> shardkeeper_state::Result<()> {
//! let store = StateStore::new(client, StoreConfig::new("billing", "orders")?);
//! store.start(&StartOptions::new(1_700_000_000_000)).await?;
//! let me = ConsumerId::new("worker-1")?;
//! store.consumers().heartbeat(&ConsumerInfo::for_this_process(me.clone(), store.now())).await?;
//! store.shards().ensure(&ShardScope::Group, &ShardSpec::new("shardId-000000000000")?).await?;
//! let shard = ShardId::new("shardId-000000000000")?;
//! if let Some(lease) = store.leases().acquire(&shard, &me, Duration::from_secs(30)).await? {
//!     store.checkpoints().save(&lease, &Checkpoint::after("49590338271490256608559692538361571095921575989136588898")?, None).await?;
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod batch;
mod bounded;
mod buckets;
mod checkpoint;
mod clients;
mod clock;
mod consumer;
pub mod cost;
mod cutover;
mod effects;
mod efo;
mod error;
mod groups;
mod item;
mod layout;
mod lease;
mod model;
mod names;
mod positions;
mod records;
mod reset;
mod respread;
mod retry;
mod rewind;
// The table's attribute names and key prefixes are the store's own; what
// a user needs of them is re-exported below.
pub(crate) mod schema;
mod sequence;
mod shard;
mod snapshot;
mod store;
mod stream;
mod stream_address;
mod table;

// Every decoder of a stored item, for the fuzz targets and tests.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod read_back;

pub use batch::{BatchKey, BatchProgress, PrefixDigest, RunMark, MAX_DONE_AFTER};
pub use buckets::{Buckets, SpreadPolicy};
pub use checkpoint::{CheckpointOutcome, Checkpoints, Depleted};
pub use clock::{duration_millis, instant_now, Clock, EpochMillis, SystemClock};
pub use schema::{DEFAULT_TABLE, SCHEMA_VERSION, TTL as TTL_ATTRIBUTE, UPGRADE_WINDOW};
// Test clocks: a deployed consumer runs on the system clock, so they are
// public only for tests (this workspace's and a user's) that ask for them.
pub use clients::own_kinesis_client;
#[cfg(feature = "testing")]
pub use clock::{ManualClock, SkewedClock};
pub use consumer::{Acks, ClearReport, Consumers, Heartbeat, Revocation, MAX_GIVEN};
pub use cutover::ShardProgress;
pub use effects::EffectsOutcome;
pub use efo::EfoConsumers;
pub use error::{Result, Service, StateError};
pub use groups::{list_groups, GroupSummary};
pub use item::RawItem;
pub use layout::Layout;
pub use lease::{Leases, Released, Renewal, TakeFrom};
pub use model::{
    Claim, ConsumerInfo, ConsumerState, EfoLock, EfoState, Lease, RewindState, SessionSeen,
    ShardState, StoredShardPosition, StreamState,
};
pub use names::{ConsumerId, EfoName, GroupName, ShardId, StreamName};
pub use positions::Positions;
pub use records::{ParkedRecord, RecordKey, RecordState};
pub use reset::PositionMove;
pub use respread::Respread;
pub use retry::{
    call_aws, call_kinesis, is_kms_key_code, is_server_fault_code, is_throttling_code,
    is_transient_code, kinesis_coded_error, kinesis_error, retry_throttled, Backoff, Jitter,
    Retried, RetryPolicy, SdkTimeouts, REFUSED_WITHOUT_CODE,
};
pub use schema::ShardScope;
pub use sequence::{Checkpoint, SequenceNumber, MAX_SEQUENCE_DIGITS};
pub use shard::{EnsureShard, ShardSpec, Shards};
pub use snapshot::{Assignment, GroupPart, GroupSnapshot};
pub use store::{StateStore, StoreConfig, StoreStats};
pub use stream::{
    kinesis_stream_summary, StartOptions, StartReport, StreamInit, StreamItem, StreamSummary,
};
pub use stream_address::{ForStream, StreamAddress, StreamArn};
pub use table::{Billing, Table, TableOptions, TableReport};
