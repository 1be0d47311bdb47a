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
    /// Run no demo: serve DynamoDB on 127.0.0.1:8000 and Kinesis on
    /// 127.0.0.1:4567, with the stream and the tables the functions use,
    /// until Ctrl-C (for `cargo lambda watch`).
    #[arg(long)]
    pub serve: bool,
    /// With --serve: also write the functions' environment to this file
    /// (for `cargo lambda watch --env-file`).
    #[arg(long, requires = "serve")]
    pub env_file: Option<PathBuf>,
}
