//! shardkeeper: Kinesis Data Streams and DynamoDB Streams consumers on AWS
//! Lambda, with shard leases, fenced checkpoints, consumer heartbeats and
//! enhanced fan-out consumer locking kept in one DynamoDB table.
//!
//! This crate is what consumer functions are built from. A record travels
//! one way in every mode: source → [`processing::Core`] → the user's
//! [`processing::RecordHandler`] → a checkpoint sink.
//!
//! # Layout
//!
//! The modules below are in the order imports run: each uses only those
//! above it (and `state`, `kpl` and `metrics`, which use none of them).
//!
//! * [`state`]: the state store (the `shardkeeper-state` crate): leases,
//!   checkpoints, consumers, enhanced fan-out locks, one item per entity.
//! * `discovery` and `first_seen` (private, with `worker` and `fleet`):
//!   the stream's shards into the state (ListShards, parents first), and
//!   how long values went unchanged as one observer saw them; the rooms the
//!   control plane and the worker share, so neither imports the other
//!   (the shard-discovery functions are public as [`consumer`]'s).
//! * `scan` (private): JSON text scanned for the few fields a processor
//!   reads, without parsing the values (events, DynamoDB images).
//! * [`processing`]: the record-processing core, the handler contract,
//!   records, typed payloads, parking, effects.
//! * [`idempotency`]: idempotency by content, a handler adapter over an
//!   entry table (the state table or the user's).
//! * `change` (private): typed DynamoDB changes decoded from a record's
//!   text or the SDK's attribute values, a handler of the processing
//!   contract; [`processing`] re-exports its items (and a reader's record
//!   carries a `ChangeRecord`), the one pair of rooms that import each other.
//! * [`lambda`]: event source mappings: the processors
//!   ([`KinesisProcessor`], [`DynamoDbProcessor`]) on the Lambda runtime,
//!   event parsing, batch progress, tumbling windows.
//! * [`pipeline`]: the shard pipeline every self-managed mode consumes a
//!   shard with: a record source, the core, a checkpointer.
//! * [`consumer`]: the self-managed Kinesis consumer ([`ShardWorker`]): its
//!   leases (a session in a group, or standalone; the EFO pool), its
//!   retrieval (polling or enhanced fan-out, each a record source), the
//!   worker.
//! * [`group`]: the planners of the lease-rebalancer, the heartbeat-reaper
//!   and the shard-worker fleet, time as they see it (sightings), their
//!   executor, the operator's reset and status.
//! * [`ddb_streams`]: the self-managed DynamoDB Streams reader
//!   ([`StreamReader`]) and the replica recipe.
//! * [`config`]: configuration from the environment.
//! * [`functions`]: the bodies of the ready-made Lambda functions.
//! * [`metrics`]: CloudWatch Embedded Metric Format lines.
//! * [`kpl`]: KPL aggregation and de-aggregation.
//!
//! Every fallible public function returns [`Error`]; see its documentation
//! for the detail types it carries.
//!
//! This is the only module map; each module's own documentation lists its
//! parts.
//!
//! # Features
//!
//! * `esm` (default): [`lambda`], the event-source-mapped processors.
//! * `worker`: [`pipeline`] and [`consumer`], the self-managed Kinesis
//!   shard worker, and its Lambda function ([`functions::WorkerFunction`]).
//! * `fleet` (with `worker`): [`group`], the control plane's planners, and
//!   the rebalancer, the reaper and the worker fleet in [`functions`].
//! * `ddb-streams`: [`ddb_streams`], the self-managed DynamoDB Streams
//!   reader (with [`pipeline`]).
//!
//! [`state`], [`processing`], [`config`], [`functions`], [`metrics`] and
//! [`kpl`] are always there; the items of `config` and `functions` that
//! belong to a feature come with it.
//!
//! ```
//! use shardkeeper::state::{Checkpoint, SequenceNumber};
//!
//! // Sequence numbers compare as numbers, not as strings.
//! let a = SequenceNumber::new("9").unwrap();
//! let b = SequenceNumber::new("10").unwrap();
//! assert!(a < b);
//! // A checkpoint covers every record at or before it.
//! let cp = Checkpoint::after("10").unwrap();
//! assert!(cp.covers(&a, 0));
//! ```

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![recursion_limit = "256"]

pub use shardkeeper_state as state;
pub use state::StateStore;

mod error;
pub use error::{Error, Result};

pub mod processing;

pub mod idempotency;

#[cfg(feature = "esm")]
#[cfg_attr(docsrs, doc(cfg(feature = "esm")))]
pub mod lambda;
#[cfg(feature = "esm")]
pub use lambda::{DynamoDbProcessor, KinesisProcessor};

#[cfg(any(feature = "worker", feature = "ddb-streams"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "worker", feature = "ddb-streams"))))]
pub mod pipeline;

#[cfg(feature = "worker")]
#[cfg_attr(docsrs, doc(cfg(feature = "worker")))]
pub mod consumer;
#[cfg(feature = "worker")]
pub use consumer::ShardWorker;

#[cfg(feature = "fleet")]
#[cfg_attr(docsrs, doc(cfg(feature = "fleet")))]
pub mod group;

#[cfg(feature = "ddb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "ddb-streams")))]
pub mod ddb_streams;
#[cfg(feature = "ddb-streams")]
pub use ddb_streams::StreamReader;

pub mod functions;

pub mod config;

pub mod metrics;

pub mod kpl;

mod change;
#[cfg(feature = "worker")]
mod discovery;
#[cfg(feature = "fleet")]
mod first_seen;
mod scan;
