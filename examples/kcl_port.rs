//! A KCL `ShardRecordProcessor` ported to a `RecordHandler`, hook by hook
//! (docs/OPERATIONS.md, "Porting a ShardRecordProcessor"). The processor
//! keeps a running total per shard, as KCL processors often keep
//! per-shard state, and flushes it where KCL would checkpoint.
//!
//! `cargo run --example kcl_port` drives the hooks the way a shard worker
//! does (gained, records, ended; lost; shutdown). Under a worker, give it to
//! `ShardWorker::new` or `WorkerFunction::from_env` as any handler.

use shardkeeper::processing::{HandlerError, RecordHandler, StreamRecord};
use shardkeeper::state::{Checkpoint, ShardId};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(serde::Deserialize)]
struct Order {
    amount_cents: u64,
}

/// KCL: `class OrderProcessor implements ShardRecordProcessor`. One value
/// serves every shard the worker holds (KCL makes one processor a shard),
/// so the per-shard state is keyed by shard.
#[derive(Default)]
struct OrderProcessor {
    totals: Mutex<HashMap<String, u64>>,
}

impl OrderProcessor {
    fn flush(&self, shard: &str) {
        if let Some(total) = self.totals.lock().unwrap().remove(shard) {
            println!("{shard}: {total} cents flushed");
        }
    }
}

impl RecordHandler for OrderProcessor {
    /// KCL: `processRecords(input)`, the loop over `input.records()`. The
    /// records come one at a time, in order, KPL aggregates already
    /// de-aggregated. There is no `checkpointer.checkpoint()`: the worker
    /// checkpoints after the records that returned `Ok` (or were parked).
    async fn handle(&self, record: StreamRecord) -> Result<(), HandlerError> {
        let order: Order = serde_json::from_slice(&record.data)?;
        *self
            .totals
            .lock()
            .unwrap()
            .entry(record.shard_id.to_string())
            .or_default() += order.amount_cents;
        Ok(())
    }

    /// KCL: `initialize(input)`: the shard, and where it resumes.
    async fn shard_gained(&self, shard: &ShardId, position: Option<&Checkpoint>) {
        let from = position.map_or("the initial position".to_owned(), |p| p.to_string());
        println!("{shard}: gained, reading after {from}");
        self.totals.lock().unwrap().insert(shard.to_string(), 0);
    }

    /// KCL: `leaseLost(input)`: no checkpoint is possible; drop the state.
    async fn lease_lost(&self, shard: &ShardId) {
        self.totals.lock().unwrap().remove(shard.as_str());
    }

    /// KCL: `shardEnded(input)` and its `checkpointer.checkpoint()`: the
    /// end is checkpointed for you; flush what the shard owes.
    async fn shard_ended(&self, shard: &ShardId) {
        self.flush(shard.as_str());
    }

    /// KCL: `shutdownRequested(input)`: the worker checkpoints each shard
    /// where it stands after this returns.
    async fn shutdown_requested(&self) {
        let shards: Vec<String> = self.totals.lock().unwrap().keys().cloned().collect();
        for shard in shards {
            self.flush(&shard);
        }
    }
}

fn record(shard: &str, sequence: &str, amount: u64) -> StreamRecord {
    StreamRecord {
        shard_id: shard.into(),
        sequence_number: sequence.into(),
        sub_sequence: 0,
        aggregated: false,
        partition_key: "order".into(),
        explicit_hash_key: None,
        data: format!(r#"{{"amount_cents": {amount}}}"#)
            .into_bytes()
            .into(),
        approximate_arrival: None,
        event_source_arn: None,
        change: None,
    }
}

#[tokio::main]
async fn main() -> Result<(), HandlerError> {
    let processor = OrderProcessor::default();
    let (a, b) = (
        ShardId::new("shardId-000000000000")?,
        ShardId::new("shardId-000000000001")?,
    );
    processor.shard_gained(&a, None).await;
    processor.shard_gained(&b, Some(&"4959".parse()?)).await;
    processor.handle(record(a.as_str(), "1", 250)).await?;
    processor.handle(record(a.as_str(), "2", 100)).await?;
    processor.handle(record(b.as_str(), "4960", 75)).await?;
    processor.shard_ended(&a).await;
    processor.shutdown_requested().await;
    Ok(())
}
