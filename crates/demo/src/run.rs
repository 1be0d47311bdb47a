//! The local demo: a consumer group on embedded DynamoDB and Kinesis
//! servers, run with the same library code the Lambda functions use (shard
//! workers, the rebalancer, the reaper). One worker is killed part-way and a
//! shard is split; at the end the run is verified from what was actually
//! produced, processed and checkpointed.

use crate::args::DemoArgs;
use crate::Error;
use indicatif::{ProgressBar, ProgressStyle};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::consumer::{ShardWorker, WorkerConfig};
use shardkeeper::functions::{Reaper, Rebalancer};
use shardkeeper::group::{GroupStatus, ReapConfig, RebalanceConfig};
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig, TableOptions};
use shardkeeper_history::{
    check, produce_numbered, recording_handler, recording_observer, History, NumberedLoad,
    SharedHistory, Verification,
};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// The demo's stream and group.
pub const STREAM: &str = "demo-orders";
/// The demo's consumer group.
pub const GROUP: &str = "demo";
/// Lease term (and heartbeat timeout) of the demo: short, so the killed
/// worker's shards move within seconds.
const LEASE_TERM: Duration = Duration::from_secs(3);

/// What the demo did and found.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The checks.
    pub verification: Verification,
    /// The group just before the workers left.
    pub final_status: GroupStatus,
    /// The worker killed part-way.
    pub killed: Option<String>,
    /// The shard split part-way.
    pub split: Option<String>,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Where the DynamoDB state was kept.
    pub state_file: PathBuf,
}

fn err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Demo(format!("{what}: {e}"))
}

fn state_dir(args: &DemoArgs) -> Result<(PathBuf, bool), Error> {
    match &args.state_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Ok((dir.clone(), false))
        }
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let dir = std::env::temp_dir()
                .join(format!("shardkeeper-demo-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            Ok((dir, true))
        }
    }
}

async fn wait_active(kinesis: &aws_sdk_kinesis::Client) -> Result<(), Error> {
    for _ in 0..200 {
        let out = kinesis
            .describe_stream_summary()
            .stream_name(STREAM)
            .send()
            .await
            .map_err(|e| err("DescribeStreamSummary", e))?;
        let status = out
            .stream_description_summary()
            .map(|s| s.stream_status().as_str().to_owned());
        if status.as_deref() == Some("ACTIVE") {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(Error::Demo("the stream did not become ACTIVE".into()))
}

fn spawn_worker(
    index: usize,
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    history: &SharedHistory,
    stop: &Arc<AtomicBool>,
) -> Result<(String, JoinHandle<()>), Error> {
    let name = format!("worker-{index}");
    let id = ConsumerId::new(&name)?;
    let session = ConsumerSession::new(
        store.clone(),
        ConsumerInfo::for_this_process(id, store.now()),
        LEASE_TERM,
    );
    // The run's work is only recording.
    let handler = recording_handler(history, &name, |_: StreamRecord| async {
        Ok::<(), std::io::Error>(())
    });
    let observer = recording_observer(history, &name);
    let config = WorkerConfig::default()
        .renew_every(Duration::from_millis(500))
        .min_poll_interval(Duration::from_millis(100))
        .idle_poll_interval(Duration::from_millis(200))
        .max_records(200);
    let mut worker = ShardWorker::new(session, store.clone(), kinesis.clone(), handler, config)
        .with_observer(observer);
    let stop = stop.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = worker
            .run_until(None, || stop.load(Ordering::Relaxed))
            .await
        {
            tracing::error!(error = %e, "worker stopped on an error");
        }
    });
    Ok((name, task))
}

fn spawn_ticks<F, Fut>(every: Duration, stop: Arc<AtomicBool>, mut tick: F) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            tick().await;
            tokio::time::sleep(every).await;
        }
    })
}

async fn split_first_open_shard(kinesis: &aws_sdk_kinesis::Client) -> Result<String, Error> {
    let out = kinesis
        .list_shards()
        .stream_name(STREAM)
        .send()
        .await
        .map_err(|e| err("ListShards", e))?;
    let shard = out
        .shards()
        .iter()
        .find(|s| {
            s.sequence_number_range()
                .is_some_and(|r| r.ending_sequence_number().is_none())
        })
        .ok_or_else(|| Error::Demo("no open shard to split".into()))?;
    let range = shard
        .hash_key_range()
        .ok_or_else(|| Error::Demo("a shard without a hash key range".into()))?;
    let lo: u128 = range
        .starting_hash_key()
        .parse()
        .map_err(|e| err("hash key", e))?;
    let hi: u128 = range
        .ending_hash_key()
        .parse()
        .map_err(|e| err("hash key", e))?;
    let mid = lo + (hi - lo) / 2;
    kinesis
        .split_shard()
        .stream_name(STREAM)
        .shard_to_split(shard.shard_id())
        .new_starting_hash_key(mid.to_string())
        .send()
        .await
        .map_err(|e| err("SplitShard", e))?;
    wait_active(kinesis).await?;
    Ok(shard.shard_id().to_owned())
}

fn progress_bar(args: &DemoArgs) -> ProgressBar {
    if args.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(args.records as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} processed  {msg}")
            .expect("template")
            .progress_chars("=> "),
    );
    bar
}

fn say(bar: &ProgressBar, quiet: bool, text: String) {
    if quiet {
        tracing::info!("{text}");
    } else {
        bar.println(text);
    }
}

/// Runs the demo. Its [`DemoReport::verification`] says whether it passed.
pub async fn run(args: &DemoArgs) -> Result<DemoReport, Error> {
    let started = Instant::now();
    let (dir, temporary) = state_dir(args)?;
    let state_file = dir.join("state.sqlite");
    let servers = LocalServers::start(LocalOptions {
        dynamodb_file: Some(state_file.clone()),
        ..LocalOptions::default()
    })
    .map_err(|e| err("starting the embedded servers", e))?;
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let result = run_on(args, &aws, started, state_file).await;
    tokio::task::spawn_blocking(move || servers.stop())
        .await
        .map_err(|e| err("stopping the servers", e))?;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn run_on(
    args: &DemoArgs,
    aws: &AwsClients,
    started: Instant,
    state_file: PathBuf,
) -> Result<DemoReport, Error> {
    let bar = progress_bar(args);
    let kinesis = aws.kinesis.clone();
    kinesis
        .create_stream()
        .stream_name(STREAM)
        .shard_count(args.shards.max(1) as i32)
        .send()
        .await
        .map_err(|e| err("CreateStream", e))?;
    wait_active(&kinesis).await?;
    let store = StateStore::new(aws.dynamodb.clone(), StoreConfig::new(GROUP, STREAM)?);
    store
        .start_on_stream(&kinesis, TableOptions::default())
        .await?;
    say(
        &bar,
        args.quiet,
        format!(
            "stream {STREAM} ({} shards), group {GROUP}, {} workers, state in {}",
            args.shards,
            args.workers,
            state_file.display()
        ),
    );

    let history: SharedHistory = Arc::new(Mutex::new(History::default()));
    let stop = Arc::new(AtomicBool::new(false));
    // Production is spread over about ten seconds, so records keep coming
    // while a worker dies and a shard splits.
    let batches = args.records.div_ceil(args.keys.clamp(1, 100)).max(1) as u32;
    let pace = Duration::from_secs(10) / batches;
    let load = NumberedLoad {
        stream: STREAM.to_owned(),
        records: Some(args.records),
        keys: args.keys.clamp(1, 500),
        batch: 100,
        pace,
    };
    let producer = {
        let (kinesis, history, stop) = (kinesis.clone(), history.clone(), stop.clone());
        tokio::spawn(async move { produce_numbered(&kinesis, &load, &history, &stop).await })
    };
    let rebalancer = Rebalancer::new(
        store.clone(),
        kinesis.clone(),
        RebalanceConfig::default()
            .lease_term(LEASE_TERM)
            .heartbeat_timeout(LEASE_TERM)
            .max_moves_per_tick(None),
    );
    let reaper = Reaper::new(
        store.clone(),
        kinesis.clone(),
        ReapConfig::default().heartbeat_timeout(LEASE_TERM * 2),
    );
    let mut workers = Vec::new();
    for i in 0..args.workers.max(1) {
        workers.push(spawn_worker(i, &store, &kinesis, &history, &stop)?);
    }
    let control_stop = Arc::new(AtomicBool::new(false));
    let rebalancing = spawn_ticks(
        Duration::from_millis(250),
        control_stop.clone(),
        move || {
            let r = rebalancer.clone();
            async move {
                if let Err(e) = r.tick().await {
                    tracing::warn!(error = %e, "rebalancer tick failed");
                }
            }
        },
    );
    let reaping = spawn_ticks(Duration::from_secs(1), control_stop.clone(), move || {
        let r = reaper.clone();
        async move {
            if let Err(e) = r.tick().await {
                tracing::warn!(error = %e, "reaper tick failed");
            }
        }
    });

    let mut killed = None;
    let mut split = None;
    let deadline = started + Duration::from_secs(args.timeout_seconds);
    let mut produced_all = false;
    let outcome = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (produced, unique) = {
            let h = history.lock().expect("history");
            let unique: std::collections::HashSet<(&str, u64)> =
                h.processed.iter().map(|p| (p.key.as_str(), p.n)).collect();
            (h.produced.len(), unique.len())
        };
        bar.set_position(unique as u64);
        if !produced_all && producer.is_finished() {
            produced_all = true;
        }
        if killed.is_none() && args.workers > 1 && unique * 4 >= args.records {
            let (name, task) = workers.remove(0);
            task.abort();
            history
                .lock()
                .expect("history")
                .killed
                .push((name.clone(), Instant::now()));
            say(
                &bar,
                args.quiet,
                format!("killed {name} mid-stream: no release, no more heartbeats"),
            );
            bar.set_message(format!("{name} killed"));
            killed = Some(name);
        }
        if split.is_none() && unique * 20 >= args.records * 9 {
            let shard = split_first_open_shard(&kinesis).await?;
            say(
                &bar,
                args.quiet,
                format!("split {shard}: its children wait until it is read to the end"),
            );
            bar.set_message(format!("{shard} split"));
            split = Some(shard);
        }
        if produced_all && unique >= produced && split.is_some() {
            break Ok(());
        }
        if Instant::now() >= deadline {
            break Err(Error::Demo(format!(
                "timed out after {}s: {unique} of {produced} records processed",
                args.timeout_seconds
            )));
        }
    };
    bar.finish_and_clear();
    producer.await.map_err(|e| err("producer", e))?;
    let final_snapshot = store.load_group().await?;
    stop.store(true, Ordering::Relaxed);
    for (_, task) in workers {
        let _ = task.await;
    }
    control_stop.store(true, Ordering::Relaxed);
    let _ = rebalancing.await;
    let _ = reaping.await;
    outcome?;
    let (shards, _) = shardkeeper::consumer::list_stream_shards(
        &kinesis,
        &store.config().stream,
        &store.config().retry,
    )
    .await?;
    let mut history = history.lock().expect("history");
    history.parents = shards
        .into_iter()
        .map(|s| (s.shard_id, s.parents))
        .collect();
    let verification = check(&history);
    Ok(DemoReport {
        verification,
        final_status: GroupStatus::from_snapshot(&final_snapshot, LEASE_TERM),
        killed,
        split,
        elapsed: started.elapsed(),
        state_file,
    })
}
