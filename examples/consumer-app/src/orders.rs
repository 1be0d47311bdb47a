//! Typed order events from a Kinesis stream, each written to an orders
//! table once (an idempotent conditional write). The `orders` function runs
//! this handler under shardkeeper's batch processor, which adds ordering,
//! de-duplication of retried batches, attempts and parking.

use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::processing::{json, RecordHandler, StreamRecord};

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

/// The record handler: each record's data is an [`Order`] in JSON (a
/// record that is not one fails), written by `writer`.
pub fn handler(writer: OrderWriter) -> impl RecordHandler {
    json(move |order: Order, record: StreamRecord| {
        let writer = writer.clone();
        async move { writer.write(order, record).await }
    })
}
