//! `shardkeeper`: status, reset, demo. See `shardkeeper --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,dynoxide=error,ferrokinesis=error")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
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
