//! The example events from `events/` through the processors. (The example
//! application's handlers are tested in `examples/consumer-app/tests`.)

use crate::support::common::lambda_context;
use lambda_runtime::LambdaEvent;
use serde_json::value::RawValue;
use shardkeeper::lambda::KinesisWindowProcessor;
use shardkeeper::processing::StreamRecord;
use std::time::Duration;

fn event(name: &str) -> Box<RawValue> {
    let text =
        std::fs::read_to_string(format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    RawValue::from_string(text).unwrap()
}

#[tokio::test]
async fn the_window_fixture_aggregates() {
    let processor = KinesisWindowProcessor::new(
        |total: &mut u64, record: StreamRecord| -> Result<(), String> {
            let v: serde_json::Value =
                serde_json::from_slice(&record.data).map_err(|e| e.to_string())?;
            *total += v["amount_cents"].as_u64().ok_or("no amount")?;
            Ok(())
        },
        |_total: u64, _window| async { Ok(()) },
    );
    let response = processor
        .handle(LambdaEvent::new(
            event("kinesis-window.json"),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert_eq!(
        response.time_window_event_response_properties.state["shardkeeper"],
        "6049"
    );
}

/// A handler reads the invocation it runs in: request id, function,
/// deadline (`RecordContext::current`), through the processor's Lambda
/// handler, and nothing outside an invocation.
#[tokio::test]
async fn a_handler_reads_the_invocation_it_runs_in() {
    use shardkeeper::processing::RecordContext;
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<Option<RecordContext>>>> = Arc::default();
    let sink = seen.clone();
    let processor = shardkeeper::KinesisProcessor::new(move |_record: StreamRecord| {
        let sink = sink.clone();
        async move {
            sink.lock().unwrap().push(RecordContext::current());
            Ok::<(), std::io::Error>(())
        }
    });
    let mut context = lambda_context(Duration::from_secs(60));
    context.request_id = "req-7".to_owned();
    context.invoked_function_arn =
        "arn:aws:lambda:us-east-1:123456789012:function:orders:live".to_owned();
    processor
        .handle(LambdaEvent::new(event("kinesis-batch.json"), context))
        .await
        .unwrap();
    let inside = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(inside.len(), 3);
    for context in &inside {
        let context = context.as_ref().expect("a context inside the invocation");
        assert_eq!(&*context.request_id, "req-7");
        assert!(context.function_arn.ends_with(":function:orders:live"));
        assert!(context.deadline.is_some());
    }
    // Without a Lambda context (process), there is none.
    let text = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    processor.process(&text, None).await.unwrap();
    assert!(seen.lock().unwrap().iter().all(Option::is_none));
}

/// A handler's own metrics are kept for its invocation's EMF document
/// through the processor's Lambda handler (`add_metric` says it kept
/// them; the document's shape is the unit test's,
/// `processing::handler_metrics`), and nowhere without one.
#[tokio::test]
async fn a_handlers_metrics_are_kept_for_its_invocation() {
    use shardkeeper::processing::add_metric;
    use std::sync::{Arc, Mutex};
    let kept: Arc<Mutex<Vec<bool>>> = Arc::default();
    let sink = kept.clone();
    let processor = shardkeeper::KinesisProcessor::new(move |_record: StreamRecord| {
        let sink = sink.clone();
        async move {
            sink.lock()
                .unwrap()
                .push(add_metric("OrdersWritten", 1.0, "Count"));
            Ok::<(), std::io::Error>(())
        }
    });
    processor
        .handle(LambdaEvent::new(
            event("kinesis-batch.json"),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert_eq!(std::mem::take(&mut *kept.lock().unwrap()), vec![true; 3]);
    let text = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    processor.process(&text, None).await.unwrap();
    assert_eq!(
        *kept.lock().unwrap(),
        vec![false; 3],
        "no invocation, nothing kept"
    );
}

/// The configuration of an event-source-mapped processor on `table`, with
/// a short retry budget.
fn processor_config(table: &str) -> shardkeeper::config::ProcessorConfig {
    let table = table.to_owned();
    let mut config = shardkeeper::config::ProcessorConfig::from_lookup(|k| match k {
        "SHARDKEEPER_TABLE" => Some(table.clone()),
        "SHARDKEEPER_GROUP" => Some("orders-esm".to_owned()),
        "SHARDKEEPER_STREAM" => Some("orders".to_owned()),
        _ => None,
    })
    .unwrap();
    config.store = config.store.retry(
        shardkeeper::state::RetryPolicy::default()
            .max_attempts(2)
            .max_delay(Duration::from_millis(50)),
    );
    config
}

/// The SDK configuration of a function whose DynamoDB calls go to `url`.
async fn sdk_config(url: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "test",
        ))
        .load()
        .await
}

/// A cold start while the state table answers nothing but internal errors
/// starts the processor (before, init failed, and so did every invocation
/// of every environment started during the incident): its batches run,
/// without de-duplication, and say so. A table that does not exist still
/// fails init: that is a configuration to fix, not an outage to ride out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_in_a_state_table_outage_processes_without_de_duplication() {
    use shardkeeper_local::{AwsService, FaultProxy, Faults};
    let ctx = crate::support::common::ctx().await;
    let endpoint = ctx
        .aws
        .endpoints
        .dynamodb
        .clone()
        .expect("a DynamoDB endpoint");
    let proxy = FaultProxy::start_seeded(
        AwsService::DynamoDb,
        &endpoint,
        Faults {
            server_error: 1.0,
            ..Faults::none()
        },
        3,
    )
    .await
    .unwrap();
    let aws = sdk_config(proxy.url()).await;
    let handler = |_: StreamRecord| async { Ok::<(), std::io::Error>(()) };
    let processor =
        shardkeeper::KinesisProcessor::from_config(handler, &aws, processor_config(&ctx.table))
            .await
            .expect("init rides out the outage");
    let text = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let report = processor.process(&text, None).await.unwrap();
    assert_eq!(
        (report.processed, report.failures.len()),
        (3, 0),
        "{report:?}"
    );
    assert!(report.deduplication_off);

    let direct = sdk_config(&endpoint).await;
    let missing = shardkeeper::KinesisProcessor::from_config(
        handler,
        &direct,
        processor_config("no-such-table"),
    )
    .await;
    assert!(missing.is_err(), "a missing table fails init");
}

/// A state table that answers reads only after 5 s, under an invocation
/// with 4 s left: the reads before the first record are given up after a
/// quarter of the time to the stop-by instant, and the batch runs without
/// de-duplication (before, the floor read and the progress read took the
/// store's whole budget, and every record was reported as not attempted
/// for the deadline; with a 30 to 60 s timeout, Lambda killed the
/// invocation before record 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_state_table_costs_de_duplication_not_the_batch() {
    use shardkeeper::state::StateStore;
    use shardkeeper_local::{AwsService, FaultProxy, Faults, SlowRequests};
    let ctx = crate::support::common::ctx().await;
    let endpoint = ctx
        .aws
        .endpoints
        .dynamodb
        .clone()
        .expect("a DynamoDB endpoint");
    let slow = Duration::from_secs(5);
    let proxy = FaultProxy::start_seeded(
        AwsService::DynamoDb,
        &endpoint,
        Faults {
            slow: Some(SlowRequests {
                operation: "GetItem".into(),
                body_contains: Vec::new(),
                latency: slow..=slow,
            }),
            ..Faults::none()
        },
        4,
    )
    .await
    .unwrap();
    let aws = sdk_config(proxy.url()).await;
    let store = StateStore::new(
        aws_sdk_dynamodb::Client::new(&aws),
        processor_config(&ctx.table).store,
    );
    let processor = shardkeeper::KinesisProcessor::new(|_: StreamRecord| async {
        Ok::<(), std::io::Error>(())
    })
    .with_store(store);
    let text = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let deadline = std::time::SystemTime::now() + Duration::from_secs(4);
    let report = processor.process(&text, Some(deadline)).await.unwrap();
    assert_eq!(
        (report.processed, report.failures.len()),
        (3, 0),
        "{report:?}"
    );
    assert!(
        report.deduplication_off && report.state_errors >= 1,
        "{report:?}"
    );
}
