//! The code of README.md's examples, compiled with the tests; a test
//! (`system::readme`) checks that every Rust block of the README stands here
//! verbatim. Not meant to be run: `cargo run --example readme` only says so.

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use shardkeeper::ddb_streams::{ReaderConfig, StreamReader};
use shardkeeper::functions::WorkerFunction;
use shardkeeper::idempotency::{idempotent, Claim, IdempotencyTable};
use shardkeeper::processing::{
    changes, json, stage_effect, Change, HandlerError, ProcessingOptions, RecordHandler,
    StreamRecord,
};
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, ShardId, StartOptions, StoreConfig,
};
use shardkeeper::{KinesisProcessor, StateStore};
use std::time::Duration;

#[derive(Debug, serde::Deserialize)]
struct Order {
    #[allow(dead_code)]
    order_id: String,
}

async fn save(order: Order) -> Result<(), std::io::Error> {
    println!("{order:?}");
    Ok(())
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn event_source_mapping(store: StateStore) -> Result<(), shardkeeper::Error> {
    let processor = KinesisProcessor::new(json(|order: Order, _record: StreamRecord| async move {
        save(order).await // an error fails this record; the batch stops here and reports it
    }))
    .with_store(store); // skip what a retried batch already did, count attempts, park poison records
    processor.run().await // the Lambda runtime loop; each event read once, from its bytes
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn keys_at_once(store: StateStore, handler: impl RecordHandler) -> Result<(), shardkeeper::Error> {
    let processor = KinesisProcessor::new(handler)
        .with_store(store)
        .with_options(ProcessingOptions::default().concurrency(64)); // at most 64 calls in flight
    processor.run().await
}

#[allow(dead_code, clippy::let_and_return)]
#[rustfmt::skip]
fn effects() -> impl RecordHandler {
    #[derive(serde::Deserialize)]
    struct Order { customer: String }
    let handler = json(|order: Order, _record: StreamRecord| async move {
        let count = Update::builder()
            .table_name("order-counts")
            .key("customer", AttributeValue::S(order.customer))
            .update_expression("ADD orders :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .build()?;
        stage_effect(TransactWriteItem::builder().update(count).build())?; // written with the progress, or not at all
        Ok::<(), HandlerError>(())
    });
    handler
}

#[derive(serde::Deserialize)]
struct Payment {
    payment_id: String,
    cents: u64,
}

async fn charge(payment: &Payment) -> Result<(), std::io::Error> {
    println!("{} {}", payment.payment_id, payment.cents);
    Ok(())
}

#[allow(dead_code, clippy::let_and_return)]
#[rustfmt::skip]
fn idempotency(store: StateStore) -> impl RecordHandler {
    let handler = idempotent(
        IdempotencyTable::in_state(&store),
        |record: &StreamRecord| record.json::<Payment>().ok().map(|p| p.payment_id), // the idempotency key
        |record: StreamRecord| async move {
            let payment: Payment = record.json()?;
            charge(&payment).await?; // once per payment_id within the hour, whatever the producer sent twice
            Ok::<u64, HandlerError>(payment.cents) // stored; a repeat hands it to on_repeat
        },
    )
    .claim(Claim::AtCompletion) // one write and one read a record; Claim::BeforeRun (the default) claims first
    .validate(|record: &StreamRecord| record.data.to_vec()); // a key reused for another payload is an error
    handler
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn processor_from_the_environment(handler: impl RecordHandler) -> Result<(), lambda_runtime::Error> {
    let aws = aws_config::load_defaults(BehaviorVersion::latest()).await;
    KinesisProcessor::from_env(handler, &aws).await?.run().await?; // DynamoDbProcessor::from_env likewise
    Ok(())
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn worker_from_the_environment(handler: impl RecordHandler + Clone) -> Result<(), lambda_runtime::Error> {
    WorkerFunction::from_env(|| handler.clone()).await?.run().await?;
    Ok(())
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn dynamodb_stream_reader(
    streams_client: aws_sdk_dynamodbstreams::Client,
    store: StateStore,
    stream_arn: String,
) -> Result<(), shardkeeper::Error> {
    let handler = changes(|change: Change<Order>, _record: StreamRecord| async move {
        match change {
            Change::Insert { new } | Change::Modify { new, .. } => save(new).await,
            Change::Remove { .. } => Ok(()),
        }
    });
    let mut reader = StreamReader::new(streams_client, store, &stream_arn, ReaderConfig::default());
    loop {
        reader.poll(&handler).await?; // the same handler a DynamoDbProcessor runs
    }
}

#[allow(dead_code)]
#[rustfmt::skip]
async fn state_store_alone(
    dynamodb_client: aws_sdk_dynamodb::Client,
    stream_created: i64,
    me: ConsumerId,
    shard: ShardId,
    record: aws_sdk_kinesis::types::Record,
) -> shardkeeper::state::Result<()> {
    let store = StateStore::new(dynamodb_client, StoreConfig::new("billing", "orders")?);
    store.start(&StartOptions::new(stream_created)).await?;
    store.consumers().heartbeat(&ConsumerInfo::for_this_process(me.clone(), store.now())).await?;
    let lease = store.leases().acquire(&shard, &me, Duration::from_secs(30)).await?.expect("free shard");
    store.checkpoints().save(&lease, &Checkpoint::after(record.sequence_number())?, None).await?; // Err(LeaseLost) once taken
    Ok(())
}

fn main() {
    println!("README.md's examples; they compile, and are not meant to run.");
}
