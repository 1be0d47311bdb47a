//! stream-processor: the Lambda binary. Configuration: `PROJECTION_TABLE`,
//! `SHARDKEEPER_TABLE` (default `shardkeeper-state`), `SHARDKEEPER_GROUP`,
//! `SHARDKEEPER_STREAM` (a name for the source table's stream).

use lambda_runtime::Error;
use shardkeeper::config::{required_var, store_config_from_env};
use shardkeeper::functions::init_tracing;
use shardkeeper::state::StateStore;
use stream_processor::{processor, Projector};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let projection = required_var("PROJECTION_TABLE")?;
    let store_config = store_config_from_env()?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let store = StateStore::new(dynamodb.clone(), store_config);
    // Warm the connection once, at init.
    store.stream_item().state().await?;
    let processor = processor(
        Projector {
            dynamodb,
            table: projection,
        },
        store,
    );
    // Each event is read once, from the bytes the runtime receives.
    Ok(processor.run().await?)
}
