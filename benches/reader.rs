//! DynamoDB Streams reader throughput: records per second through
//! `StreamReader::poll` (reading, decoding, the processing core, a position
//! stored after each shard's batch), next to bare GetRecords calls over the
//! same records in the same run (the floor: what reading alone costs on this
//! server). 20,000 changes of about 500 bytes on the in-process DynamoDB
//! server's table stream, read from `TRIM_HORIZON` by a new reader each
//! round; the rounds alternate floor and reader.
//!
//! The handler counts bytes and returns: this measures what the reader adds
//! to a read, not a handler's waits.
//!
//! Run: `cargo bench --bench reader`.

#[allow(dead_code)]
mod support;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use shardkeeper::ddb_streams::{ReaderConfig, StreamReader};
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{StateStore, StoreConfig};
use shardkeeper_local::{create_keyed_table, test_clients, unique_name, AwsClients};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const RECORDS: usize = 20_000;
const PAYLOAD_BYTES: usize = 480;
const ROUNDS: usize = 3;

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let table = unique_name("bench-orders");
        let created = create_keyed_table(&aws.dynamodb, &table, "id", true)
            .await
            .expect("the table");
        let arn = created
            .table_description()
            .and_then(|t| t.latest_stream_arn())
            .expect("a stream")
            .to_owned();
        write(&aws, &table).await;
        let state = support::state_table(&aws, "bench-reader-state").await;
        println!("| round | path | records | seconds | records/s | reader / floor |");
        println!("| ---: | --- | ---: | ---: | ---: | ---: |");
        for round in 1..=ROUNDS {
            let floor = bare(&aws, &arn).await;
            let reader = through_reader(&aws, &state, &arn, round).await;
            let rate = |s: f64| RECORDS as f64 / s;
            println!(
                "| {round} | bare GetRecords (floor) | {RECORDS} | {floor:.3} | {:.0} | 1.00 |",
                rate(floor)
            );
            println!(
                "| {round} | StreamReader::poll | {RECORDS} | {reader:.3} | {:.0} | {:.2} |",
                rate(reader),
                reader / floor
            );
        }
    });
}

/// Writes the records, 25 items a BatchWriteItem.
async fn write(aws: &AwsClients, table: &str) {
    let payload = "x".repeat(PAYLOAD_BYTES);
    for chunk in 0..RECORDS / 25 {
        let requests: Vec<WriteRequest> = (0..25)
            .map(|i| {
                let put = PutRequest::builder()
                    .item(
                        "id",
                        AttributeValue::S(format!("order-{:06}", chunk * 25 + i)),
                    )
                    .item("payload", AttributeValue::S(payload.clone()))
                    .build()
                    .expect("a put");
                WriteRequest::builder().put_request(put).build()
            })
            .collect();
        aws.dynamodb
            .batch_write_item()
            .request_items(table, requests)
            .send()
            .await
            .expect("written");
    }
}

/// Seconds to read every record with bare DescribeStream, GetShardIterator
/// and GetRecords calls.
async fn bare(aws: &AwsClients, arn: &str) -> f64 {
    let started = Instant::now();
    let described = aws
        .streams
        .describe_stream()
        .stream_arn(arn)
        .send()
        .await
        .expect("described");
    let shards: Vec<String> = described
        .stream_description()
        .map(|d| {
            d.shards()
                .iter()
                .filter_map(|s| s.shard_id().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut read = 0;
    for shard in shards {
        let mut iterator = aws
            .streams
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard)
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("an iterator")
            .shard_iterator
            .expect("open");
        loop {
            let page = aws
                .streams
                .get_records()
                .shard_iterator(&iterator)
                .send()
                .await
                .expect("records");
            let n = page.records().len();
            read += n;
            match page.next_shard_iterator {
                Some(next) if n > 0 && read < RECORDS => iterator = next,
                _ => break,
            }
        }
    }
    assert_eq!(read, RECORDS, "the floor read every record");
    started.elapsed().as_secs_f64()
}

/// Seconds for a new reader to run every record through `poll`.
async fn through_reader(aws: &AwsClients, state: &str, arn: &str, round: usize) -> f64 {
    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new(&format!("bench-reader-{round}"), "orders")
            .expect("a config")
            .table(state)
            .expect("a table"),
    );
    let mut reader = StreamReader::new(aws.streams.clone(), store, arn, ReaderConfig::default());
    let counted = Arc::new(AtomicU64::new(0));
    let sink = counted.clone();
    let handler = move |_record: StreamRecord| {
        let sink = sink.clone();
        async move {
            sink.fetch_add(1, Ordering::Relaxed);
            Ok::<(), std::io::Error>(())
        }
    };
    let started = Instant::now();
    while counted.load(Ordering::Relaxed) < RECORDS as u64 {
        reader.poll(&handler).await.expect("a poll");
    }
    started.elapsed().as_secs_f64()
}
