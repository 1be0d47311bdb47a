//! lease-rebalancer: a scheduled Lambda function. Every invocation ticks until
//! its deadline: discover shards, plan the lease balance, apply it.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_rebalance, init_tracing, start_store, Rebalancer};
use shardkeeper::ScheduledConfig;

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let config = ScheduledConfig::from_env()?;
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kinesis = aws_sdk_kinesis::Client::new(&aws);
    let store = start_store(&config, aws_sdk_dynamodb::Client::new(&aws), &kinesis).await?;
    let rebalancer = Rebalancer {
        store,
        kinesis,
        config: config.rebalance.clone(),
        lease_term: config.lease_term,
        emit_metrics: true,
    };
    let timing = config.timing;
    lambda_runtime::run(service_fn(|event| {
        handle_rebalance(&rebalancer, timing, event)
    }))
    .await
}
