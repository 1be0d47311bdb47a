//! `shardkeeper`: status, reset, demo. See `shardkeeper --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    shardkeeper_cli::init_logging();
    match shardkeeper_cli::run(shardkeeper_cli::Cli::parse()).await {
        Ok((out, passed)) => {
            print!("{out}");
            if passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
