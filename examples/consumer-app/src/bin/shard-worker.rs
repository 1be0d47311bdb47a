//! shard-worker: one self-managed consumer instance per invocation, started
//! by the control plane's lease-rebalancer. The handler here parses each
//! record as JSON and logs it: put your own in its place. Configuration:
//! shardkeeper's scheduled-function variables (`SHARDKEEPER_TABLE`,
//! `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM`, `SHARDKEEPER_EFO_POOL_SIZE`, …).

use shardkeeper::functions::WorkerFunction;
use shardkeeper::processing::StreamRecord;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let handler = || {
        |record: StreamRecord| async move {
            let value: serde_json::Value = serde_json::from_slice(&record.data)?;
            tracing::debug!(%value, "record");
            Ok::<(), serde_json::Error>(())
        }
    };
    WorkerFunction::from_env(handler).await?.run().await?;
    Ok(())
}
