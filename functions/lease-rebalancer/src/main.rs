//! lease-rebalancer: a scheduled Lambda function. Every invocation ticks until
//! its deadline: discover shards, plan the lease balance, apply it, and
//! (with `SHARDKEEPER_WORKER_FUNCTION` set) start the shard workers the
//! fleet is missing.

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    Ok(shardkeeper::functions::run_rebalancer().await?)
}
