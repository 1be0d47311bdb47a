//! lease-rebalancer: a scheduled Lambda function. Every invocation ticks until
//! its deadline: discover shards, plan the lease balance, apply it, and
//! (with `SHARDKEEPER_WORKER_FUNCTION` set) start the shard workers the
//! fleet is missing.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_rebalance, init_scheduled, Fleet, LambdaStarter, Rebalancer};
use std::sync::Arc;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let init = init_scheduled().await?;
    let rebalancer = Rebalancer {
        store: init.store,
        kinesis: init.kinesis,
        config: init.config.rebalance.clone(),
        emit_metrics: true,
        sightings: Default::default(),
        fleet: init.config.worker_function.clone().map(|function| {
            let starter = LambdaStarter::new(&init.aws, function, init.config.store.retry);
            Fleet::new(init.config.fleet.clone(), Arc::new(starter))
        }),
    };
    let timing = init.config.timing;
    lambda_runtime::run(service_fn(|event| {
        handle_rebalance(&rebalancer, timing, event)
    }))
    .await
}
