//! `shardkeeper`: the operator CLI. See `shardkeeper --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    shardkeeper_cli::init_logging();
    shardkeeper_cli::finish(shardkeeper_cli::run(shardkeeper_cli::Cli::parse()).await)
}
