//! heartbeat-reaper: a scheduled Lambda function. Every invocation ticks until
//! its deadline: remove dead consumers with their leases and EFO locks,
//! deregister idle EFO consumers, remove state of shards past retention.

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{handle_reap, init_scheduled, Reaper};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let init = init_scheduled().await?;
    let reaper = Reaper {
        store: init.store,
        kinesis: init.kinesis,
        config: init.config.reap.clone(),
        emit_metrics: true,
        sightings: Default::default(),
    };
    let timing = init.config.timing;
    lambda_runtime::run(service_fn(|event| handle_reap(&reaper, timing, event))).await
}
