//! kinesis-processor: typed order events from a Kinesis stream, each written
//! to an orders table once (an idempotent conditional write), with the
//! shardkeeper batch processor's ordering, de-duplication, retries and parking.

#![warn(missing_docs, rust_2018_idioms, nonstandard_style)]

use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::lambda::KinesisProcessor;
use shardkeeper::processing::{json, Parking, ProcessingOptions, RecordHandler, StreamRecord};
use shardkeeper::state::{StateStore, StreamAddress};
use std::time::Duration;

/// An order event as producers write it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Order {
    /// The order id (the table's key).
    pub order_id: String,
    /// The customer.
    pub customer: String,
    /// The amount in cents.
    pub amount_cents: u64,
    /// ISO currency code.
    pub currency: String,
}

/// Writes orders to the orders table, each at most once.
#[derive(Debug, Clone)]
pub struct OrderWriter {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// The orders table (key `order_id`, a string).
    pub table: String,
}

impl OrderWriter {
    /// Stores the order unless it is stored already (a re-delivered record
    /// is a success, not a duplicate).
    pub async fn write(
        &self,
        order: Order,
        record: StreamRecord,
    ) -> Result<(), aws_sdk_dynamodb::Error> {
        let result = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .item("order_id", AttributeValue::S(order.order_id.clone()))
            .item("customer", AttributeValue::S(order.customer))
            .item(
                "amount_cents",
                AttributeValue::N(order.amount_cents.to_string()),
            )
            .item("currency", AttributeValue::S(order.currency))
            .item(
                "sequence_number",
                AttributeValue::S(record.sequence_number.to_string()),
            )
            .condition_expression("attribute_not_exists(order_id)")
            .send()
            .await;
        match result.map_err(aws_sdk_dynamodb::Error::from) {
            Ok(_) | Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Settings read from the environment by the binary.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The orders table.
    pub orders_table: String,
    /// Failed attempts before a record is parked.
    pub max_attempts: u32,
    /// A dead-letter stream for parked records (else they go to the state table).
    pub dead_letter_stream: Option<StreamAddress>,
}

/// The processor: typed orders, de-duplicated through `store`.
pub fn processor(
    writer: OrderWriter,
    store: StateStore,
    kinesis: aws_sdk_kinesis::Client,
    settings: &Settings,
) -> KinesisProcessor<impl RecordHandler> {
    let parking = match &settings.dead_letter_stream {
        Some(stream) => Parking::DeadLetterStream {
            client: kinesis,
            stream: stream.clone(),
        },
        None => Parking::StateTable {
            ttl: Duration::from_secs(14 * 24 * 3600),
        },
    };
    let handler = json(move |order: Order, record: StreamRecord| {
        let writer = writer.clone();
        async move { writer.write(order, record).await }
    });
    KinesisProcessor::new(handler)
        .with_store(store)
        .with_options(ProcessingOptions {
            max_attempts: settings.max_attempts,
            parking,
            ..ProcessingOptions::default()
        })
}
