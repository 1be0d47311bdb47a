//! Init time of the Lambda function binaries: from process start to the
//! first `GET /2018-06-01/runtime/invocation/next`, the moment a function
//! tells the Lambda Runtime API it is ready for its first event.
//!
//! The benchmark serves a minimal Runtime API on 127.0.0.1, starts the
//! in-process DynamoDB and Kinesis servers (the functions call them at init),
//! and runs each release binary with the environment it would have in
//! Lambda, plus `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_KINESIS`
//! pointing at the local servers. The baseline is `hello-lambda`
//! (`benches/init/hello.rs`), a lambda_runtime function that does nothing at
//! init; every function is reported as a ratio to it.
//!
//! Build the binaries first (the release profile, as deployed), then run:
//!
//! ```sh
//! cargo build --release -p lease-rebalancer -p heartbeat-reaper --example hello-lambda
//! cargo build --release --manifest-path examples/consumer-app/Cargo.toml --target-dir target
//! cargo bench --bench init                 # 20 runs each
//! cargo bench --bench init -- --runs 50    # more runs
//! cargo bench --bench init -- --bin-dir DIR  # binaries in DIR, hello-lambda in DIR/examples
//! ```
//!
//! The servers and the functions' environment are the ones
//! `cargo run -p shardkeeper-demo -- --serve` gives `cargo lambda watch`
//! (`shardkeeper_demo::serve`).
//!
//! The numbers are process start to ready on this machine, not a Lambda cold
//! start: they leave out what Lambda adds before the process starts
//! (fetching the code, starting the micro VM) and the network to DynamoDB.

use axum::extract::State;
use axum::routing::get;
use axum::Router;
use shardkeeper_demo::serve::{environment, start_servers};
use shardkeeper_local::LocalOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The baseline binary (an example target built from `benches/init/hello.rs`).
const BASELINE: &str = "hello-lambda";
/// The function binaries, in the order they are reported.
const FUNCTIONS: [&str; 5] = [
    "lease-rebalancer",
    "heartbeat-reaper",
    "shard-worker",
    "orders",
    "projection",
];
/// How long one start may take before the run is declared failed.
const START_TIMEOUT: Duration = Duration::from_secs(30);

struct Options {
    runs: usize,
    bin_dir: Option<PathBuf>,
}

fn options() -> Result<Options, Error> {
    let mut options = Options {
        runs: 20,
        bin_dir: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => {
                let n = args.next().ok_or("--runs needs a number")?;
                options.runs = n.parse().map_err(|_| format!("--runs {n:?}"))?;
                if options.runs == 0 {
                    return Err("--runs must be at least 1".into());
                }
            }
            "--bin-dir" => {
                options.bin_dir = Some(args.next().ok_or("--bin-dir needs a directory")?.into());
            }
            // What `cargo bench` passes, and filters: not used.
            _ => {}
        }
    }
    Ok(options)
}

/// The release directory next to this benchmark (`target/release/deps/init-…`).
fn default_bin_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.to_path_buf())
}

fn binary(dir: &Path, name: &str) -> PathBuf {
    if name == BASELINE {
        dir.join("examples").join(name)
    } else {
        dir.join(name)
    }
}

/// The Runtime API's `next`: tells the benchmark when it was asked, then
/// holds the request open as Lambda does while no event is waiting.
async fn next(State(ready): State<mpsc::Sender<Instant>>) -> &'static str {
    let _ = ready.send(Instant::now());
    std::future::pending::<()>().await;
    ""
}

/// Starts `binary` and returns the time from spawn to its first `next`.
fn start_once(
    binary: &Path,
    env: &[(&'static str, String)],
    runtime_api: &str,
    ready: &mpsc::Receiver<Instant>,
) -> Result<Duration, Error> {
    while ready.try_recv().is_ok() {}
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command.spawn()?;
    let result = wait_ready(&mut child, started, ready);
    let _ = child.kill();
    let output = child.wait_with_output()?;
    result.map_err(|e| {
        format!(
            "{}: {e}; its stderr:\n{}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        )
        .into()
    })
}

fn wait_ready(
    child: &mut Child,
    started: Instant,
    ready: &mpsc::Receiver<Instant>,
) -> Result<Duration, Error> {
    loop {
        match ready.recv_timeout(Duration::from_millis(5)) {
            Ok(at) => return Ok(at.saturating_duration_since(started)),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return Err("runtime API stopped".into()),
        }
        if let Some(status) = child.try_wait()? {
            return Err(format!("exited with {status} before asking for an event").into());
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(format!("not ready after {START_TIMEOUT:?}").into());
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Summary {
    median: Duration,
    p90: Duration,
    min: Duration,
    max: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2
    };
    // Nearest rank.
    let p90 = samples[(n * 9).div_ceil(10) - 1];
    Summary {
        median,
        p90,
        min: samples[0],
        max: samples[n - 1],
    }
}

fn main() -> Result<(), Error> {
    let options = options()?;
    let dir = options
        .bin_dir
        .clone()
        .or_else(default_bin_dir)
        .ok_or("cannot find the target directory; give --bin-dir")?;
    let names: Vec<&str> = std::iter::once(BASELINE).chain(FUNCTIONS).collect();
    let missing: Vec<String> = names
        .iter()
        .map(|n| binary(&dir, n))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        println!(
            "init benchmark skipped: missing {}.\nBuild them first: cargo build --release \
             -p lease-rebalancer -p heartbeat-reaper --example hello-lambda && cargo build \
             --release --manifest-path examples/consumer-app/Cargo.toml --target-dir target",
            missing.join(", ")
        );
        return Ok(());
    }

    let runtime = tokio::runtime::Runtime::new()?;
    let (servers, _) = runtime.block_on(start_servers(LocalOptions::default()))?;
    let (ready_tx, ready_rx) = mpsc::channel();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let runtime_api = listener.local_addr()?.to_string();
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .with_state(ready_tx);
    runtime.spawn(async move { axum::serve(listener, app).await });

    println!(
        "init: process start to first /runtime/invocation/next, {} runs each (after one \
         discarded warm-up run), binaries in {}",
        options.runs,
        dir.display()
    );
    let envs: Vec<_> = names.iter().map(|n| environment(n, &servers)).collect();
    let mut samples: Vec<Vec<Duration>> = vec![Vec::with_capacity(options.runs); names.len()];
    // Round-robin, so drift in the machine's load reaches every binary alike.
    for round in 0..=options.runs {
        for (i, name) in names.iter().enumerate() {
            let d = start_once(&binary(&dir, name), &envs[i], &runtime_api, &ready_rx)?;
            if round > 0 {
                samples[i].push(d);
            }
        }
    }
    let summaries: Vec<Summary> = samples.into_iter().map(summarize).collect();
    let base = ms(summaries[0].median);
    println!(
        "| binary | median ms | p90 ms | min ms | max ms | median / {BASELINE} |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    );
    for (name, s) in names.iter().zip(&summaries) {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            ms(s.median),
            ms(s.p90),
            ms(s.min),
            ms(s.max),
            ms(s.median) / base
        );
    }
    drop(runtime);
    servers.stop();
    Ok(())
}
