//! Integration tests: the library and the state store against real
//! DynamoDB- and Kinesis-compatible servers, through the real AWS SDK
//! clients. One binary (the AWS SDK makes each one slow to link); its
//! folders follow the code's.
//!
//! By default the servers run in this process. Set
//! `SHARDKEEPER_TEST_DYNAMODB_ENDPOINT` and/or `SHARDKEEPER_TEST_KINESIS_ENDPOINT`
//! to run the same tests against other servers, or `SHARDKEEPER_TEST_REAL_AWS=1`
//! for real AWS. Every test uses its own consumer group, stream and tables.
//!
//! * `support`: set-up and helpers, no tests.
//! * `state`: the state store (`shardkeeper-state`); `cargo test-state` runs these alone.
//! * `lambda`: the event-source-mapped processors and functions.
//! * `consumer`: the shard worker (polling, enhanced fan-out, resharding, a fake for reads).
//! * `group`: the planners, the rebalancer and the reaper.
//! * `ddb_streams`: the DynamoDB Streams reader and the replica.
//! * `fuzz`: the fuzz targets on their seeds and bounded mutations.
//! * `system`: whole-system runs (stress, outages), the CLI, the local
//!   servers and their fault proxy, the history checker, the template.

mod support;

mod consumer;
mod ddb_streams;
mod fuzz;
mod group;
mod lambda;
mod sim;
mod state;
mod system;
