//! The ready-to-deploy processing functions, on the in-process servers, fed
//! the example events from `events/`.

use crate::support::common::{ctx, lambda_context};
use aws_sdk_dynamodb::types::AttributeValue;
use kinesis_processor::{OrderWriter, Settings};
use lambda_runtime::{LambdaEvent, Service};
use serde_json::value::RawValue;
use shardkeeper::lambda::KinesisWindowProcessor;
use shardkeeper::processing::StreamRecord;
use shardkeeper_local::unique_name;
use std::time::Duration;
use stream_processor::Projector;

fn event(name: &str) -> Box<RawValue> {
    let text =
        std::fs::read_to_string(format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    RawValue::from_string(text).unwrap()
}

async fn orders_table(ctx: &crate::support::common::Ctx) -> String {
    let table = unique_name("orders");
    ctx.aws
        .dynamodb
        .create_table()
        .table_name(&table)
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("order_id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("order_id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    table
}

/// The projected status of one order.
async fn status(ctx: &crate::support::common::Ctx, table: &str, order_id: &str) -> String {
    let item = ctx
        .aws
        .dynamodb
        .get_item()
        .table_name(table)
        .key("order_id", AttributeValue::S(order_id.into()))
        .send()
        .await
        .unwrap()
        .item
        .expect("projected item");
    item["status"].as_s().expect("a string status").clone()
}

async fn count(ctx: &crate::support::common::Ctx, table: &str) -> usize {
    ctx.aws
        .dynamodb
        .scan()
        .table_name(table)
        .send()
        .await
        .unwrap()
        .items()
        .len()
}

#[tokio::test]
async fn kinesis_processor_writes_each_order_once() {
    let ctx = ctx().await;
    let table = orders_table(&ctx).await;
    let settings = Settings {
        orders_table: table.clone(),
        max_attempts: 3,
        dead_letter_stream: None,
    };
    let writer = OrderWriter {
        dynamodb: ctx.aws.dynamodb.clone(),
        table: table.clone(),
    };
    let mut function = kinesis_processor::processor(
        writer,
        ctx.store("orders"),
        ctx.aws.kinesis.clone(),
        &settings,
    );
    for _ in 0..2 {
        let response = function
            .call(LambdaEvent::new(
                event("kinesis-batch.json"),
                lambda_context(Duration::from_secs(60)),
            ))
            .await
            .unwrap();
        assert!(response.batch_item_failures.is_empty());
    }
    assert_eq!(count(&ctx, &table).await, 3);

    // The aggregated fixture holds the same three orders: written once, still three.
    let store = ctx.store("orders-kpl");
    let writer = OrderWriter {
        dynamodb: ctx.aws.dynamodb.clone(),
        table: table.clone(),
    };
    let mut function =
        kinesis_processor::processor(writer, store, ctx.aws.kinesis.clone(), &settings);
    let response = function
        .call(LambdaEvent::new(
            event("kinesis-kpl.json"),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(count(&ctx, &table).await, 3);

    // The malformed fixture: the first good record is written, the batch stops at the bad one.
    let writer = OrderWriter {
        dynamodb: ctx.aws.dynamodb.clone(),
        table: table.clone(),
    };
    let mut function = kinesis_processor::processor(
        writer,
        ctx.store("orders-bad"),
        ctx.aws.kinesis.clone(),
        &settings,
    );
    let response = function
        .call(LambdaEvent::new(
            event("kinesis-malformed.json"),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    let failed: Vec<_> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap())
        .collect();
    assert_eq!(
        failed,
        vec!["49590338271490256608559692540925702759324208523137515618".to_owned()]
    );
}

#[tokio::test]
async fn stream_processor_projection_never_goes_back() {
    let ctx = ctx().await;
    // The projection table is keyed by order_id, like the orders table.
    let projection = orders_table(&ctx).await;
    let projector = Projector {
        dynamodb: ctx.aws.dynamodb.clone(),
        table: projection.clone(),
    };
    let mut function = stream_processor::processor(projector.clone(), ctx.store("orders-stream"));
    let response = function
        .call(LambdaEvent::new(
            event("dynamodb-stream.json"),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(status(&ctx, &projection, "o-1001").await, "deleted");
    // An old change delivered late (another group, no de-duplication) does not regress it.
    let text = std::fs::read_to_string(format!(
        "{}/events/dynamodb-stream.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    old["Records"].as_array_mut().unwrap().truncate(1);
    let late = stream_processor::processor(projector, ctx.store("late"));
    let report = late.process(&old.to_string(), None).await.unwrap();
    assert_eq!(report.processed, 1);
    assert_eq!(status(&ctx, &projection, "o-1001").await, "deleted");
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
