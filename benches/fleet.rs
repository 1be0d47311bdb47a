//! A fleet of shard workers on the in-process servers, run the way Lambda
//! runs the shard-worker function: the rebalancer (ticking every second)
//! sizes the fleet and starts workers; each start is an invocation of the
//! worker function's handler with a deadline 20 s away, which drains for its
//! last 4 s. A producer writes to 16 shards at a rate that steps up and
//! down; the handler spends 2 ms on each record, so the load asks for more
//! workers than the shard count does.
//!
//! Reports, per 10 s: the producer's and the fleet's records per second,
//! the workers running, the longest a record waited from its put to its
//! handler, and the longest hand-over gap: after a worker handed a shard
//! over (its `Stopped { why: HandedOff }` event), how long the shard's next
//! record waited beyond that instant, or beyond its put if it came later
//! (the goal: no more than the renew interval, 1 s). Then the whole run's invocations, hand-offs and longest
//! gap. Writes the seconds as CSV to `target/fleet.csv`;
//! `python3 benches/plot_fleet.py` draws `docs/fleet.png` from it.
//!
//! Run: `cargo bench --bench fleet` (about 2.5 minutes).

#[allow(dead_code)]
mod support;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use shardkeeper::consumer::{StopReason, WorkerConfig, WorkerEvent, WorkerReport};
use shardkeeper::functions::{Fleet, Rebalancer, TaskStarter, WorkerFunction};
use shardkeeper::group::{FleetConfig, RebalanceConfig};
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SHARDS: i32 = 16;
const LIFETIME: Duration = Duration::from_secs(20);
const DRAIN: Duration = Duration::from_secs(4);
const RENEW: Duration = Duration::from_secs(1);
const TERM: Duration = Duration::from_secs(3);
const HANDLER_COST: Duration = Duration::from_millis(2);
/// Records per second, for 30 s each.
const RATES: [u64; 5] = [100, 400, 1200, 400, 100];
const PHASE: Duration = Duration::from_secs(30);

/// One record handled: (put, handled) in ms since the start, and by which
/// invocation.
type Handling = (u64, u64, u64);

/// Per shard, each record handled.
type Handled = Arc<Mutex<BTreeMap<String, Vec<Handling>>>>;

async fn create_stream(aws: &AwsClients) -> String {
    let name = unique_name("fleet");
    aws.kinesis
        .create_stream()
        .stream_name(&name)
        .shard_count(SHARDS)
        .send()
        .await
        .unwrap();
    loop {
        let out = aws
            .kinesis
            .describe_stream_summary()
            .stream_name(&name)
            .send()
            .await
            .unwrap();
        if out
            .stream_description_summary()
            .map(|s| s.stream_status().as_str())
            == Some("ACTIVE")
        {
            return name;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let table = unique_name("fleet");
        let store = StateStore::new(
            aws.dynamodb.clone(),
            StoreConfig::new(&unique_name("g"), &create_stream(&aws).await)
                .unwrap()
                .table(&table)
                .unwrap(),
        );
        store.table().ensure(&TableOptions::default()).await.unwrap();
        let stream = store.config().stream.to_string();
        let t0 = Instant::now();
        let ms = move || t0.elapsed().as_millis() as u64;

        let handled: Handled = Arc::default();
        let sink = handled.clone();
        let handlers = Arc::new(AtomicU64::new(0));
        let hand_offs: Arc<Mutex<BTreeMap<String, Vec<u64>>>> = Arc::default();
        let handed_log = hand_offs.clone();
        let function = Arc::new(WorkerFunction::new(store.clone(), aws.kinesis.clone(), move || {
                let sink = sink.clone();
                let worker = handlers.fetch_add(1, Ordering::SeqCst);
                move |record: StreamRecord| {
                    let sink = sink.clone();
                    async move {
                        tokio::time::sleep(HANDLER_COST).await;
                        let put: u64 = std::str::from_utf8(&record.data).unwrap().parse().unwrap();
                        sink.lock()
                            .unwrap()
                            .entry(record.shard_id.to_string())
                            .or_default()
                            .push((put, ms(), worker));
                        Ok::<(), std::io::Error>(())
                    }
                }
            }).lease_term(TERM).config(WorkerConfig::default().renew_every(RENEW).idle_poll_interval(Duration::from_millis(200)).expiry_margin(Duration::from_millis(500))).margin(Duration::from_millis(200)).drain(DRAIN).emit_metrics(false).observer(Some(Arc::new(move |event| {
                if let WorkerEvent::Stopped {
                    shard,
                    why: StopReason::HandedOff,
                    at,
                } = event
                {
                    let at = at.saturating_duration_since(t0).as_millis() as u64;
                    handed_log.lock().unwrap().entry(shard.to_string()).or_default().push(at);
                }
            }))));
        // The Lambda service: each start is one invocation with its deadline.
        let running = Arc::new(AtomicI64::new(0));
        let invocations = Arc::new(AtomicU64::new(0));
        let reports: Arc<Mutex<Vec<WorkerReport>>> = Arc::default();
        let starter = {
            let (function, running, invocations, reports) =
                (function.clone(), running.clone(), invocations.clone(), reports.clone());
            TaskStarter::new(move || {
                let (function, running, reports) = (function.clone(), running.clone(), reports.clone());
                let n = invocations.fetch_add(1, Ordering::SeqCst);
                async move {
                    running.fetch_add(1, Ordering::SeqCst);
                    let mut context = lambda_runtime::Context::default();
                    context.request_id = format!("invocation-{n}");
                    context.deadline = (std::time::SystemTime::now() + LIFETIME)
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_millis() as u64;
                    let event = lambda_runtime::LambdaEvent::new(serde_json::json!({}), context);
                    let report = function.handle(event).await.expect("invocation");
                    reports.lock().unwrap().push(report);
                    running.fetch_sub(1, Ordering::SeqCst);
                }
            })
        };
        let rebalancer = Rebalancer {
            store: store.clone(),
            kinesis: aws.kinesis.clone(),
            config: RebalanceConfig::default().lease_term(TERM).heartbeat_timeout(TERM).max_moves_per_tick(None),
            emit_metrics: false,
            sightings: Default::default(),
            fleet: Some(Fleet::new(
                FleetConfig::default().min_workers(1).max_workers(12).shards_per_worker(16).lead(DRAIN + Duration::from_secs(4)).start_timeout(Duration::from_secs(5)).heartbeat_timeout(TERM),
                Arc::new(starter),
            )),
        };
        let total = PHASE * RATES.len() as u32;
        let ticking = {
            let rebalancer = rebalancer.clone();
            tokio::spawn(async move {
                while t0.elapsed() < total + LIFETIME {
                    if let Err(e) = rebalancer.tick().await {
                        eprintln!("rebalancer tick: {e}");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            })
        };
        // The producer: each second, that second's rate in batches of PutRecords.
        let produced: Arc<Mutex<Vec<u64>>> = Arc::default();
        let producing = {
            let (kinesis, stream, produced) = (aws.kinesis.clone(), stream.clone(), produced.clone());
            tokio::spawn(async move {
                let mut n = 0u64;
                for second in 0..total.as_secs() {
                    let started = Instant::now();
                    let rate = RATES[(second / PHASE.as_secs()) as usize];
                    let mut sent = 0;
                    while sent < rate {
                        let batch = (rate - sent).min(500);
                        let now = ms();
                        let entries = (0..batch)
                            .map(|i| {
                                PutRecordsRequestEntry::builder()
                                    .partition_key(format!("k{}", (n + i) % 256))
                                    .data(Blob::new(now.to_string()))
                                    .build()
                                    .unwrap()
                            })
                            .collect::<Vec<_>>();
                        kinesis
                            .put_records()
                            .stream_name(&stream)
                            .set_records(Some(entries))
                            .send()
                            .await
                            .unwrap();
                        n += batch;
                        sent += batch;
                    }
                    produced.lock().unwrap().push(sent);
                    tokio::time::sleep(Duration::from_secs(1).saturating_sub(started.elapsed())).await;
                }
            })
        };
        // The fleet's size, each second.
        let mut sizes = Vec::new();
        while t0.elapsed() < total {
            tokio::time::sleep(Duration::from_secs(1)).await;
            sizes.push(running.load(Ordering::SeqCst));
        }
        producing.await.unwrap();
        ticking.await.unwrap();
        while running.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // Per second: records handled, the longest a record waited, and
        // the longest hand-over gap: the next worker's first record of a
        // shard waited this long beyond the hand-off (or its put).
        let handled = handled.lock().unwrap().clone();
        let secs = total.as_secs() as usize;
        let slots = secs + LIFETIME.as_secs() as usize + 5;
        let mut per_second = vec![0u64; slots];
        let mut waited = vec![0u64; slots];
        let mut gaps = vec![0u64; slots];
        let mut hand_overs = 0;
        let mut worst = Vec::new();
        let hand_offs = hand_offs.lock().unwrap().clone();
        for (shard, records) in &handled {
            let mut records = records.clone();
            records.sort_unstable_by_key(|(put, at, _)| (*at, *put));
            for (put, at, _) in &records {
                let s = (*at / 1000) as usize;
                per_second[s] += 1;
                waited[s] = waited[s].max(at.saturating_sub(*put));
            }
            for at in hand_offs.get(shard).into_iter().flatten() {
                // The shard's next record handled after the hand-off.
                let Some((put, first, _)) = records.iter().find(|(_, h, _)| h > at) else {
                    continue;
                };
                hand_overs += 1;
                let gap = first.saturating_sub((*at).max(*put));
                let s = (*at / 1000) as usize;
                gaps[s] = gaps[s].max(gap);
                worst.push((gap, *at, *put, *first));
            }
        }
        let produced = produced.lock().unwrap().clone();
        let reports = reports.lock().unwrap().clone();
        let mut csv = std::fs::File::create(concat!(env!("CARGO_MANIFEST_DIR"), "/target/fleet.csv")).unwrap();
        writeln!(csv, "second,produced,handled,workers,longest_wait_ms,longest_hand_over_gap_ms").unwrap();
        for s in 0..secs {
            writeln!(
                csv,
                "{s},{},{},{},{},{}",
                produced.get(s).copied().unwrap_or(0),
                per_second[s],
                sizes.get(s).copied().unwrap_or(0),
                waited[s],
                gaps[s]
            )
            .unwrap();
        }
        println!("| seconds | produced, records/s | handled, records/s | workers running (min-max) | longest wait of a record, ms | longest hand-over gap, ms |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        for w in 0..secs / 10 {
            let r = w * 10..w * 10 + 10;
            let avg = |v: &[u64]| v[r.clone()].iter().sum::<u64>() / 10;
            let workers = &sizes[r.clone()];
            println!(
                "| {}-{} | {} | {} | {}-{} | {} | {} |",
                r.start,
                r.end,
                avg(&produced),
                avg(&per_second),
                workers.iter().min().unwrap(),
                workers.iter().max().unwrap(),
                waited[r.clone()].iter().max().unwrap(),
                gaps[r.clone()].iter().max().unwrap()
            );
        }
        let longest = gaps.iter().max().unwrap();
        worst.sort_unstable();
        for (gap, at, put, first) in worst.iter().rev().take(5) {
            eprintln!("hand-over gap {gap} ms: handed over at {at}, next record put at {put}, handled at {first}");
        }
        let handed: u64 = reports.iter().map(|r| r.handed_off).sum();
        let held: u64 = reports.iter().map(|r| r.held_at_stop).sum();
        let lost: u64 = reports.iter().map(|r| r.leases_lost).sum();
        let sent: u64 = produced.iter().sum();
        let done: u64 = handled.values().map(|v| v.len() as u64).sum();
        println!();
        println!(
            "{} invocations of {} s; {handed} leases handed off, {held} held at a stop (the last generation's), {lost} lost; \
             {sent} records produced, {done} handled; {hand_overs} hand-offs followed by a record, \
             the longest gap {longest} ms, {:.2}x the renew interval",
            reports.len(),
            LIFETIME.as_secs(),
            *longest as f64 / RENEW.as_millis() as f64
        );
    });
}
