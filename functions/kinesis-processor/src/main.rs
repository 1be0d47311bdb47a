//! kinesis-processor: the Lambda binary. Configuration: `ORDERS_TABLE`,
//! `SHARDKEEPER_TABLE` (default `shardkeeper-state`), `SHARDKEEPER_GROUP`,
//! `SHARDKEEPER_STREAM`, `SHARDKEEPER_MAX_ATTEMPTS` (default 3),
//! `SHARDKEEPER_DEAD_LETTER_STREAM` (optional; a stream name or ARN).

use kinesis_processor::{processor, OrderWriter, Settings};
use lambda_runtime::Error;
use shardkeeper::config::{optional_var, required_var, store_config_from_env};
use shardkeeper::functions::init_tracing;
use shardkeeper::state::{StateStore, StreamAddress};

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let orders_table = required_var("ORDERS_TABLE")?;
    let store_config = store_config_from_env()?;
    let max_attempts = match optional_var("SHARDKEEPER_MAX_ATTEMPTS")? {
        Some(v) => v
            .parse()
            .map_err(|_| format!("SHARDKEEPER_MAX_ATTEMPTS={v:?} is not a whole number"))?,
        None => 3,
    };
    let settings = Settings {
        orders_table,
        max_attempts,
        dead_letter_stream: optional_var("SHARDKEEPER_DEAD_LETTER_STREAM")?
            .map(|s| StreamAddress::parse(&s))
            .transpose()
            .map_err(|e| format!("SHARDKEEPER_DEAD_LETTER_STREAM: {e}"))?,
    };
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&aws);
    let store = StateStore::new(dynamodb.clone(), store_config);
    // Warm the connection once, at init.
    store.stream_item().state().await?;
    let writer = OrderWriter {
        dynamodb,
        table: settings.orders_table.clone(),
    };
    let processor = processor(writer, store, aws_sdk_kinesis::Client::new(&aws), &settings);
    // Each event is read once, from the bytes the runtime receives.
    Ok(processor.run().await?)
}
