//! DynamoDB (with Streams) and Kinesis (with enhanced fan-out and
//! SubscribeToShard) compatible servers, started inside the current process on
//! `127.0.0.1`, and ready AWS SDK clients for them: what shardkeeper's tests,
//! benchmarks and local demo run on, with nothing installed.
//!
//! The same clients can point at external servers or at real AWS (see
//! [`test_endpoints`]), so one test suite runs everywhere. A [`FaultProxy`]
//! in front of a server throttles, fails, drops or delays requests at chosen
//! rates, for tests of retries and failure handling. A [`RuntimeApi`] serves
//! the Lambda Runtime API to a function binary, as Lambda runs it.
//! [`create_keyed_table`] makes the plain tables beside the state table.
//!
//! ```no_run
//! use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
//!
//! # async fn demo() -> Result<(), shardkeeper_local::LocalError> {
//! let servers = LocalServers::start(LocalOptions::default())?;
//! let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
//! let tables = aws.dynamodb.list_tables().send().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

mod clients;
mod counter;
mod fault_plan;
mod fault_proxy;
mod faults;
mod names;
mod other_account;
mod runtime_api;
mod server_thread;
mod servers;
mod tables;

pub use clients::{
    shared_servers, test_clients, test_endpoints, AwsClients, Endpoints, DYNAMODB_ENDPOINT_VAR,
    KINESIS_ENDPOINT_VAR, REAL_AWS_VAR,
};
pub use counter::{LoggedRequest, OperationCount, RequestCounter, DYNAMODB_WRITES};
pub use fault_plan::{FaultCounts, Faults, SlowRequests};
pub use fault_proxy::FaultProxy;
pub use faults::{AwsService, FailingEndpoint};
pub use names::unique_name;
pub use other_account::SharedStreamCounts;
pub use runtime_api::{Answer, Invocation, RuntimeApi};
pub use servers::{LocalOptions, LocalServers};
pub use tables::create_keyed_table;

/// Errors of starting the local servers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalError {
    /// A server could not be started.
    #[error("cannot start the local servers: {0}")]
    Start(String),
    /// A [`Faults`] configuration out of range.
    #[error("invalid faults: {0}")]
    InvalidFaults(String),
    /// A server cannot be stopped or started again.
    #[error("cannot restart the local server: {0}")]
    Restart(String),
}
