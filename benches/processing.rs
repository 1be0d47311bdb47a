//! Processing throughput: the whole handler path as Lambda pays it, from
//! the event's bytes as the runtime receives them to the response's bytes
//! (parse the event, decode base64 or the DynamoDB images, de-aggregation
//! check, the typed payload, a no-op handler, the report, the serialized
//! response), next to a floor measured in the same run: a SIMD validation
//! of the same bytes (`sonic-rs`, every value checked and skipped) and
//! nothing else. Goal: within 1.5x of the floor.
//!
//! Events (deterministic, generated): 10,000 small Kinesis records (just
//! under the 6 MB payload limit), 1,300 Kinesis records of about 3 KB of
//! payload, and 1,000 DynamoDB Streams records (`NEW_AND_OLD_IMAGES`) with
//! about 6 KB of nested images each (S, N, M, L, SS, BOOL, NULL), decoded
//! into `serde_json::Value` and into a typed struct. Any other event file
//! (Kinesis or DynamoDB Streams) can be measured the same way:
//! `SHARDKEEPER_BENCH_EVENT=path/to/event.json cargo bench --bench processing`.
//!
//! Other lines, for reference: "serde_json validation" (serde_json skipping
//! every value), "runtime's RawValue pass + process" (the path through
//! `LambdaEvent<Box<RawValue>>`: the runtime validates the event into a
//! `RawValue` first), for Kinesis "raw borrowed" (the records borrowed from
//! the text, base64 decoded, each payload parsed; nothing else), and for
//! DynamoDB "before" (each record decoded as the `changes` handler decoded
//! it before: into `aws_lambda_events`' record, then `serde_dynamo`).
//!
//! Before the criterion timings, each path and its floors are measured in
//! turn, round after round (31 rounds), and a markdown table of the medians
//! and of the median ratio per round is printed: on a shared machine a
//! ratio from interleaved rounds is steadier than two medians taken
//! seconds apart.
//!
//! Before that, the peak resident set of one processing of each
//! event is measured in a process of its own (the bench binary run again
//! with `SHARDKEEPER_BENCH_RSS=<event file>`): the event is read from a
//! file into one buffer, the peak is reset (`/proc/self/clear_refs`), the
//! event is processed once, and the peak (`VmHWM`) is printed next to the
//! event's size and the resident set before processing.
//!
//! Each path is also measured, in the same rounds, under the log lines the
//! functions write as deployed (`functions::init_tracing` with JSON logs:
//! Powertools-shaped lines at INFO, handler labels on), and under
//! tracing's own JSON subscriber at INFO (a span around each handler
//! call), each as a ratio to the path without a subscriber.
//!
//! Run: `cargo bench --bench processing`. With
//! `SHARDKEEPER_BENCH_SUBSCRIBER=1` a JSON tracing subscriber at INFO is
//! installed first, as a function on Lambda has one, so the path's spans
//! and events are paid for; `SHARDKEEPER_BENCH_SPANS=off` turns the
//! handler spans off (`ProcessingOptions::handler_spans`).

#[allow(dead_code)]
mod support;

use aws_lambda_events::event::dynamodb::EventRecord;
use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput};
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use shardkeeper::lambda::{BatchProcessor, DynamoDbProcessor, EventSource, KinesisProcessor};
use shardkeeper::processing::{
    changes, json, Change, ProcessingOptions, RecordHandler, StreamRecord,
};
use std::hint::black_box;
use std::time::{Duration, SystemTime};

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Order {
    order_id: String,
    amount_cents: u64,
    customer: Option<String>,
    currency: Option<String>,
    note: Option<String>,
}

/// The typed item of the DynamoDB event.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Item {
    pk: String,
    sk: String,
    status: String,
    amount_cents: u64,
    paid: bool,
    coupon: Option<String>,
    tags: Vec<String>,
    customer: Customer,
    lines: Vec<Line>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Customer {
    id: String,
    name: String,
    address: Address,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Address {
    street: String,
    city: String,
    zip: String,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Line {
    sku: String,
    qty: u32,
    price: f64,
    gift: bool,
    options: Vec<String>,
}

/// A deterministic Kinesis event of `n` records with `note_len` bytes of padding each.
fn kinesis_event(n: usize, note_len: usize) -> String {
    let note = "x".repeat(note_len);
    support::events::kinesis_event((0..n).map(|i| {
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
        (format!("c-{}", i % 97), order)
    }))
}

/// One item image in DynamoDB JSON, about 3 KB: every attribute type a
/// table usually holds, nested.
fn image(i: usize, version: usize) -> serde_json::Value {
    let lines: Vec<serde_json::Value> = (0..16)
        .map(|l| {
            serde_json::json!({ "M": {
                "sku": { "S": format!("sku-{:05}-{l:02}", (i * 7 + l) % 50_000) },
                "qty": { "N": format!("{}", 1 + (i + l) % 9) },
                "price": { "N": format!("{}.{:02}", 3 + l, (i + l) % 100) },
                "gift": { "BOOL": (i + l).is_multiple_of(3) },
                "options": { "SS": ["color:blue", "size:M", "wrap:none"] },
            }})
        })
        .collect();
    serde_json::json!({
        "pk": { "S": format!("order#{i:07}") },
        "sk": { "S": format!("v{version}") },
        "status": { "S": if version == 0 { "placed" } else { "paid" } },
        "amount_cents": { "N": format!("{}", (i * 37) % 100_000) },
        "paid": { "BOOL": version > 0 },
        "coupon": { "NULL": true },
        "tags": { "SS": ["priority", "web", "eu-west"] },
        "customer": { "M": {
            "id": { "S": format!("c-{}", i % 97) },
            "name": { "S": "Ada Lovelace" },
            "address": { "M": {
                "street": { "S": "12 Analytical Engine Row" },
                "city": { "S": "London" },
                "zip": { "S": "NW1 6XE" },
            }},
        }},
        "lines": { "L": lines },
    })
}

/// A deterministic DynamoDB Streams event of `n` `MODIFY` records with old
/// and new images.
fn dynamodb_event(n: usize) -> String {
    let arn = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-21T00:00:00.000";
    let records: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "eventID": format!("{i:032x}"),
                "eventName": "MODIFY",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1_763_701_200,
                    "Keys": { "pk": { "S": format!("order#{i:07}") }, "sk": { "S": "v1" } },
                    "OldImage": image(i, 0),
                    "NewImage": image(i, 1),
                    "SequenceNumber": format!("{}", 100_000_000_000_000_000_000u128 + i as u128),
                    "SizeBytes": 6000,
                    "StreamViewType": "NEW_AND_OLD_IMAGES",
                },
                "eventSourceARN": arn,
            })
        })
        .collect();
    serde_json::json!({ "Records": records }).to_string()
}

/// The floor: a SIMD validation of the bytes (every value checked and
/// skipped), nothing else.
fn floor(event: &[u8]) {
    sonic_rs::from_slice::<IgnoredAny>(event).unwrap();
}

/// The records borrowed from the event text, base64 decoded, each payload
/// parsed; nothing else (the ceiling the Kinesis processor was built on).
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
    let b64 = base64_simd::STANDARD;
    let parsed: Event<'_> = serde_json::from_str(event).unwrap();
    let mut n = 0;
    for r in &parsed.records {
        let data = b64.decode_to_vec(r.kinesis.data.as_bytes()).unwrap();
        let order: Order = serde_json::from_slice(&data).unwrap();
        n += black_box(order.amount_cents) as usize & 1;
    }
    n
}

/// The whole path: the runtime's bytes in, the response's bytes out.
async fn whole_path<H: RecordHandler, S: EventSource>(
    processor: &BatchProcessor<H, S>,
    event: &Bytes,
) -> Vec<u8> {
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let report = processor
        .process_bytes(event.clone(), Some(deadline))
        .await
        .unwrap();
    assert!(report.failures.is_empty(), "{:?}", report.failures.first());
    serde_json::to_vec(&S::response(&report)).unwrap()
}

/// The path through `LambdaEvent<Box<RawValue>>`: the runtime's pass into
/// a `RawValue`, then the processor.
async fn through_raw_value<H: RecordHandler, S: EventSource>(
    processor: &BatchProcessor<H, S>,
    event: &Bytes,
) -> Vec<u8> {
    let raw: Box<RawValue> = serde_json::from_slice(event).unwrap();
    let text: Box<str> = raw.into();
    whole_path(processor, &Bytes::from(String::from(text))).await
}

fn kinesis_processor() -> KinesisProcessor<impl RecordHandler> {
    KinesisProcessor::new(json(|order: Order, _record: StreamRecord| async move {
        black_box(order.amount_cents);
        Ok::<(), std::io::Error>(())
    }))
    .with_options(bench_options())
}

fn dynamodb_values() -> DynamoDbProcessor<impl RecordHandler> {
    DynamoDbProcessor::new(changes(
        |change: Change<serde_json::Value>, _record: StreamRecord| async move {
            black_box(&change);
            Ok::<(), std::io::Error>(())
        },
    ))
    .with_options(bench_options())
}

/// The DynamoDB handler's decoding before images were read from their
/// text: each record parsed into `aws_lambda_events`' record, then its
/// attribute values decoded by `serde_dynamo` (what `Change::from_record`
/// did then; it now reads attribute values as the text is read, so the
/// images are decoded here as they were).
fn dynamodb_before() -> DynamoDbProcessor<impl RecordHandler> {
    DynamoDbProcessor::new(|record: StreamRecord| async move {
        let parsed: EventRecord = serde_json::from_slice(&record.data)?;
        for image in [&parsed.change.old_image, &parsed.change.new_image] {
            if !image.is_empty() {
                let value: serde_json::Value = serde_dynamo::from_item(image.clone())?;
                black_box(&value);
            }
        }
        Ok::<(), shardkeeper::processing::HandlerError>(())
    })
    .with_options(bench_options())
}

fn dynamodb_typed() -> DynamoDbProcessor<impl RecordHandler> {
    DynamoDbProcessor::new(changes(
        |change: Change<Item>, _record: StreamRecord| async move {
            black_box(&change);
            Ok::<(), std::io::Error>(())
        },
    ))
    .with_options(bench_options())
}

/// The processors' options: the defaults, without handler spans when
/// `SHARDKEEPER_BENCH_SPANS=off`.
fn bench_options() -> ProcessingOptions {
    ProcessingOptions::default()
        .handler_spans(std::env::var("SHARDKEEPER_BENCH_SPANS").as_deref() != Ok("off"))
}

/// The events measured: name, text.
fn events() -> Vec<(String, String)> {
    let mut events: Vec<(String, String)> = vec![
        ("10,000 Kinesis records".into(), kinesis_event(10_000, 0)),
        (
            "1,300 Kinesis records of 3 KB".into(),
            kinesis_event(1_300, 2_900),
        ),
        (
            "1,000 DynamoDB records of 6 KB".into(),
            dynamodb_event(1_000),
        ),
    ];
    if let Ok(path) = std::env::var("SHARDKEEPER_BENCH_EVENT") {
        events.push((
            path.clone(),
            std::fs::read_to_string(&path).expect("event file"),
        ));
    }
    events
}

fn is_dynamodb(event: &str) -> bool {
    event.contains("\"aws:dynamodb\"")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// In a process of its own: the peak resident set of one processing of
/// the event in the file `path`, in KiB, printed as `rss <peak> <before>
/// <event bytes>` (`before`: the resident set with the event read, before
/// processing). The file is read as the runtime reads a body: into one
/// buffer, nothing else built.
fn measure_rss(path: &str) {
    let bytes = Bytes::from(std::fs::read(path).expect("event file"));
    let runtime = runtime();
    let (kinesis, dynamodb) = (kinesis_processor(), dynamodb_values());
    // The peak counts from here: the process with the event in memory.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak");
    let before = status_kib("VmRSS:");
    runtime.block_on(async {
        if is_dynamodb(std::str::from_utf8(&bytes).unwrap()) {
            black_box(whole_path(&dynamodb, &bytes).await);
        } else {
            black_box(whole_path(&kinesis, &bytes).await);
        }
    });
    let peak = status_kib("VmHWM:");
    println!("rss {peak} {before} {}", bytes.len());
}

/// A line of `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect(field)
}

/// The peak resident set of each event, each in a process of its own.
fn report_rss() {
    let exe = std::env::current_exe().unwrap();
    for (index, (name, event)) in events().iter().enumerate() {
        let path = std::env::temp_dir().join(format!("shardkeeper-bench-event-{index}.json"));
        std::fs::write(&path, event).unwrap();
        let out = std::process::Command::new(&exe)
            .env("SHARDKEEPER_BENCH_RSS", &path)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("rss ")).unwrap_or("");
        let parts: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|v| v.parse().ok())
            .collect();
        if let [peak_kib, before_kib, size] = parts[..] {
            let (peak, before) = (peak_kib * 1024.0, before_kib * 1024.0);
            eprintln!(
                "peak RSS, {name}: {:.1} MB for a {:.1} MB event ({:.2}x; {:.1} MB before \
                 processing, the event included: processing added {:.1} MB, {:.2}x the event)",
                peak / 1e6,
                size / 1e6,
                peak / size,
                before / 1e6,
                (peak - before) / 1e6,
                (peak - before) / size
            );
        } else {
            eprintln!("peak RSS, {name}: not measured ({})", out.status);
        }
    }
}

/// A path measured: its name, and one run of it.
type Path<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// The median of `values`.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Each path and its floor measured in turn, round after round, so that a
/// busy machine slows both alike: the medians and the median of each
/// round's ratio, as a markdown table on stderr.
fn report_ratios() {
    const ROUNDS: usize = 31;
    let runtime = runtime();
    let kinesis = kinesis_processor();
    let values = dynamodb_values();
    let typed = dynamodb_typed();
    let time = |f: &mut dyn FnMut()| {
        let start = std::time::Instant::now();
        f();
        start.elapsed().as_secs_f64() * 1e3
    };
    // The path as deployed: the Powertools-shaped lines the functions log
    // (JSON, at INFO, handler labels on); and, for comparison, tracing's
    // own JSON subscriber at INFO, under which each call has a span.
    let deployed = shardkeeper::functions::powertools_lines_to_nowhere();
    let spans = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .finish(),
    );
    eprintln!("| event | path | median | floor (SIMD validation) | serde_json validation | ratio to the floor | ratio to serde_json | deployed logs | deployed / none | JSON subscriber, spans | spans / none |");
    eprintln!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, event) in &events() {
        let bytes = Bytes::from(event.clone().into_bytes());
        let mut paths: Vec<Path<'_>> = Vec::new();
        if is_dynamodb(event) {
            paths.push((
                "Value",
                Box::new(|| {
                    black_box(runtime.block_on(whole_path(&values, &bytes)));
                }),
            ));
            paths.push((
                "typed",
                Box::new(|| {
                    black_box(runtime.block_on(whole_path(&typed, &bytes)));
                }),
            ));
        } else {
            paths.push((
                "json handler",
                Box::new(|| {
                    black_box(runtime.block_on(whole_path(&kinesis, &bytes)));
                }),
            ));
        }
        for (path, run) in &mut paths {
            let (mut floors, mut serdes, mut runs, mut ratios, mut serde_ratios) =
                (vec![], vec![], vec![], vec![], vec![]);
            let (mut logged, mut logged_ratios, mut spanned, mut spanned_ratios) =
                (vec![], vec![], vec![], vec![]);
            for _ in 0..ROUNDS {
                let f = time(&mut || floor(&bytes));
                let s = time(&mut || {
                    serde_json::from_slice::<IgnoredAny>(&bytes).unwrap();
                });
                let r = time(&mut **run);
                let d = tracing::dispatcher::with_default(&deployed, || time(&mut **run));
                let j = tracing::dispatcher::with_default(&spans, || time(&mut **run));
                floors.push(f);
                serdes.push(s);
                runs.push(r);
                ratios.push(r / f);
                serde_ratios.push(r / s);
                logged.push(d);
                logged_ratios.push(d / r);
                spanned.push(j);
                spanned_ratios.push(j / r);
            }
            eprintln!(
                "| {name} | {path} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x | {:.2}x | {:.1} ms | {:.2}x | {:.1} ms | {:.2}x |",
                median(&mut runs),
                median(&mut floors),
                median(&mut serdes),
                median(&mut ratios),
                median(&mut serde_ratios),
                median(&mut logged),
                median(&mut logged_ratios),
                median(&mut spanned),
                median(&mut spanned_ratios),
            );
        }
    }
}

fn bench(c: &mut Criterion) {
    let runtime = runtime();
    let kinesis = kinesis_processor();
    let values = dynamodb_values();
    let typed = dynamodb_typed();
    let before = dynamodb_before();
    let mut group = c.benchmark_group("processing");
    group.sample_size(20);
    for (name, event) in &events() {
        let dynamodb = is_dynamodb(event);
        let bytes = Bytes::from(event.clone().into_bytes());
        eprintln!("{name}: {} bytes", event.len());
        group.throughput(Throughput::Bytes(event.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("floor: SIMD validation", name),
            &bytes,
            |b, e| b.iter(|| floor(e)),
        );
        group.bench_with_input(
            BenchmarkId::new("serde_json validation", name),
            &bytes,
            |b, e| b.iter(|| serde_json::from_slice::<IgnoredAny>(e).unwrap()),
        );
        if dynamodb {
            group.bench_with_input(
                BenchmarkId::new("shardkeeper, Value", name),
                &bytes,
                |b, e| b.iter(|| runtime.block_on(whole_path(&values, e))),
            );
            if name.starts_with("1,000 DynamoDB") {
                group.bench_with_input(
                    BenchmarkId::new("shardkeeper, typed", name),
                    &bytes,
                    |b, e| b.iter(|| runtime.block_on(whole_path(&typed, e))),
                );
            }
            group.bench_with_input(
                BenchmarkId::new("runtime's RawValue pass + process, Value", name),
                &bytes,
                |b, e| b.iter(|| runtime.block_on(through_raw_value(&values, e))),
            );
            group.bench_with_input(
                BenchmarkId::new(
                    "before: RawValue pass + aws_lambda_events + serde_dynamo",
                    name,
                ),
                &bytes,
                |b, e| b.iter(|| runtime.block_on(through_raw_value(&before, e))),
            );
        } else {
            group.bench_with_input(BenchmarkId::new("raw borrowed", name), event, |b, e| {
                b.iter(|| raw_kinesis_borrowed(e))
            });
            group.bench_with_input(BenchmarkId::new("shardkeeper", name), &bytes, |b, e| {
                b.iter(|| runtime.block_on(whole_path(&kinesis, e)))
            });
            group.bench_with_input(
                BenchmarkId::new("runtime's RawValue pass + process", name),
                &bytes,
                |b, e| b.iter(|| runtime.block_on(through_raw_value(&kinesis, e))),
            );
        }
    }
    group.finish();
}

fn main() {
    if let Ok(path) = std::env::var("SHARDKEEPER_BENCH_RSS") {
        measure_rss(&path);
        return;
    }
    if std::env::var_os("SHARDKEEPER_BENCH_SUBSCRIBER").is_some() {
        // As a function runs on Lambda: a JSON subscriber at INFO (here
        // writing nowhere), so the spans and events the path makes are
        // enabled and paid for.
        tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(std::io::sink)
            .init();
    }
    let mut criterion = Criterion::default().configure_from_args();
    // `--no-run` builds, `--list` lists, `--profile-time` runs the paths
    // for a profiler: measure the resident set and the ratios only in a
    // real run.
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--bench")
        && !args.iter().any(|a| a == "--list" || a == "--profile-time")
    {
        report_rss();
        report_ratios();
    }
    bench(&mut criterion);
    criterion.final_summary();
}
