//! The shardkeeper demo: a consumer group on embedded DynamoDB and Kinesis
//! servers (a stream, a producer, shard workers, the rebalancer and the
//! reaper, a worker killed and a shard split part-way), and the history
//! checker's verdict on what it did. Not published: it needs the embedded
//! servers (`shardkeeper-local`) and the checker (`shardkeeper-history`),
//! which the operator CLI does not.

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

pub mod args;
pub mod render;
mod run;
pub mod serve;

pub use args::DemoArgs;
pub use run::{run, DemoReport};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state store failed (or a name was invalid).
    #[error(transparent)]
    State(#[from] shardkeeper::state::StateError),
    /// The library failed.
    #[error(transparent)]
    Library(#[from] shardkeeper::Error),
    /// The embedded servers or a step of the run failed.
    #[error("demo: {0}")]
    Demo(String),
    /// Terminal or file I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}
