//! A worker's run: steps until its stop or deadline, riding out transient
//! failures, then a checkpoint of every shard and, by default, leaving.

use super::{ShardWorker, STOP_ATTEMPTS};
use crate::consumer::{StopReason, WorkerReport};
use crate::processing::RecordHandler;
use crate::state::instant_now;
use crate::Result;
use std::time::{Duration, Instant};

impl<H: RecordHandler> ShardWorker<H> {
    /// Steps until `stop()` says so or `deadline` (an invocation's deadline
    /// minus a margin) passes; then checkpoints every shard and, by default
    /// ([`crate::consumer::WorkerConfig::release_on_stop`]), leaves the group: leases released
    /// (claimants get theirs) so others take over at once.
    ///
    /// Transient failures ([`StateError::is_transient`](crate::state::StateError::is_transient): throttling past the
    /// retries, AWS internal errors, a table or stream endpoint that does not
    /// answer) are ridden out: the step is tried again after a capped,
    /// growing pause and counted in [`crate::pipeline::ShardReport::transient_errors`]. While
    /// heartbeats fail nothing is read, so no shard is processed past the
    /// lease term of its last heartbeat; a lease taken meanwhile is found lost
    /// at the next heartbeat. Any other error ends the run.
    pub async fn run_until(
        &mut self,
        deadline: Option<Instant>,
        stop: impl Fn() -> bool,
    ) -> Result<&WorkerReport> {
        let mut failures = 0;
        // Long batches and hung calls cost no lease: the session's heartbeat
        // goes on beside the loop.
        self.mode.keep_alive(Some(self.config.renew_every));
        while !stop() && deadline.is_none_or(|d| instant_now() < d) {
            match self.step().await {
                Ok(read) => {
                    failures = 0;
                    if !read {
                        match self.group_finished().await {
                            Ok(true) => {
                                tracing::info!(consumer = %self.mode.id(), "every shard of the bounded group is read to its end: the run ends");
                                break;
                            }
                            Ok(false) => {}
                            Err(e) if e.is_transient() => {
                                self.transient(&e, "looking whether the group is finished failed")
                            }
                            Err(e) => return Err(e),
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                Err(e) if e.is_transient() => {
                    failures += 1;
                    self.transient(&e, "step failed; trying again");
                    let pause = self.store.config().retry.backoff_cap(failures);
                    let pause = deadline.map_or(pause, |d| {
                        pause.min(d.saturating_duration_since(instant_now()))
                    });
                    tokio::time::sleep(pause).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.mode.keep_alive(None);
        self.handler.shutdown_requested().await;
        self.report.held_at_stop = self.pipelines.len() as u64;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let stopped = if self.config.release_on_stop {
                self.leave().await
            } else {
                let positions = self.positions();
                self.mode
                    .checkpoint_all(&|shard| positions.get(shard).cloned())
                    .await
            };
            match stopped {
                Ok(_) => return Ok(&self.report),
                Err(e) if e.is_transient() && attempt < STOP_ATTEMPTS => {
                    self.transient(&e, "stopping failed; trying again");
                    tokio::time::sleep(self.store.config().retry.backoff_cap(attempt)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn transient(&mut self, error: &crate::Error, what: &str) {
        self.report.shards.transient_errors += 1;
        tracing::warn!(consumer = %self.mode.id(), %error, "{what}");
    }

    /// Stops at the current progress: a group consumer leaves the group (see
    /// [`crate::consumer::ConsumerSession::leave`]); a standalone worker checkpoints. An EFO
    /// consumer held is released for the next worker.
    pub async fn leave(&mut self) -> Result<()> {
        let positions = self.positions();
        self.mode
            .leave(&|shard| positions.get(shard).cloned())
            .await?;
        self.pending.clear();
        for shard in self.pipelines.close_all() {
            self.stopped(&shard, StopReason::Released);
        }
        if let Some(lock) = self.efo_lock.take() {
            self.store.efo_consumers().release(&lock).await?;
            self.mode.set_efo_lock(None);
        }
        Ok(())
    }
}
