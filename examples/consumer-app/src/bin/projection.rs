//! projection: a DynamoDB Streams event-source-mapped function keeping a
//! per-key projection of the orders table. Configuration:
//! `PROJECTION_TABLE`, and shardkeeper's processor variables
//! (`SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM`: a name
//! for the source table's stream).

use consumer_app::projection::{handler, Projector};
use shardkeeper::config::required_var;
use shardkeeper::DynamoDbProcessor;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let projector = Projector {
        dynamodb: aws_sdk_dynamodb::Client::new(&aws),
        table: required_var("PROJECTION_TABLE")?,
    };
    DynamoDbProcessor::from_env(handler(projector), &aws)
        .await?
        .run()
        .await?;
    Ok(())
}
