//! lease-rebalancer: a scheduled Lambda function. Every invocation ticks until
//! its deadline: discover shards, plan the lease balance, apply it.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_rebalance, init_scheduled, Rebalancer};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let init = init_scheduled().await?;
    let rebalancer = Rebalancer {
        store: init.store,
        kinesis: init.kinesis,
        config: init.config.rebalance.clone(),
        emit_metrics: true,
        sightings: Default::default(),
    };
    let timing = init.config.timing;
    lambda_runtime::run(service_fn(|event| {
        handle_rebalance(&rebalancer, timing, event)
    }))
    .await
}
