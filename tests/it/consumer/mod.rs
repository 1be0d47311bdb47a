//! The self-managed Kinesis consumer: the shard worker polling and with
//! enhanced fan-out, through resharding, and against a fake for what the
//! server cannot show.

mod efo_errors;
mod efo_worker;
mod fake_reads;
mod pulse;
mod read_errors;
mod split_merge;
mod worker;
