//! `shardkeeper-demo`: a consumer group on embedded servers, verified.
//! See `shardkeeper-demo --help`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    shardkeeper_cli::init_logging();
    let args = shardkeeper_demo::DemoArgs::parse();
    if args.serve {
        let served = shardkeeper_demo::serve::serve(args.env_file.as_deref()).await;
        return shardkeeper_cli::finish(served.map(|()| (String::new(), true)));
    }
    let outcome = shardkeeper_demo::run(&args).await.map(|report| {
        let passed = report.verification.passed();
        (shardkeeper_demo::render::demo(&report), passed)
    });
    shardkeeper_cli::finish(outcome)
}
