//! heartbeat-reaper: a scheduled Lambda function. Every invocation ticks until
//! its deadline: remove dead consumers with their leases and EFO locks,
//! deregister idle EFO consumers, remove state of shards past retention.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_reap, init_tracing, start_store, Reaper};
use shardkeeper::ScheduledConfig;

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = ScheduledConfig::from_env()?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&aws);
    let store = start_store(&config, aws_sdk_dynamodb::Client::new(&aws), &kinesis).await?;
    let reaper = Reaper {
        store,
        kinesis,
        config: config.reap.clone(),
        emit_metrics: true,
    };
    let timing = config.timing;
    lambda_runtime::run(service_fn(|event| handle_reap(&reaper, timing, event))).await
}
