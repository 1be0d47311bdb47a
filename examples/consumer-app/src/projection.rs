//! A per-key projection of an orders table, kept from its DynamoDB stream.
//! Each write is conditional on the stream sequence number, so the
//! projection never goes back in time and re-delivered changes are
//! harmless.

use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::processing::{changes, Change, RecordHandler, StreamRecord};
use shardkeeper::state::SequenceNumber;

/// An order item in the source table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Order {
    /// The key.
    pub order_id: String,
    /// Its status.
    pub status: String,
    /// The amount in cents.
    pub amount_cents: u64,
}

/// Writes the projection table (key `order_id`).
#[derive(Debug, Clone)]
pub struct Projector {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// The projection table.
    pub table: String,
}

impl Projector {
    /// Applies one change: an insert or modify sets the projected item, a
    /// remove marks it deleted; only if the change is newer than what the
    /// projection holds (by stream sequence number).
    pub async fn apply(
        &self,
        change: Change<Order>,
        record: StreamRecord,
    ) -> Result<(), shardkeeper::processing::HandlerError> {
        let seq = SequenceNumber::new(&record.sequence_number)?.sortable();
        let (order_id, status, amount) = match change {
            Change::Insert { new } | Change::Modify { new, .. } => {
                (new.order_id, new.status, new.amount_cents)
            }
            Change::Remove {
                old: Some(old),
                expired,
                ..
            } => {
                let status = if expired { "expired" } else { "deleted" };
                (old.order_id, status.to_owned(), old.amount_cents)
            }
            Change::Remove { old: None, .. } => {
                return Err("REMOVE without an old image: use NEW_AND_OLD_IMAGES".into())
            }
        };
        let result = self
            .dynamodb
            .put_item()
            .table_name(&self.table)
            .item("order_id", AttributeValue::S(order_id))
            .item("status", AttributeValue::S(status))
            .item("amount_cents", AttributeValue::N(amount.to_string()))
            .item("seq", AttributeValue::S(seq.clone()))
            .condition_expression("attribute_not_exists(seq) OR seq < :seq")
            .expression_attribute_values(":seq", AttributeValue::S(seq))
            .send()
            .await;
        match result.map_err(aws_sdk_dynamodb::Error::from) {
            Ok(_) | Err(aws_sdk_dynamodb::Error::ConditionalCheckFailedException(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// The record handler: each record is a typed [`Change`] of an [`Order`]
/// item, applied by `projector`.
pub fn handler(projector: Projector) -> impl RecordHandler {
    changes(move |change: Change<Order>, record: StreamRecord| {
        let projector = projector.clone();
        async move { projector.apply(change, record).await }
    })
}
