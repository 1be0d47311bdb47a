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
