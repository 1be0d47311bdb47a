//! shard-worker: the Lambda binary. One scheduled invocation is one consumer
//! instance for most of a minute. The record handler here is the example
//! user code: it parses each record as JSON and logs it; put your own in its
//! place. Configuration: `SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`,
//! `SHARDKEEPER_STREAM`, `SHARDKEEPER_LEASE_TERM_SECONDS` (10),
//! `SHARDKEEPER_DEADLINE_MARGIN_MS` (2000), `SHARDKEEPER_EFO_POOL_SIZE` (0:
//! poll; 1 to 20: read with enhanced fan-out consumers shared from a pool).

use lambda_runtime::{service_fn, Error};
use shardkeeper::functions::{init_scheduled, WorkerFunction};
use shardkeeper::processing::StreamRecord;

#[tokio::main]
async fn main() -> Result<(), Error> {
    let init = init_scheduled().await?;
    let function = WorkerFunction {
        store: init.store,
        kinesis: init.kinesis,
        lease_term: init.config.lease_term,
        config: init.config.worker_config(),
        margin: init.config.timing.margin,
        drain: init.config.drain,
        handler: || {
            |record: StreamRecord| async move {
                let value: serde_json::Value = serde_json::from_slice(&record.data)?;
                tracing::debug!(shard = %record.shard_id, sequence = %record.sequence_number, %value, "record");
                Ok::<(), serde_json::Error>(())
            }
        },
        emit_metrics: true,
        observer: None,
    };
    lambda_runtime::run(service_fn(|event| function.handle(event))).await
}
