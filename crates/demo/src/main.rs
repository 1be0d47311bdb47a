//! `shardkeeper-demo`: a consumer group on embedded servers, verified.
//! See `shardkeeper-demo --help`.

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
    match shardkeeper_demo::run(&shardkeeper_demo::DemoArgs::parse()).await {
        Ok(report) => {
            print!("{}", shardkeeper_demo::render::demo(&report));
            if report.verification.passed() {
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
