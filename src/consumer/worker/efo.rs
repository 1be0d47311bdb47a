//! A worker's enhanced fan-out consumer: locked from the group's pool (or
//! grown), given to every shard's source, and replaced when it is gone from
//! Kinesis.

use super::ShardWorker;
use crate::consumer::{lock_or_grow, StopReason};
use crate::processing::RecordHandler;
use crate::Result;

impl<H: RecordHandler> ShardWorker<H> {
    /// Locks an EFO consumer from the pool (or keeps the one held); without
    /// one, a group consumer gives up its leases (it is marked inactive, so the
    /// rebalancer gives it no more) and a standalone one reads nothing.
    pub(super) async fn lock_efo(&mut self) -> Result<()> {
        let Some(pool) = &self.config.enhanced_fan_out else {
            return Ok(());
        };
        let lock = lock_or_grow(&self.store, &self.kinesis, self.mode.id(), pool).await?;
        self.efo_recheck = false;
        if lock == self.efo_lock {
            return Ok(());
        }
        tracing::info!(consumer = %self.mode.id(), efo = ?lock.as_ref().map(|l| l.name.as_str()), "enhanced fan-out consumer");
        self.efo_lock = lock.clone();
        let arn = lock.as_ref().map(|l| l.arn.clone());
        for pipeline in self.pipelines.pipelines_mut() {
            pipeline.source_mut().resubscribe(arn.clone());
        }
        for shard in self.mode.set_efo_lock(lock) {
            self.drop_shard(&shard, StopReason::Released).await;
        }
        Ok(())
    }

    /// The EFO consumer this worker holds is gone from Kinesis (deregistered
    /// under the pool): its pool entry is retired (no other worker locks it
    /// again; the reaper finishes the retirement) and this worker locks
    /// another, or grows the pool, and subscribes again from its positions.
    pub(super) async fn efo_consumer_gone(&mut self, why: &str) -> Result<()> {
        let Some(lock) = self.efo_lock.clone() else {
            return Ok(());
        };
        tracing::warn!(consumer = %self.mode.id(), efo = %lock.name, %why, "enhanced fan-out consumer gone from Kinesis");
        self.store.efo_consumers().retire_lent(&lock).await?;
        self.efo_lock = None;
        self.efo_recheck = true;
        self.lock_efo().await
    }
}
