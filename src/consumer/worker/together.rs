//! A step that reads every due shard at once (`ProcessingOptions::concurrency`
//! above 1): each shard's pipeline steps as its own future in one task, with
//! the same per-key concurrency inside, and the checkpoints of all of them
//! go through one checkpointer in turn. Each shard keeps its own stop-by
//! (its lease's), and the session's heartbeat goes on beside the steps
//! (`ShardWorker::run_until` keeps it alive); what a step leads to
//! (completed, lost) is dealt with after all of them.

use super::ShardWorker;
use crate::consumer::leases::{Mode, ModeCheckpoints};
use crate::consumer::{StopReason, WorkerEvent};
use crate::pipeline::{Paced, ShardReport, Shared};
use crate::processing::{Core, RecordHandler};
use crate::state::instant_now;
use crate::state::ShardId;
use crate::Result;
use std::collections::BTreeMap;
use std::time::Instant;

impl<H: RecordHandler> ShardWorker<H> {
    /// Reads each of the `due` shards once, all at once, and processes what
    /// came. Whether anything was read.
    pub(super) async fn read_together(&mut self, due: &[ShardId]) -> Result<bool> {
        // As a read of one shard: no lease in the session, nothing of it
        // may be processed; no time left since the last heartbeat, the
        // session beats first.
        let mut stepped = Vec::new();
        let mut beat = false;
        for shard in due {
            match self.stop_by(shard) {
                None if matches!(self.mode, Mode::Group(_)) => {
                    self.drop_shard(shard, StopReason::Lost).await;
                }
                Some(t) if instant_now() >= t => {
                    beat = true;
                    stepped.push(shard.clone());
                }
                _ => stepped.push(shard.clone()),
            }
        }
        if beat {
            self.beat().await?;
        }
        let now = instant_now();
        let stop_by: BTreeMap<ShardId, Option<Instant>> = stepped
            .into_iter()
            .filter(|s| self.pipelines.contains(s))
            .map(|s| {
                let t = self.stop_by(&s);
                (s, t)
            })
            .filter(|(_, t)| t.is_none_or(|t| now < t))
            .collect();
        let expiries: BTreeMap<ShardId, Instant> = stop_by
            .keys()
            .filter_map(|s| self.mode.local_expiry(s).map(|(t, _)| (s.clone(), t)))
            .collect();
        let observer = self.observer.as_ref();
        let starts = |shard: &ShardId| {
            if let (Some(&lease_expiry), Some(observer)) = (expiries.get(shard), observer) {
                observer(WorkerEvent::Processing {
                    shard: shard.clone(),
                    at: instant_now(),
                    lease_expiry,
                });
            }
        };
        let core = Core::new(&self.handler, Some(&self.store), &self.config.processing);
        let checkpointer = tokio::sync::Mutex::new(Paced {
            inner: ModeCheckpoints {
                mode: &mut self.mode,
                observer,
            },
            pacing: &mut self.pacing,
            every: self.config.checkpoint_every,
        });
        let shards: Vec<ShardId> = stop_by.keys().cloned().collect();
        let steps = self
            .pipelines
            .get_many_mut(&shards)
            .into_iter()
            .map(|pipeline| {
                let stop_by = stop_by.get(pipeline.shard()).copied().flatten();
                let (core, checkpointer, starts) = (&core, &checkpointer, &starts);
                async move {
                    let mut shared = Shared {
                        checkpointer,
                        starts,
                    };
                    let mut report = ShardReport::default();
                    let began = instant_now();
                    let step = pipeline.step(core, &mut shared, stop_by, &mut report).await;
                    (pipeline.shard().clone(), step, report, began.elapsed())
                }
            });
        let started = instant_now();
        let results = futures_util::future::join_all(steps).await;
        self.busy.add_overall(started.elapsed());
        let mut read = false;
        let mut failed = None;
        for (shard, step, report, busy) in results {
            self.busy.add(&shard, busy);
            self.report.shards += &report;
            match self.stepped(&shard, step).await {
                Ok(r) => read |= r,
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(read),
        }
    }
}
