//! stream-processor: the Lambda binary. Configuration: `PROJECTION_TABLE`,
//! `SHARDKEEPER_TABLE` (default `shardkeeper-state`), `SHARDKEEPER_GROUP`,
//! `SHARDKEEPER_STREAM` (a name for the source table's stream).

use lambda_runtime::Error;
use shardkeeper::config::{optional_var, required_var};
use shardkeeper::functions::init_tracing;
use shardkeeper::state::{StateStore, StoreConfig};
use stream_processor::{processor, Projector};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let projection = required_var("PROJECTION_TABLE")?;
    let group = required_var("SHARDKEEPER_GROUP")?;
    let stream = required_var("SHARDKEEPER_STREAM")?;
    let table =
        optional_var("SHARDKEEPER_TABLE")?.unwrap_or_else(|| "shardkeeper-state".to_owned());
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let store = StateStore::new(
        dynamodb.clone(),
        StoreConfig::new(&group, &stream)?.table(&table)?,
    );
    store.stream_state().await?;
    let processor = processor(
        Projector {
            dynamodb,
            table: projection,
        },
        store,
    );
    lambda_runtime::run(processor).await
}
