//! orders: a Kinesis event-source-mapped function writing each order once.
//! Configuration: `ORDERS_TABLE`, and shardkeeper's processor variables
//! (`SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM`,
//! `SHARDKEEPER_MAX_ATTEMPTS`, `SHARDKEEPER_DEAD_LETTER_STREAM`).

use consumer_app::orders::{handler, OrderWriter};
use shardkeeper::config::required_var;
use shardkeeper::KinesisProcessor;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let writer = OrderWriter {
        dynamodb: aws_sdk_dynamodb::Client::new(&aws),
        table: required_var("ORDERS_TABLE")?,
    };
    // Each event is read once, from the bytes the runtime receives.
    KinesisProcessor::from_env(handler(writer), &aws)
        .await?
        .run()
        .await?;
    Ok(())
}
