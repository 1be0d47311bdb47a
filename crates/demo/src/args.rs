//! The demo's arguments.

use clap::Parser;
use std::path::PathBuf;

/// Run a consumer group on embedded DynamoDB and Kinesis servers and
/// verify what it did.
#[derive(Debug, Clone, Parser)]
#[command(name = "shardkeeper-demo", version, about)]
pub struct DemoArgs {
    /// Keep the DynamoDB state in this directory (default: a temporary one,
    /// removed at the end).
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Shards of the stream.
    #[arg(long, default_value_t = 4)]
    pub shards: u32,
    /// Shard workers.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// Records to produce.
    #[arg(long, default_value_t = 3000)]
    pub records: usize,
    /// Distinct partition keys.
    #[arg(long, default_value_t = 64)]
    pub keys: usize,
    /// Give up (and fail) after this many seconds.
    #[arg(long, default_value_t = 50)]
    pub timeout_seconds: u64,
    /// No progress bar (plain log lines).
    #[arg(long)]
    pub quiet: bool,
}
