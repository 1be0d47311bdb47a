//! heartbeat-reaper: a scheduled Lambda function. Every invocation ticks until
//! its deadline: remove dead consumers with their leases and EFO locks,
//! deregister idle EFO consumers, remove state of shards past retention.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    Ok(shardkeeper::functions::run_reaper().await?)
}
