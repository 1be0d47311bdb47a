//! How a shard worker holds its shards: as a consumer of a group (leases
//! given by the rebalancer, fenced checkpoints) or standalone (every shard,
//! checkpoints of its own). The worker's reading code is the same for both.

use crate::consumer::StandaloneSession;
use crate::consumer::{ConsumerSession, Observer, SessionTick, WorkerEvent};
use crate::pipeline::Checkpointer;
use crate::state::instant_now;
use crate::state::{
    Checkpoint, CheckpointOutcome, ConsumerId, Depleted, EfoLock, EpochMillis, ShardId, ShardScope,
    ShardSpec,
};
use crate::Result;

/// The progress of each shard: where to checkpoint it.
pub(crate) type Progress<'a> =
    &'a (dyn Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)> + Sync);

/// a group consumer's session, or a standalone one's.
#[derive(Debug)]
pub(crate) enum Mode {
    Group(ConsumerSession),
    Standalone(StandaloneSession),
}

impl Mode {
    /// Where the shards' state lives.
    pub(crate) fn scope(&self) -> ShardScope {
        match self {
            Mode::Group(_) => ShardScope::Group,
            Mode::Standalone(r) => r.scope().clone(),
        }
    }

    /// When this process must stop processing `shard` (see
    /// [`ConsumerSession::local_expiry`]), and the lease term; `None` for a
    /// standalone consumer, which holds no leases.
    pub(crate) fn local_expiry(
        &self,
        shard: &ShardId,
    ) -> Option<(std::time::Instant, std::time::Duration)> {
        match self {
            Mode::Group(s) => s.local_expiry(shard).map(|t| (t, s.lease_term())),
            Mode::Standalone(_) => None,
        }
    }

    /// Keeps a group consumer's heartbeat going on a task of its own while
    /// the run lasts (see [`ConsumerSession::keep_alive`]); `every: None`
    /// stops it.
    pub(crate) fn keep_alive(&mut self, every: Option<std::time::Duration>) {
        if let Mode::Group(s) = self {
            match every {
                Some(every) => s.keep_alive(every),
                None => s.end_keep_alive(),
            }
        }
    }

    /// Marks the worker's loop as running.
    pub(crate) fn alive(&self) {
        if let Mode::Group(s) = self {
            s.alive();
        }
    }

    /// Reports how busy the handler was, in all and on each shard held (a
    /// group consumer's heartbeat carries it).
    pub(crate) fn set_busy(
        &mut self,
        per_mille: u16,
        loads: std::collections::BTreeMap<crate::state::ShardId, u16>,
    ) {
        if let Mode::Group(s) = self {
            s.set_shard_loads(loads);
            s.set_busy(per_mille);
        }
    }

    /// Starts leaving: a group consumer hands its leases to others (see
    /// [`ConsumerSession::drain`]); a standalone one reads on to the end.
    pub(crate) async fn drain(&mut self) -> Result<()> {
        match self {
            Mode::Group(s) => s.drain().await,
            Mode::Standalone(_) => Ok(()),
        }
    }

    pub(crate) fn id(&self) -> &ConsumerId {
        match self {
            Mode::Group(s) => s.id(),
            Mode::Standalone(r) => r.id(),
        }
    }

    /// The enhanced fan-out consumer now locked. A standalone consumer reads as
    /// it (returns the shards it stops reading); a group consumer's shards are
    /// its leases, whatever it reads with.
    pub(crate) fn set_efo_lock(&mut self, lock: Option<EfoLock>) -> Vec<ShardId> {
        match self {
            Mode::Group(_) => Vec::new(),
            Mode::Standalone(r) => r.set_efo_lock(lock),
        }
    }

    /// Gives up every shard held, checkpointed (a group consumer releases its
    /// leases; a standalone consumer has nothing to give up).
    pub(crate) async fn release_all(&mut self, progress: Progress<'_>) -> Result<Vec<ShardId>> {
        match self {
            Mode::Group(s) => s.release_all(progress).await,
            Mode::Standalone(_) => Ok(Vec::new()),
        }
    }

    /// The session's heartbeat (group) or discovery (standalone).
    pub(crate) async fn tick(&mut self, progress: Progress<'_>) -> Result<SessionTick> {
        match self {
            Mode::Group(s) => s.tick(progress).await,
            Mode::Standalone(r) => r.tick().await,
        }
    }

    /// A checkpoint: fenced by the lease (group) or in its own scope.
    pub(crate) async fn checkpoint(
        &mut self,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        match self {
            Mode::Group(s) => s.checkpoint(shard, cp, arrival).await,
            Mode::Standalone(r) => r.checkpoint(shard, cp, arrival).await,
        }
    }

    /// The shard is read to its end.
    pub(crate) async fn complete_shard(
        &mut self,
        shard: &ShardId,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        match self {
            Mode::Group(s) => s.complete_shard(shard, children).await,
            Mode::Standalone(r) => r.complete_shard(shard, children).await,
        }
    }

    /// A stop that hands the shards on: a group consumer leaves the group; a
    /// standalone consumer checkpoints (nobody else reads its scope).
    pub(crate) async fn leave(&mut self, progress: Progress<'_>) -> Result<()> {
        match self {
            Mode::Group(s) => s.leave(progress).await.map(drop),
            Mode::Standalone(r) => r.checkpoint_all(progress).await,
        }
    }

    /// A stop that keeps the shards: checkpoint only.
    pub(crate) async fn checkpoint_all(&mut self, progress: Progress<'_>) -> Result<()> {
        match self {
            Mode::Group(s) => s.checkpoint_all(progress).await,
            Mode::Standalone(r) => r.checkpoint_all(progress).await,
        }
    }
}

/// The worker's checkpointer: a fenced checkpoint through the lease (or,
/// standalone, in the consumer's own scope), each one stored after a record
/// reported to the observer with when its request was sent.
pub(crate) struct ModeCheckpoints<'a> {
    pub mode: &'a mut Mode,
    pub observer: Option<&'a Observer>,
}

impl Checkpointer for ModeCheckpoints<'_> {
    fn batch_starts(&mut self, shard: &ShardId) {
        let expiry = self.mode.local_expiry(shard);
        if let (Some((lease_expiry, _)), Some(observer)) = (expiry, self.observer) {
            observer(WorkerEvent::Processing {
                shard: shard.clone(),
                at: instant_now(),
                lease_expiry,
            });
        }
    }

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<bool> {
        let sent = instant_now();
        let stored =
            self.mode.checkpoint(shard, checkpoint, arrival).await? == CheckpointOutcome::Stored;
        // A pin is no progress: only checkpoints after a record are events.
        if let Some(observer) = self
            .observer
            .filter(|_| stored && checkpoint.has_progress())
        {
            observer(WorkerEvent::Checkpointed {
                shard: shard.clone(),
                checkpoint: checkpoint.clone(),
                sent,
            });
        }
        Ok(stored)
    }

    /// A lease holder's (a group consumer's); a standalone consumer writes
    /// no effects.
    fn takes_effects(&self) -> bool {
        matches!(self.mode, Mode::Group(_))
    }

    async fn checkpoint_with(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        arrival: Option<EpochMillis>,
        effects: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> Result<crate::state::EffectsOutcome> {
        let Mode::Group(session) = &mut *self.mode else {
            return Err(crate::Error::Event(
                "a standalone consumer writes no effects".to_owned(),
            ));
        };
        let sent = instant_now();
        let outcome = session
            .checkpoint_with(shard, checkpoint, arrival, effects)
            .await?;
        if let Some(observer) = self
            .observer
            .filter(|_| outcome == crate::state::EffectsOutcome::Stored)
        {
            observer(WorkerEvent::Checkpointed {
                shard: shard.clone(),
                checkpoint: checkpoint.clone(),
                sent,
            });
        }
        Ok(outcome)
    }
}
