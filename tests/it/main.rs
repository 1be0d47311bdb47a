//! Integration tests: the state store against real DynamoDB- and
//! Kinesis-compatible servers, through the real AWS SDK clients.
//!
//! By default the servers run in this process. Set
//! `SHARDKEEPER_TEST_DYNAMODB_ENDPOINT` and/or `SHARDKEEPER_TEST_KINESIS_ENDPOINT`
//! to run the same tests against other servers, or `SHARDKEEPER_TEST_REAL_AWS=1`
//! for real AWS. Every test uses its own consumer group, stream and tables.

mod assignments;
mod checkpoints;
mod cli;
mod common;
mod consume;
mod consumers;
mod ddb_reader;
mod dynamodb_processing;
mod efo;
mod efo_worker;
mod esm;
mod fake_reads;
mod fault_proxy;
mod faulty;
mod fixtures;
mod functions;
mod history;
mod kinesis_processing;
mod leases;
mod local;
mod outage;
mod plan_reap;
mod plan_rebalance;
mod positions;
mod scale;
mod scheduled;
mod split_merge;
mod stream;
mod stress;
mod table;
mod template;
mod windows;
mod worker;
