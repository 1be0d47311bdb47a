//! shardkeeper: Kinesis Data Streams and DynamoDB Streams consumers on AWS
//! Lambda, with shard leases, fenced checkpoints, consumer heartbeats and
//! enhanced fan-out consumer locking kept in one DynamoDB table.
//!
//! This crate is what consumer functions are built from. Its state store is
//! the [`state`] module (the `shardkeeper-state` crate, which has no Lambda
//! dependencies and is shared by every function of a consumer system).
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

pub use shardkeeper_state as state;

pub mod action;
pub mod config;
pub mod ddb_streams;
pub mod discovery;
pub mod efo_pool;
pub mod executor;
pub mod functions;
pub mod history;
pub mod metrics;
pub mod reads;
pub mod reap;
pub mod rebalance;
pub mod reset;
pub mod session;
pub mod standalone;
pub mod status;

pub use action::{Action, ActionKind};
pub use config::{ConfigError, ScheduledConfig, TickTiming};
pub use discovery::{discover_shards, list_stream_shards, parents_first, DiscoveryReport};
pub use executor::{execute, ExecutionReport};
pub use reap::{plan_reap, ReapConfig};
pub use rebalance::{plan_rebalance, RebalanceConfig};
pub use reset::{apply_reset, plan_reset, ResetPlan, ResetRefused, ResetReport};
pub use session::{ConsumerSession, SessionTick};
pub use standalone::StandaloneReader;
pub use status::GroupStatus;
pub mod kpl;
mod membership;
pub mod processing;
pub mod worker;
pub mod worker_events;
