//! heartbeat-reaper: a scheduled Lambda function. Every invocation ticks until
//! its deadline: remove dead consumers with their leases and EFO locks,
//! deregister idle EFO consumers, remove state of shards past retention.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_reap, init_tracing, Reaper};
use shardkeeper::state::{kinesis_stream_created, StartOptions, StateStore, TableOptions};
use shardkeeper::ScheduledConfig;

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = ScheduledConfig::from_env()?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&aws);
    let store = StateStore::new(aws_sdk_dynamodb::Client::new(&aws), config.store.clone());
    // Warms both connections and checks the table and the stream once, at init.
    let created =
        kinesis_stream_created(&kinesis, config.store.stream.as_str(), &config.store.retry).await?;
    store
        .start(&StartOptions {
            table: TableOptions::default(),
            stream_created: created,
        })
        .await?;
    let reaper = Reaper {
        store,
        kinesis,
        config: config.reap.clone(),
        emit_metrics: true,
    };
    let timing = config.timing;
    lambda_runtime::run(service_fn(|event| handle_reap(&reaper, timing, event))).await
}
