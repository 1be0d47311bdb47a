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
