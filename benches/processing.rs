//! Processing throughput: the whole handler path of the Kinesis batch
//! processor (parse the event, decode base64, de-aggregation check, typed
//! JSON payload, a no-op handler, the response) against the raw ceiling
//! measured in the same run (parse the event with the `aws_lambda_events`
//! types, which decodes base64, then parse each payload; nothing else).
//!
//! Events: 10,000 small records just under the 6 MB Lambda payload limit,
//! and about 1,300 records of about 3 KB of payload each. Any other event
//! file (Kinesis or DynamoDB Streams) can be measured the same way:
//! `SHARDKEEPER_BENCH_EVENT=path/to/event.json cargo bench --bench processing`.
//!
//! A second ceiling, "raw borrowed", parses the records borrowed from the
//! event text and decodes base64 with the `base64` crate, as the processor
//! now does.
//!
//! Run: `cargo bench --bench processing`.

use aws_lambda_events::event::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::event::kinesis::KinesisEvent;
use base64::Engine;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shardkeeper::processing::{
    changes, json, Change, DynamoDbProcessor, KinesisProcessor, StreamRecord,
};
use std::hint::black_box;

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: String,
    amount_cents: u64,
    customer: Option<String>,
    currency: Option<String>,
    note: Option<String>,
}

/// A deterministic Kinesis event of `n` records with `note_len` bytes of padding each.
fn kinesis_event(n: usize, note_len: usize) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let note = "x".repeat(note_len);
    let records: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let order = if note_len == 0 {
                serde_json::json!({ "order_id": format!("o-{i:06}"), "amount_cents": (i * 37) % 100_000 })
            } else {
                serde_json::json!({
                    "order_id": format!("o-{i:06}"),
                    "amount_cents": (i * 37) % 100_000,
                    "customer": format!("c-{}", i % 97),
                    "currency": "EUR",
                    "note": note,
                })
            };
            let seq = format!("4959033827149025660855969253836157109592157598913{:07}", i);
            serde_json::json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": format!("c-{}", i % 97),
                    "sequenceNumber": seq,
                    "data": b64.encode(order.to_string()),
                    "approximateArrivalTimestamp": 1_763_701_200.123,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("shardId-000000000000:{seq}"),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/kinesis-processor",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

fn raw_kinesis(event: &str) -> usize {
    let parsed: KinesisEvent = serde_json::from_str(event).unwrap();
    let mut n = 0;
    for r in &parsed.records {
        let order: Order = serde_json::from_slice(&r.kinesis.data.0).unwrap();
        n += black_box(order.amount_cents) as usize & 1;
    }
    n
}

/// The raw ceiling with borrowed parsing: the event's records borrowed from
/// the text (only the fields a processor needs), base64 decoded with the
/// `base64` crate, then each payload parsed.
fn raw_kinesis_borrowed(event: &str) -> usize {
    use std::borrow::Cow;
    #[derive(serde::Deserialize)]
    struct Event<'a> {
        #[serde(rename = "Records", borrow)]
        records: Vec<Record<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Record<'a> {
        #[serde(rename = "eventID", borrow)]
        _event_id: Option<Cow<'a, str>>,
        #[serde(borrow)]
        kinesis: Payload<'a>,
    }
    #[derive(serde::Deserialize)]
    struct Payload<'a> {
        #[serde(rename = "partitionKey", borrow)]
        _partition_key: Cow<'a, str>,
        #[serde(rename = "sequenceNumber", borrow)]
        _sequence_number: Cow<'a, str>,
        #[serde(borrow)]
        data: Cow<'a, str>,
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let parsed: Event<'_> = serde_json::from_str(event).unwrap();
    let mut n = 0;
    for r in &parsed.records {
        let data = b64.decode(r.kinesis.data.as_bytes()).unwrap();
        let order: Order = serde_json::from_slice(&data).unwrap();
        n += black_box(order.amount_cents) as usize & 1;
    }
    n
}

fn raw_dynamodb(event: &str) -> usize {
    let parsed: DynamoDbEvent = serde_json::from_str(event).unwrap();
    let mut n = 0;
    for r in parsed.records {
        n += black_box(r.change.new_image.len());
    }
    n
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let kinesis = KinesisProcessor::new(json(|order: Order, _record: StreamRecord| async move {
        black_box(order.amount_cents);
        Ok::<(), std::io::Error>(())
    }));
    let dynamodb = DynamoDbProcessor::new(changes(
        |change: Change<serde_json::Value>, _record: StreamRecord| async move {
            black_box(&change);
            Ok::<(), std::io::Error>(())
        },
    ));
    let mut events: Vec<(String, String)> = vec![
        ("10,000 records, 5.7 MB".into(), kinesis_event(10_000, 0)),
        ("1,300 records of 3 KB".into(), kinesis_event(1_300, 2_900)),
    ];
    if let Ok(path) = std::env::var("SHARDKEEPER_BENCH_EVENT") {
        events.push((
            path.clone(),
            std::fs::read_to_string(&path).expect("event file"),
        ));
    }
    let mut group = c.benchmark_group("kinesis");
    group.sample_size(20);
    for (name, event) in &events {
        let is_dynamodb = event.contains("\"aws:dynamodb\"");
        let records = serde_json::from_str::<serde_json::Value>(event).unwrap()["Records"]
            .as_array()
            .unwrap()
            .len();
        eprintln!("{name}: {records} records, {} bytes", event.len());
        assert!(
            !name.starts_with("10,000") || event.len() < 6 * 1024 * 1024,
            "over the 6 MB payload limit"
        );
        group.throughput(Throughput::Bytes(event.len() as u64));
        group.bench_with_input(BenchmarkId::new("raw ceiling", name), event, |b, e| {
            b.iter(|| {
                if is_dynamodb {
                    raw_dynamodb(e)
                } else {
                    raw_kinesis(e)
                }
            })
        });
        if !is_dynamodb {
            group.bench_with_input(BenchmarkId::new("raw borrowed", name), event, |b, e| {
                b.iter(|| raw_kinesis_borrowed(e))
            });
        }
        group.bench_with_input(BenchmarkId::new("shardkeeper", name), event, |b, e| {
            b.iter(|| {
                runtime.block_on(async {
                    let report = if is_dynamodb {
                        dynamodb.process(e, None).await.unwrap()
                    } else {
                        kinesis.process(e, None).await.unwrap()
                    };
                    assert!(report.failures.is_empty());
                    report.processed
                })
            })
        });
        // As Lambda calls it: with a deadline, so every record is checked
        // against the stop-by instant and its handler bounded by it.
        group.bench_with_input(
            BenchmarkId::new("shardkeeper with a deadline", name),
            event,
            |b, e| {
                b.iter(|| {
                    runtime.block_on(async {
                        let deadline =
                            Some(std::time::SystemTime::now() + std::time::Duration::from_secs(60));
                        let report = if is_dynamodb {
                            dynamodb.process(e, deadline).await.unwrap()
                        } else {
                            kinesis.process(e, deadline).await.unwrap()
                        };
                        assert!(report.failures.is_empty());
                        report.processed
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
