//! `shardkeeper-demo`: a consumer group on embedded servers, verified.
//! See `shardkeeper-demo --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    shardkeeper_cli::init_logging();
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
