//! The shardkeeper operator CLI, as a library (the `shardkeeper` binary is
//! a thin wrapper): `groups`, `status`, `parked`, `reset`, `spread`,
//! `rewind`, `backfill`, `cutover`, `export`, `import` and `import-kcl` against real AWS or any endpoint,
//! and `demo`, a consumer group on embedded DynamoDB and Kinesis servers
//! that verifies what it did.

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

pub mod args;
pub mod backfill;
pub mod commands;
pub mod connect;
pub mod cutover;
pub mod error;
pub mod failures;
pub mod kcl;
pub mod kcl_export;
pub mod kcl_import;
pub mod mapping;
pub mod positions;
pub mod render;
pub mod rewind;
pub mod stack;

pub use args::{Cli, Command};
pub use error::Error;

use std::io::{BufRead, Write};

/// Logs to standard error: `RUST_LOG`, else warnings (the embedded
/// servers' own only as errors).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("warn,dynoxide=error,ferrokinesis=error")
            }),
        )
        .with_writer(std::io::stderr)
        .init();
}

/// Prints a command's outcome and gives its exit status: its output and 0
/// if it passed, 1 if it ran but did not pass (a check failed), 2 with the
/// error on standard error if it could not run.
pub fn finish<E: std::fmt::Display>(outcome: Result<(String, bool), E>) -> std::process::ExitCode {
    use std::process::ExitCode;
    match outcome {
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

/// Asks `question` on the terminal; `true` only for an answer of `yes`.
pub fn ask_on_terminal(question: &str) -> bool {
    print!("{question} Type 'yes' to go on: ");
    let _ = std::io::stdout().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).is_ok() && answer.trim() == "yes"
}

/// Runs one command; returns what to print and whether it succeeded. A
/// `--stack` is read from CloudFormation.
pub async fn run(cli: Cli) -> Result<(String, bool), Error> {
    run_with_stacks(cli, &stack::CloudFormation).await
}

/// [`run`], reading a `--stack`'s outputs from `stacks`.
pub async fn run_with_stacks(
    mut cli: Cli,
    stacks: &impl stack::StackOutputs,
) -> Result<(String, bool), Error> {
    stack::resolve(&mut cli.command, stacks).await?;
    match cli.command {
        Command::Groups(args) => {
            let client = connect::dynamodb(&args.conn).await;
            Ok((commands::groups(&client, &args).await?, true))
        }
        Command::Status(args) => {
            let store = connect::store(&args.target).await?;
            Ok((commands::status(&store, &args).await?, true))
        }
        Command::Parked(args) if args.replay => {
            let (store, kinesis) = connect::clients(&args.target).await?;
            Ok((
                commands::replay_parked(&store, &kinesis, &args).await?,
                true,
            ))
        }
        Command::Parked(args) => {
            let store = connect::store(&args.target).await?;
            Ok((commands::parked(&store, &args).await?, true))
        }
        Command::Reset(args) => {
            let store = connect::store(&args.target).await?;
            Ok((commands::reset(&store, &args, ask_on_terminal).await?, true))
        }
        Command::Rewind(args) => {
            let (store, kinesis) = connect::clients(&args.target).await?;
            Ok((
                rewind::rewind(&store, &kinesis, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::Backfill(args) => {
            let (store, kinesis) = connect::clients(&args.target).await?;
            Ok((
                backfill::backfill(&store, &kinesis, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::Cutover(args) => {
            let target = match &args.direction {
                args::CutoverDirection::FromEsm(a) => &a.target,
                args::CutoverDirection::ToEsm(a) => &a.target,
            };
            let (store, kinesis) = connect::clients(target).await?;
            let out = match &args.direction {
                args::CutoverDirection::FromEsm(a) => {
                    let lambda =
                        connect::lambda(&a.target.conn, a.lambda_endpoint_url.as_deref()).await;
                    cutover::from_esm(&store, &kinesis, &lambda, a, ask_on_terminal).await?
                }
                args::CutoverDirection::ToEsm(a) => {
                    cutover::to_esm(&store, &kinesis, a, ask_on_terminal).await?
                }
            };
            Ok((out, true))
        }
        Command::Export(args) => {
            let store = connect::store(&args.target).await?;
            Ok((positions::export(&store).await?, true))
        }
        Command::Import(args) => {
            let store = connect::store(&args.target).await?;
            Ok((
                positions::import(&store, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::ImportKcl(args) => {
            let (store, kinesis) = connect::clients(&args.target).await?;
            let dynamodb = connect::dynamodb(&args.target.conn).await;
            Ok((
                kcl_import::import_kcl(&store, &kinesis, &dynamodb, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::ExportKcl(args) => {
            let store = connect::store(&args.target).await?;
            let dynamodb = connect::dynamodb(&args.target.conn).await;
            Ok((
                kcl_export::export_kcl(&store, &dynamodb, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::Spread(args) => {
            let store = connect::store(&args.target).await?;
            Ok((
                commands::spread(&store, &args, ask_on_terminal).await?,
                true,
            ))
        }
        Command::ReplayFailures(args) => {
            let (kinesis, s3) = (
                connect::kinesis(&args.conn).await,
                connect::s3(&args.conn).await,
            );
            Ok((
                failures::replay_failures(&kinesis, &s3, &args, ask_on_terminal).await?,
                true,
            ))
        }
    }
}
