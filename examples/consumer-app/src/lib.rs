//! An application that consumes streams with shardkeeper, as a team would
//! keep it in its own repository: the record handlers are here, and each
//! binary in `src/bin` is one Lambda function of `template.yaml`.
//!
//! * [`orders`]: typed order events from a Kinesis stream, written once
//!   each to an orders table (the `orders` function, on an event source
//!   mapping).
//! * [`projection`]: a per-key projection of the orders table from its
//!   DynamoDB stream (the `projection` function, on an event source
//!   mapping).
//! * The `shard-worker` function reads the same Kinesis stream as a
//!   self-managed consumer group, started by the control plane's
//!   lease-rebalancer; its handler is in its binary.

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

pub mod orders;
pub mod projection;
