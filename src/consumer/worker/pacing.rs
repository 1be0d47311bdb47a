//! When the worker writes the checkpoints its pacing deferred
//! ([`crate::pipeline`]'s `Paced` layer, at most one a shard every
//! [`WorkerConfig::checkpoint_every`](crate::consumer::WorkerConfig::checkpoint_every)):
//! at each heartbeat, those deferred for that long, so a shard whose
//! records stopped coming is not left behind its progress.

use super::ShardWorker;
use crate::consumer::leases::ModeCheckpoints;
use crate::consumer::StopReason;
use crate::pipeline::{Checkpointer, Paced};
use crate::processing::RecordHandler;
use crate::state::instant_now;
use crate::Result;
use std::time::Duration;

impl<H: RecordHandler> ShardWorker<H> {
    /// Writes the checkpoints deferred for `checkpoint_every` or more (at a
    /// heartbeat): a shard whose records stopped coming is not left behind
    /// its progress. A lost lease drops the shard; a transient failure is
    /// left to the next heartbeat.
    pub(super) async fn write_deferred(&mut self) -> Result<()> {
        let every = self.config.checkpoint_every;
        let due = self.pacing.due(self.positions(), instant_now(), every);
        for (shard, cp, arrival) in due {
            let mut checkpointer = Paced {
                inner: ModeCheckpoints {
                    mode: &mut self.mode,
                    observer: self.observer.as_ref(),
                },
                pacing: &mut self.pacing,
                every: Duration::ZERO,
            };
            match checkpointer.checkpoint(&shard, &cp, arrival).await {
                Ok(stored) => self.report.shards.checkpoints += u64::from(stored),
                Err(e) if e.is_lease_lost() => self.drop_shard(&shard, StopReason::Lost).await,
                Err(e) if e.is_transient() => {
                    self.report.shards.transient_errors += 1;
                    tracing::warn!(%shard, error = %e, "a deferred checkpoint failed; the next heartbeat writes it");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}
