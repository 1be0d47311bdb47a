//! How often a shard's checkpoint is written: at most once every
//! [`WorkerConfig::checkpoint_every`](crate::consumer::WorkerConfig::checkpoint_every)
//! of progress. A checkpoint that comes sooner is deferred: the pipeline
//! carries on from it in memory, and it is written once that time has
//! passed (at the next heartbeat, if no later checkpoint came first), and
//! always at a hand-over, a stop or a drain, which write where each shard
//! stands. A pin (a position with no progress) is never deferred.

use super::ShardWorker;
use crate::consumer::leases::ModeCheckpoints;
use crate::consumer::StopReason;
use crate::pipeline::Checkpointer;
use crate::processing::RecordHandler;
use crate::state::{Checkpoint, EpochMillis, ShardId};
use crate::Result;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// When each held shard's checkpoint was last written, and which.
#[derive(Debug, Default)]
pub(super) struct Pacing {
    written: BTreeMap<ShardId, (Instant, Checkpoint)>,
}

impl Pacing {
    /// Forgets `shard` (no longer held).
    pub(super) fn forget(&mut self, shard: &ShardId) {
        self.written.remove(shard);
    }

    /// The shards whose position moved past what was written `every` or
    /// more before `now` (or never written), with where they stand.
    pub(super) fn due(
        &self,
        positions: BTreeMap<ShardId, (Checkpoint, Option<EpochMillis>)>,
        now: Instant,
        every: Duration,
    ) -> Vec<(ShardId, Checkpoint, Option<EpochMillis>)> {
        positions
            .into_iter()
            .filter(|(_, (cp, _))| cp.has_progress())
            .filter(|(shard, (cp, _))| match self.written.get(shard) {
                Some((at, written)) => written != cp && now.saturating_duration_since(*at) >= every,
                None => true,
            })
            .map(|(shard, (cp, arrival))| (shard, cp, arrival))
            .collect()
    }
}

/// A worker's checkpointer with its pacing: checkpoints of a shard that
/// come within `every` of its last written one are deferred.
pub(super) struct PacedCheckpoints<'a> {
    pub inner: ModeCheckpoints<'a>,
    pub pacing: &'a mut Pacing,
    pub every: Duration,
}

impl Checkpointer for PacedCheckpoints<'_> {
    fn batch_starts(&mut self, shard: &ShardId) {
        self.inner.batch_starts(shard);
    }

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<bool> {
        let now = Instant::now();
        let recent = self
            .pacing
            .written
            .get(shard)
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) < self.every);
        if checkpoint.has_progress() && recent {
            return Ok(false);
        }
        let stored = self.inner.checkpoint(shard, checkpoint, arrival).await?;
        if checkpoint.has_progress() {
            self.pacing
                .written
                .insert(shard.clone(), (now, checkpoint.clone()));
        }
        Ok(stored)
    }
}

impl<H: RecordHandler> ShardWorker<H> {
    /// Writes the checkpoints deferred for `checkpoint_every` or more (at a
    /// heartbeat): a shard whose records stopped coming is not left behind
    /// its progress. A lost lease drops the shard; a transient failure is
    /// left to the next heartbeat.
    pub(super) async fn write_deferred(&mut self) -> Result<()> {
        let every = self.config.checkpoint_every;
        let due = self.pacing.due(self.positions(), Instant::now(), every);
        for (shard, cp, arrival) in due {
            let mut checkpointer = PacedCheckpoints {
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
