//! Pacing as a layer around a checkpointer: a shard's checkpoint is
//! written at most once every interval of progress. One that comes sooner
//! is deferred: the pipeline carries on from it in memory, and its consumer
//! writes it once that time has passed ([`Pacing::due`]), and always at a
//! hand-over, a stop or a drain. A pin (a position with no progress) is
//! never deferred.

use super::Checkpointer;
use crate::state::instant_now;
use crate::state::{Checkpoint, EffectsOutcome, EpochMillis, ShardId};
use crate::Result;
use aws_sdk_dynamodb::types::TransactWriteItem;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// When each held shard's checkpoint was last written, and which.
#[derive(Debug, Default)]
pub(crate) struct Pacing {
    written: BTreeMap<ShardId, (Instant, Checkpoint)>,
}

impl Pacing {
    /// Forgets `shard` (no longer held).
    pub(crate) fn forget(&mut self, shard: &ShardId) {
        self.written.remove(shard);
    }

    /// The shards whose position moved past what was written `every` or
    /// more before `now` (or never written), with where they stand.
    pub(crate) fn due(
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

/// A checkpointer with pacing around it: checkpoints of a shard that come
/// within `every` of its last written one are deferred (the pipeline
/// carries on from them in memory); a pin (no progress) never is.
pub(crate) struct Paced<'a, C> {
    pub inner: C,
    pub pacing: &'a mut Pacing,
    pub every: Duration,
}

impl<C: Checkpointer> Checkpointer for Paced<'_, C> {
    const LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT: bool = C::LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT;

    fn batch_starts(&mut self, shard: &ShardId) {
        self.inner.batch_starts(shard);
    }

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<bool> {
        let now = instant_now();
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

    fn takes_effects(&self) -> bool {
        self.inner.takes_effects()
    }

    /// Written at once: effects do not wait for the pace.
    async fn checkpoint_with(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
        effects: Vec<TransactWriteItem>,
    ) -> Result<EffectsOutcome> {
        let outcome = self
            .inner
            .checkpoint_with(shard, checkpoint, arrival, effects)
            .await?;
        if !matches!(outcome, EffectsOutcome::Conflict { .. }) {
            self.pacing
                .written
                .insert(shard.clone(), (instant_now(), checkpoint.clone()));
        }
        Ok(outcome)
    }
}
