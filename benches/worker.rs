//! Polling worker throughput: records per second through one shard with a
//! fenced checkpoint after every GetRecords batch, 500-byte records, from
//! the in-process Kinesis server, next to the Kinesis per-shard read limit
//! (2 MB/s) as the baseline. Then the state table's write units per record
//! at a steady 1 MB/s into the shard, with a checkpoint after every batch
//! and with the default pacing (at most one every 5 s), in the same run.
//!
//! Run: `cargo bench --bench worker`.

#[allow(dead_code)]
mod support;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use shardkeeper::consumer::WorkerConfig;
use shardkeeper::processing::StreamRecord;
use shardkeeper_local::{test_clients, unique_name};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECORDS: usize = 50_000;
const RECORD_BYTES: usize = 500;
const SHARD_LIMIT_BYTES_PER_S: f64 = 2.0 * 1024.0 * 1024.0;

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let stream = unique_name("bench");
        aws.kinesis.create_stream().stream_name(&stream).shard_count(1).send().await.unwrap();
        support::active(&aws, &stream).await;
        let payload = vec![b'x'; RECORD_BYTES];
        for chunk in 0..RECORDS / 500 {
            let entries: Vec<_> = (0..500)
                .map(|i| {
                    PutRecordsRequestEntry::builder()
                        .partition_key(format!("k{}", chunk * 500 + i))
                        .data(Blob::new(payload.clone()))
                        .build()
                        .unwrap()
                })
                .collect();
            aws.kinesis.put_records().stream_name(&stream).set_records(Some(entries)).send().await.unwrap();
        }
        let counted = Arc::new(AtomicU64::new(0));
        let sink = counted.clone();
        let handler = move |record: StreamRecord| {
            let sink = sink.clone();
            async move {
                sink.fetch_add(record.data.len() as u64, Ordering::Relaxed);
                Ok::<(), std::io::Error>(())
            }
        };
        // What the toolkit can do, so no pacing to the Kinesis limit (that
        // is the baseline the result is compared with).
        let config = WorkerConfig::default().min_poll_interval(Duration::ZERO).read_bytes_per_second(u64::MAX).checkpoint_every(Duration::ZERO);
        let mut worker = support::holding_worker(&aws, &stream, "bench-worker", handler, config, 1).await;
        let d0 = aws.dynamodb_requests.snapshot();
        let started = Instant::now();
        while worker.report().shards.processed < RECORDS as u64 {
            worker.step().await.unwrap();
        }
        let elapsed = started.elapsed().as_secs_f64();
        let report = worker.report().clone();

        // The same records read with bare GetRecords calls and nothing else:
        // what the server and the SDK cost on their own, in the same run.
        let shard = worker.shards()[0].to_string();
        let raw_started = Instant::now();
        let mut it = aws
            .kinesis
            .get_shard_iterator()
            .stream_name(&stream)
            .shard_id(&shard)
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator
            .unwrap();
        let mut raw_records = 0;
        while raw_records < RECORDS {
            let out = aws.kinesis.get_records().shard_iterator(&it).limit(10_000).send().await.unwrap();
            raw_records += out.records().len();
            it = out.next_shard_iterator().unwrap().to_owned();
        }
        let raw_elapsed = raw_started.elapsed().as_secs_f64();
        let bytes = counted.load(Ordering::Relaxed) as f64;
        let rate = RECORDS as f64 / elapsed;
        let mbps = bytes / elapsed / 1024.0 / 1024.0;
        println!("| path | records | record bytes | GetRecords | checkpoints | DynamoDB requests | seconds | records/s | MB/s | vs 2 MB/s shard limit |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        let raw_mbps = (RECORDS * RECORD_BYTES) as f64 / raw_elapsed / 1024.0 / 1024.0;
        println!(
            "| bare GetRecords (baseline) | {RECORDS} | {RECORD_BYTES} | - | - | - | {:.2} | {:.0} | {:.1} | {:.1}x |",
            raw_elapsed,
            RECORDS as f64 / raw_elapsed,
            raw_mbps,
            raw_mbps * 1024.0 * 1024.0 / SHARD_LIMIT_BYTES_PER_S
        );
        println!(
            "| shardkeeper worker | {RECORDS} | {RECORD_BYTES} | {} | {} | {} | {:.2} | {:.0} | {:.1} | {:.1}x |",
            report.shards.polls,
            report.shards.checkpoints,
            aws.dynamodb_requests.requests_since(&d0),
            elapsed,
            rate,
            mbps,
            bytes / elapsed / SHARD_LIMIT_BYTES_PER_S
        );

        println!("\nSteady load, 1 MB/s into one shard (2,000 records of 500 bytes a second) for {STEADY_SECONDS} s, one worker with the default reads (every 200 ms):\n");
        println!("| checkpoints | records | GetRecords | checkpoints written | DynamoDB writes (all) | write units per record (checkpoints) | write units per record (all) |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (name, every) in [("after every batch", Duration::ZERO), ("at most every 5 s (default)", WorkerConfig::default().checkpoint_every)] {
            let (records, polls, checkpoints, writes) = steady(&aws, every).await;
            println!(
                "| {name} | {records} | {polls} | {checkpoints} | {writes} | {:.5} | {:.5} |",
                checkpoints as f64 / records as f64,
                writes as f64 / records as f64
            );
        }
    });
}

const STEADY_SECONDS: u64 = 10;

/// One worker reading a shard that gets 1 MB/s for [`STEADY_SECONDS`], with
/// `checkpoint_every`: records processed, GetRecords sent, checkpoints
/// written, and every DynamoDB write of the worker (one write unit each:
/// every item it writes is under 1 KB).
async fn steady(aws: &shardkeeper_local::AwsClients, every: Duration) -> (u64, u64, u64, u64) {
    let stream = unique_name("steady");
    aws.kinesis
        .create_stream()
        .stream_name(&stream)
        .shard_count(1)
        .send()
        .await
        .unwrap();
    support::active(aws, &stream).await;
    let config = WorkerConfig::default().checkpoint_every(every);
    let handler = |_: StreamRecord| async { Ok::<(), std::io::Error>(()) };
    let mut worker =
        support::holding_worker(aws, &stream, "steady-worker", handler, config, 1).await;
    // The producer: 500 records every 250 ms.
    let producing = {
        let (kinesis, stream) = (aws.kinesis.clone(), stream.clone());
        tokio::spawn(async move {
            let payload = vec![b'x'; RECORD_BYTES];
            let started = Instant::now();
            let mut n = 0u64;
            while started.elapsed() < Duration::from_secs(STEADY_SECONDS) {
                let entries: Vec<_> = (0..500)
                    .map(|i| {
                        PutRecordsRequestEntry::builder()
                            .partition_key(format!("k{}", n + i))
                            .data(Blob::new(payload.clone()))
                            .build()
                            .unwrap()
                    })
                    .collect();
                kinesis
                    .put_records()
                    .stream_name(&stream)
                    .set_records(Some(entries))
                    .send()
                    .await
                    .unwrap();
                n += 500;
                tokio::time::sleep_until(
                    (started + Duration::from_millis(250) * (n / 500) as u32).into(),
                )
                .await;
            }
            n
        })
    };
    let d0 = aws.dynamodb_requests.snapshot();
    while !producing.is_finished() {
        worker.step().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let produced = producing.await.unwrap();
    while worker.report().shards.processed < produced {
        worker.step().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let since = aws.dynamodb_requests.since(&d0);
    let writes: u64 = ["UpdateItem", "PutItem", "DeleteItem", "TransactWriteItems"]
        .iter()
        .filter_map(|op| since.get(*op).map(|c| c.requests))
        .sum();
    let report = worker.report();
    (
        report.shards.processed,
        report.shards.polls,
        report.shards.checkpoints,
        writes,
    )
}
