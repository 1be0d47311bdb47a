//! The application's handlers under the processors, as its functions build
//! them, on DynamoDB- and Kinesis-compatible servers (in-process unless
//! `SHARDKEEPER_TEST_DYNAMODB_ENDPOINT` / `SHARDKEEPER_TEST_KINESIS_ENDPOINT`
//! name others), fed the events in `events/`.

use aws_sdk_dynamodb::types::AttributeValue;
use consumer_app::orders::{self, OrderWriter};
use consumer_app::projection::{self, Projector};
use lambda_runtime::LambdaEvent;
use serde_json::value::RawValue;
use shardkeeper::config::PARKED_IN_TABLE_FOR;
use shardkeeper::processing::{Parking, ProcessingOptions, RecordHandler};
use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper::{DynamoDbProcessor, KinesisProcessor};
use shardkeeper_local::{create_keyed_table, test_clients, unique_name, AwsClients};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn event(name: &str) -> Box<RawValue> {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    RawValue::from_string(std::fs::read_to_string(path).unwrap()).unwrap()
}

fn context() -> lambda_runtime::Context {
    let mut context = lambda_runtime::Context::default();
    let deadline = SystemTime::now() + Duration::from_secs(60);
    context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    context
}

/// A table keyed by the string `order_id`, as both of the app's tables are.
async fn keyed_table(aws: &AwsClients, prefix: &str) -> String {
    let table = unique_name(prefix);
    create_keyed_table(&aws.dynamodb, &table, "order_id", false)
        .await
        .unwrap();
    table
}

/// A store of a fresh group in a fresh state table.
async fn store(aws: &AwsClients, stream: &str) -> StateStore {
    let config = StoreConfig::new(&unique_name("g"), stream)
        .unwrap()
        .table(&unique_name("state"))
        .unwrap();
    let store = StateStore::new(aws.dynamodb.clone(), config);
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    store
}

/// The `orders` function as `KinesisProcessor::from_env` builds it with no
/// dead-letter stream: three attempts, parking in the state table.
fn orders_function(writer: OrderWriter, store: StateStore) -> KinesisProcessor<impl RecordHandler> {
    KinesisProcessor::new(orders::handler(writer))
        .with_store(store)
        .with_options(
            ProcessingOptions::default()
                .max_attempts(3)
                .parking(Parking::StateTable {
                    ttl: PARKED_IN_TABLE_FOR,
                }),
        )
}

async fn count(aws: &AwsClients, table: &str) -> usize {
    let scan = aws.dynamodb.scan().table_name(table).send().await.unwrap();
    scan.items().len()
}

#[tokio::test]
async fn orders_are_written_once_and_a_bad_record_stops_the_batch() {
    let aws = test_clients().await.unwrap();
    let table = keyed_table(&aws, "orders").await;
    let writer = || OrderWriter {
        dynamodb: aws.dynamodb.clone(),
        table: table.clone(),
    };
    // The same batch twice, as Lambda's retry of it would deliver it.
    let function = orders_function(writer(), store(&aws, "orders").await);
    for _ in 0..2 {
        let response = function
            .handle(LambdaEvent::new(event("kinesis-batch.json"), context()))
            .await
            .unwrap();
        assert!(response.batch_item_failures.is_empty());
    }
    assert_eq!(count(&aws, &table).await, 3);

    // A record that is no order: the batch stops there and reports it, so
    // Lambda retries from it (ReportBatchItemFailures).
    let function = orders_function(writer(), store(&aws, "orders").await);
    let response = function
        .handle(LambdaEvent::new(event("kinesis-malformed.json"), context()))
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
async fn the_projection_never_goes_back() {
    let aws = test_clients().await.unwrap();
    let table = keyed_table(&aws, "projection").await;
    let projector = Projector {
        dynamodb: aws.dynamodb.clone(),
        table: table.clone(),
    };
    let function = DynamoDbProcessor::new(projection::handler(projector.clone()))
        .with_store(store(&aws, "orders-stream").await);
    let response = function
        .handle(LambdaEvent::new(event("dynamodb-stream.json"), context()))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    assert_eq!(status(&aws, &table, "o-1001").await, "deleted");

    // An old change delivered late (another group, no de-duplication) does
    // not take the projection back.
    let mut old: serde_json::Value =
        serde_json::from_str(event("dynamodb-stream.json").get()).unwrap();
    old["Records"].as_array_mut().unwrap().truncate(1);
    let late = DynamoDbProcessor::new(projection::handler(projector))
        .with_store(store(&aws, "late").await);
    let report = late.process(&old.to_string(), None).await.unwrap();
    assert_eq!(report.processed, 1);
    assert_eq!(status(&aws, &table, "o-1001").await, "deleted");
}

async fn status(aws: &AwsClients, table: &str, order_id: &str) -> String {
    let item = aws
        .dynamodb
        .get_item()
        .table_name(table)
        .key("order_id", AttributeValue::S(order_id.into()))
        .send()
        .await
        .unwrap()
        .item
        .expect("projected item");
    item["status"].as_s().unwrap().clone()
}
