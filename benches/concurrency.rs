//! What records of different keys at once (`ProcessingOptions::concurrency`)
//! buy a handler that waits as real ones do (3 to 7 ms a record, 5 on
//! average: a DynamoDB write, an HTTP call), measured on the path a user
//! pays.
//!
//! 1. One event-source-mapped batch: 1,000 Kinesis records over 100
//!    partition keys, from the event's bytes to the response's bytes
//!    (`process_bytes`), one record at a time against `concurrency(64)`,
//!    with per-key order checked in the run. The floor, measured in the
//!    same run: the same 1,000 waits with 64 at a time and nothing else
//!    (no event, no order). Beside them, Powertools for AWS Lambda
//!    (Python)'s `AsyncBatchProcessor` on the same event and delay (it runs
//!    every record at once and keeps no order), when `python3` has
//!    `aws-lambda-powertools` (`pip install aws-lambda-powertools`).
//! 2. A shard worker holding 8 shards on the in-process servers, each fed
//!    1,000 records a second (100 keys a shard) by a producer for 20 s,
//!    with the same handler: one record at a time (its shards one after
//!    another) against `concurrency(64)` (its shards at once), each worker
//!    on a stream of its own in the same run: records processed, the
//!    backlog at the end, the highest lag (a record's arrival to its
//!    handler's end).
//!
//! Run: `cargo bench --bench concurrency`.

#[allow(dead_code)]
mod support;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use shardkeeper::consumer::WorkerConfig;
use shardkeeper::lambda::{EventSource, KinesisProcessor};
use shardkeeper::processing::{json, ProcessingOptions, RecordHandler, StreamRecord};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The handler's wait for record `n`: 3 to 7 ms, 5 ms on average, not the
/// same for a key's consecutive records (the same in the Python peer).
fn wait(n: u64) -> Duration {
    Duration::from_millis(3 + (n * 7 + n / 100) % 5)
}
const RECORDS: usize = 1_000;
const KEYS: usize = 100;
const IN_FLIGHT: usize = 64;
const ROUNDS: usize = 3;

#[derive(serde::Deserialize)]
struct Numbered {
    n: u64,
}

/// What the handler completed: (key, n), in the order of completion.
type Completed = Arc<Mutex<Vec<(String, u64)>>>;

/// A handler that waits ([`wait`]) and notes what it completed and the
/// highest lag it saw (now less the record's arrival, in ms).
fn waiting(completed: Completed, lag: Arc<AtomicU64>) -> impl RecordHandler {
    json(move |m: Numbered, record: StreamRecord| {
        let (completed, lag) = (completed.clone(), lag.clone());
        async move {
            tokio::time::sleep(wait(m.n)).await;
            if let Some(arrived) = record.approximate_arrival {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                lag.fetch_max(now.saturating_sub(arrived).max(0) as u64, Ordering::Relaxed);
            }
            completed
                .lock()
                .unwrap()
                .push((record.partition_key.to_string(), m.n));
            Ok::<(), std::io::Error>(())
        }
    })
}

/// The keys whose records completed out of their order.
fn keys_out_of_order(completed: &[(String, u64)]) -> usize {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut broken = std::collections::BTreeSet::new();
    for (key, n) in completed {
        if last.get(key.as_str()).is_some_and(|l| *l > *n) {
            broken.insert(key.as_str());
        }
        last.insert(key, *n);
    }
    broken.len()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        one_batch().await;
        let aws = test_clients().await.expect("servers");
        worker_on_eight_shards(&aws).await;
    });
}

/// Part 1: one batch, on the whole handler path.
async fn one_batch() {
    let event = support::events::kinesis_event(
        (0..RECORDS).map(|i| (format!("k{}", i % KEYS), serde_json::json!({ "n": i }))),
    );
    let bytes = Bytes::from(event.clone().into_bytes());
    let mut results: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut out_of_order: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..ROUNDS {
        // The floor: the same waits, 64 at a time, nothing else.
        let started = Instant::now();
        stream::iter(0..RECORDS as u64)
            .for_each_concurrent(IN_FLIGHT, |n| tokio::time::sleep(wait(n)))
            .await;
        results
            .entry("floor: 1,000 waits, 64 at a time")
            .or_default()
            .push(millis(started));
        for (name, concurrency) in [
            ("shardkeeper, one record at a time", 1),
            ("shardkeeper, concurrency(64)", IN_FLIGHT),
        ] {
            let completed = Completed::default();
            let processor = KinesisProcessor::new(waiting(completed.clone(), Arc::default()))
                .with_options(ProcessingOptions::default().concurrency(concurrency));
            let started = Instant::now();
            let report = processor
                .process_bytes(
                    bytes.clone(),
                    Some(SystemTime::now() + Duration::from_secs(900)),
                )
                .await
                .unwrap();
            let response =
                serde_json::to_vec(&shardkeeper::lambda::Kinesis::response(&report)).unwrap();
            results.entry(name).or_default().push(millis(started));
            assert!(report.failures.is_empty() && !response.is_empty());
            assert_eq!(report.processed, RECORDS as u64);
            let completed = completed.lock().unwrap();
            *out_of_order.entry(name).or_default() += keys_out_of_order(&completed);
        }
    }
    let floor = median(results["floor: 1,000 waits, 64 at a time"].clone());
    let serial = median(results["shardkeeper, one record at a time"].clone());
    println!("One batch of {RECORDS} Kinesis records over {KEYS} keys, a handler that waits 3 to 7 ms a record (5 on average), the whole path (event bytes to response bytes), median of {ROUNDS} rounds:\n");
    println!("| path | median | vs one at a time | vs the floor | keys out of order |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, times) in &results {
        let m = median(times.clone());
        let order = out_of_order
            .get(name)
            .map_or("-".to_owned(), |n| n.to_string());
        println!(
            "| {name} | {m:.0} ms | {:.1}x | {:.2}x | {order} |",
            serial / m,
            m / floor
        );
    }
    let path = std::env::temp_dir().join(format!("{}.json", unique_name("event")));
    std::fs::write(&path, &event).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/benches/peers/powertools_async.py"
    );
    let peer = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .arg(ROUNDS.to_string())
        .output();
    let _ = std::fs::remove_file(&path);
    match peer {
        Ok(out) if out.status.success() => {
            let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let m = line["median_ms"].as_f64().unwrap();
            println!(
                "| Powertools (Python) AsyncBatchProcessor, all at once | {m:.0} ms | {:.1}x | {:.2}x | {} |",
                serial / m,
                m / floor,
                line["keys_out_of_order"]
            );
        }
        _ => println!(
            "| Powertools (Python) AsyncBatchProcessor | not run: `pip install aws-lambda-powertools` | | | |"
        ),
    }
}

fn millis(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

const SHARDS: usize = 8;
const PER_SHARD_PER_SECOND: usize = 1_000;
const SECONDS: u64 = 20;

/// Part 2: a worker holding 8 shards under a steady producer.
async fn worker_on_eight_shards(aws: &AwsClients) {
    println!("\nA worker holding {SHARDS} shards, each fed {PER_SHARD_PER_SECOND} records a second ({KEYS} keys a shard) for {SECONDS} s, a handler that waits 3 to 7 ms a record:\n");
    println!("| worker | produced | processed in {SECONDS} s | processed a second | backlog at the end | highest lag (arrival to done) | keys out of order |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, concurrency) in [("one record at a time", 1), ("concurrency(64)", IN_FLIGHT)] {
        let stream = unique_name("bench");
        aws.kinesis
            .create_stream()
            .stream_name(&stream)
            .shard_count(SHARDS as i32)
            .send()
            .await
            .unwrap();
        support::active(aws, &stream).await;
        let (completed, lag) = (Completed::default(), Arc::new(AtomicU64::new(0)));
        let config = WorkerConfig::default()
            .processing(ProcessingOptions::default().concurrency(concurrency));
        let handler = waiting(completed.clone(), lag.clone());
        let mut worker =
            support::holding_worker(aws, &stream, "bench-worker", handler, config, SHARDS).await;
        let produced = Arc::new(AtomicU64::new(0));
        let producer = tokio::spawn(produce(aws.clone(), stream.clone(), produced.clone()));
        // The run ends at the deadline, in the middle of a step if need
        // be (what the handler completed by then counts).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(SECONDS);
        while tokio::time::Instant::now() < deadline {
            match tokio::time::timeout_at(deadline, worker.step()).await {
                Ok(Ok(false)) => tokio::time::sleep(Duration::from_millis(10)).await,
                Ok(Err(e)) => panic!("{e}"),
                _ => {}
            }
        }
        producer.abort();
        let _ = producer.await;
        let processed = completed.lock().unwrap().len() as u64;
        let produced = produced.load(Ordering::Relaxed);
        let completed = completed.lock().unwrap();
        println!(
            "| {name} | {produced} | {processed} | {:.0} | {} | {:.1} s | {} |",
            processed as f64 / SECONDS as f64,
            produced.saturating_sub(processed),
            lag.load(Ordering::Relaxed) as f64 / 1000.0,
            keys_out_of_order(&completed)
        );
    }
}

/// Puts [`PER_SHARD_PER_SECOND`] records a second to each shard (each key
/// numbered in order), counting them in `produced`, until aborted.
async fn produce(aws: AwsClients, stream: String, produced: Arc<AtomicU64>) {
    let keys = KEYS * SHARDS;
    let mut next = vec![0u64; keys];
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let per_tick = SHARDS * PER_SHARD_PER_SECOND / 10;
    let mut key = 0;
    loop {
        tick.tick().await;
        let mut left = per_tick;
        while left > 0 {
            let size = left.min(500);
            left -= size;
            let entries: Vec<_> = (0..size)
                .map(|_| {
                    key = (key + 1) % keys;
                    let n = next[key];
                    next[key] += 1;
                    PutRecordsRequestEntry::builder()
                        .partition_key(format!("k{key}"))
                        .data(Blob::new(serde_json::json!({ "n": n }).to_string()))
                        .build()
                        .unwrap()
                })
                .collect();
            let count = entries.len() as u64;
            aws.kinesis
                .put_records()
                .stream_name(&stream)
                .set_records(Some(entries))
                .send()
                .await
                .unwrap();
            produced.fetch_add(count, Ordering::Relaxed);
        }
    }
}
