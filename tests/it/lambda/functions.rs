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
