//! `shardkeeper-demo`: a consumer group on embedded servers, verified.
//! See `shardkeeper-demo --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    shardkeeper_cli::init_logging();
    let args = shardkeeper_demo::DemoArgs::parse();
    if args.serve {
        return match shardkeeper_demo::serve::serve(args.env_file.as_deref()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        };
    }
    match shardkeeper_demo::run(&args).await {
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
