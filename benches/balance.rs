//! Balancing by load, in real time on the in-process servers: 16 shards, 4
//! consumers (shard workers with the default settings), a handler that
//! waits 2 ms a record, a producer writing 10 records a second to each
//! shard and ten times that to 4 hot ones. The hot shards are chosen once
//! the group is balanced by count: three of one consumer's and one of
//! another's, as a count balance may leave them. Two runs, in the same
//! process, on groups of their own: the rebalancer balancing counts only
//! (today's default before load), then balancing load.
//!
//! Measured from the handlers (not from what the heartbeats report): each
//! consumer's busy time per 5 s window, and the busiest consumer's over the
//! mean. Reports, for each run, that ratio before and at the end, the
//! rebalancer ticks until it is within 1.3, and the leases that moved in
//! the last minute of steady load (per hour).
//!
//! Run: `cargo bench --bench balance` (about four minutes).

#[allow(dead_code)]
mod support;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use shardkeeper::consumer::{ConsumerSession, ShardWorker, WorkerConfig};
use shardkeeper::functions::Rebalancer;
use shardkeeper::group::RebalanceConfig;
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: usize = 16;
const CONSUMERS: usize = 4;
const TICK: Duration = Duration::from_secs(5);
const WINDOW: Duration = Duration::from_secs(5);
const HANDLER_WAIT: Duration = Duration::from_millis(2);
const STEADY: Duration = Duration::from_secs(60);
const TICKS: u32 = 16;

/// Each consumer's handler busy time so far.
type Busy = Arc<Mutex<BTreeMap<String, Duration>>>;

fn spawn_worker(
    store: &StateStore,
    aws: &AwsClients,
    name: &str,
    busy: &Busy,
) -> tokio::task::JoinHandle<()> {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let session = ConsumerSession::new(store.clone(), info, RebalanceConfig::default().lease_term);
    let (busy, me) = (busy.clone(), name.to_owned());
    let handler = move |_: StreamRecord| {
        let (busy, me) = (busy.clone(), me.clone());
        async move {
            let began = Instant::now();
            tokio::time::sleep(HANDLER_WAIT).await;
            *busy.lock().unwrap().entry(me).or_default() += began.elapsed();
            Ok::<(), std::io::Error>(())
        }
    };
    let mut worker = ShardWorker::new(
        session,
        store.clone(),
        aws.kinesis.clone(),
        handler,
        WorkerConfig::default(),
    );
    tokio::spawn(async move {
        let _ = worker.run_until(None, || false).await;
    })
}

/// Each shard's owner, as stored.
async fn owners(store: &StateStore) -> BTreeMap<String, String> {
    let group = store.load_group().await.unwrap();
    group
        .shards
        .iter()
        .filter_map(|s| Some((s.shard_id.to_string(), s.owner.as_ref()?.to_string())))
        .collect()
}

/// The busiest consumer's busy time in the next window over the mean.
async fn window_ratio(busy: &Busy) -> f64 {
    let before = busy.lock().unwrap().clone();
    tokio::time::sleep(WINDOW).await;
    let after = busy.lock().unwrap().clone();
    let spent: Vec<f64> = (0..CONSUMERS)
        .map(|i| {
            let c = format!("c{i}");
            let a = after.get(&c).copied().unwrap_or_default();
            let b = before.get(&c).copied().unwrap_or_default();
            (a - b).as_secs_f64()
        })
        .collect();
    let mean = spent.iter().sum::<f64>() / spent.len() as f64;
    spent.iter().cloned().fold(0.0, f64::max) / mean.max(1e-9)
}

struct Run {
    before: f64,
    after: f64,
    ticks_to_goal: Option<u32>,
    moves_per_hour: f64,
}

async fn run(aws: &AwsClients, balance_load: bool) -> Run {
    let stream = unique_name("balance");
    aws.kinesis
        .create_stream()
        .stream_name(&stream)
        .shard_count(SHARDS as i32)
        .send()
        .await
        .unwrap();
    support::active(aws, &stream).await;
    let table = support::state_table(aws, "balance").await;
    let config = StoreConfig::new(&unique_name("g"), &stream)
        .unwrap()
        .table(&table)
        .unwrap();
    let store = StateStore::new(aws.dynamodb.clone(), config);
    let rebalancer = Rebalancer::new(
        store.clone(),
        aws.kinesis.clone(),
        RebalanceConfig::default().balance_load(balance_load),
    );
    let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let scheduled = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                let _ = rebalancer.tick().await;
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(TICK).await;
            }
        })
    };
    let busy: Busy = Arc::default();
    let workers: Vec<_> = (0..CONSUMERS)
        .map(|i| spawn_worker(&store, aws, &format!("c{i}"), &busy))
        .collect();
    // Balanced by count: 4 each.
    let held = loop {
        let o = owners(&store).await;
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (s, c) in &o {
            by.entry(c.clone()).or_default().push(s.clone());
        }
        if o.len() == SHARDS
            && by.len() == CONSUMERS
            && by.values().all(|v| v.len() == SHARDS / CONSUMERS)
        {
            break by;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let mut holders = held.values();
    let first = holders.next().unwrap();
    let second = holders.next().unwrap();
    let hot: BTreeSet<String> = first[..3].iter().chain(&second[..1]).cloned().collect();
    // The shards' hash ranges, in shard order (explicit hash keys reach each).
    let shards = aws
        .kinesis
        .list_shards()
        .stream_name(&stream)
        .send()
        .await
        .unwrap();
    let targets: Vec<(String, String)> = shards
        .shards()
        .iter()
        .map(|s| {
            let range = s.hash_key_range().unwrap();
            (
                s.shard_id().to_owned(),
                range.starting_hash_key().to_owned(),
            )
        })
        .collect();
    let producing = Arc::new(AtomicBool::new(true));
    let producer = {
        let (kinesis, stream, on) = (aws.kinesis.clone(), stream.clone(), producing.clone());
        tokio::spawn(async move {
            while on.load(Ordering::Relaxed) {
                let entries: Vec<_> = targets
                    .iter()
                    .flat_map(|(shard, key)| {
                        let n = if hot.contains(shard) { 10 } else { 1 };
                        (0..n).map(move |_| {
                            PutRecordsRequestEntry::builder()
                                .partition_key("k")
                                .explicit_hash_key(key.clone())
                                .data(Blob::new("x"))
                                .build()
                                .unwrap()
                        })
                    })
                    .collect();
                let _ = kinesis
                    .put_records()
                    .stream_name(&stream)
                    .set_records(Some(entries))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Warm up one window, then measure.
    window_ratio(&busy).await;
    let before = window_ratio(&busy).await;
    let start_ticks = ticks.load(Ordering::Relaxed);
    let mut ticks_to_goal = None;
    while ticks.load(Ordering::Relaxed) - start_ticks < TICKS {
        let ratio = window_ratio(&busy).await;
        if ratio <= 1.3 && ticks_to_goal.is_none() {
            ticks_to_goal = Some(ticks.load(Ordering::Relaxed) - start_ticks);
        }
        if ratio > 1.3 {
            ticks_to_goal = None;
        }
    }
    // Steady load: the leases that move in a minute.
    let mut last = owners(&store).await;
    let mut moved = 0;
    let mut ratios = Vec::new();
    let began = Instant::now();
    while began.elapsed() < STEADY {
        ratios.push(window_ratio(&busy).await);
        let now = owners(&store).await;
        moved += now.iter().filter(|(s, o)| last.get(*s) != Some(*o)).count();
        last = now;
    }
    producing.store(false, Ordering::Relaxed);
    let _ = producer.await;
    scheduled.abort();
    for worker in workers {
        worker.abort();
    }
    let after = ratios.iter().sum::<f64>() / ratios.len() as f64;
    Run {
        before,
        after,
        ticks_to_goal,
        moves_per_hour: moved as f64 * 3600.0 / STEADY.as_secs_f64(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--list") {
        return;
    }
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let counts = run(&aws, false).await;
        let load = run(&aws, true).await;
        println!("{SHARDS} shards, 4 of them ten times hotter, {CONSUMERS} consumers, a handler waiting {} ms a record:\n", HANDLER_WAIT.as_millis());
        println!("| rebalancer | busiest / mean, hot shards placed | busiest / mean, last minute | ticks until within 1.3 (of {TICKS}) | leases moved per hour, steady |");
        println!("| --- | ---: | ---: | ---: | ---: |");
        for (name, r) in [("counts only", &counts), ("by load", &load)] {
            println!(
                "| {name} | {:.2}x | {:.2}x | {} | {:.0} |",
                r.before,
                r.after,
                r.ticks_to_goal.map_or("never".to_owned(), |t| t.to_string()),
                r.moves_per_hour
            );
        }
    });
}
