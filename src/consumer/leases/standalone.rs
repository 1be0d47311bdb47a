//! A standalone consumer: it reads every shard of the stream itself, with
//! checkpoints of its own (`OWN#<consumer>#<shard>`), and takes no part in
//! lease balancing (registered as standalone, the rebalancer gives it
//! nothing). Parents are still read before their children.
//!
//! With enhanced fan-out the reader reads as the EFO consumer it has locked:
//! its checkpoints live in that consumer's scope (`EFOSHARD#<name>#<shard>`) and
//! are fenced by the lock, so whoever locks the EFO consumer next carries on
//! where it stopped; without a lock it reads nothing.

use crate::consumer::discover_shards_in;
use crate::consumer::leases::holding::Holding;
use crate::consumer::SessionTick;
use crate::state::{
    Checkpoint, CheckpointOutcome, ConsumerId, ConsumerInfo, Depleted, EfoLock, EpochMillis,
    GroupSnapshot, ShardId, ShardScope, ShardSpec, StateStore,
};
use crate::Result;
use std::collections::BTreeSet;

/// The shards a standalone consumer reads, kept current by [`StandaloneSession::tick`].
#[derive(Debug)]
pub struct StandaloneSession {
    store: StateStore,
    kinesis: aws_sdk_kinesis::Client,
    info: ConsumerInfo,
    scope: ShardScope,
    reading: BTreeSet<ShardId>,
    efo: Efo,
    holding: Holding,
}

#[derive(Debug)]
enum Efo {
    /// Polling: checkpoints in the consumer's own scope.
    Off,
    /// Enhanced fan-out, as the EFO consumer locked (none: read nothing).
    Locked(Option<EfoLock>),
}

impl StandaloneSession {
    /// A reader for the consumer `info` (marked standalone) on the store's stream.
    pub fn new(
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        mut info: ConsumerInfo,
    ) -> Self {
        info.standalone = true;
        let kinesis = crate::state::own_kinesis_client(&kinesis, &store.config().timeouts);
        let scope = ShardScope::Consumer(info.id.clone());
        StandaloneSession {
            store,
            kinesis,
            info,
            scope,
            reading: BTreeSet::new(),
            efo: Efo::Off,
            holding: Holding::new(),
        }
    }

    /// The consumer's id.
    pub fn id(&self) -> &ConsumerId {
        &self.info.id
    }

    /// Reads as the enhanced fan-out consumer `lock` names (see the module
    /// docs); `None`: reads nothing until a lock is set. Returns the shards
    /// it stops reading because the scope changed.
    pub fn set_efo_lock(&mut self, lock: Option<EfoLock>) -> Vec<ShardId> {
        let scope = lock.as_ref().map(|l| ShardScope::Efo(l.name.clone()));
        let same = matches!(&self.efo, Efo::Locked(Some(held)) if Some(held) == lock.as_ref());
        self.efo = Efo::Locked(lock);
        if same {
            return Vec::new();
        }
        if let Some(scope) = scope {
            self.scope = scope;
        }
        std::mem::take(&mut self.reading).into_iter().collect()
    }

    /// Where its checkpoints live.
    pub fn scope(&self) -> &ShardScope {
        &self.scope
    }

    /// Heartbeats, records new and closed shards in its scope (parents
    /// first), and returns the shards that became readable: not depleted,
    /// every parent depleted. One ListShards and one Query per tick.
    pub async fn tick(&mut self) -> Result<SessionTick> {
        // A standalone consumer is given nothing: nothing to acknowledge.
        let beat = self
            .holding
            .heartbeat(&self.store, &self.info, &Default::default())
            .await?;
        if let Efo::Locked(None) = self.efo {
            return Ok(SessionTick {
                registered: beat.registered,
                ..SessionTick::default()
            });
        }
        let known = self.store.shards().list(&self.scope).await?;
        let report = discover_shards_in(&self.store, &self.kinesis, &self.scope, &known).await?;
        let shards = if report.created.is_empty() && report.closed.is_empty() {
            known
        } else {
            self.store.shards().list(&self.scope).await?
        };
        let view = GroupSnapshot {
            shards,
            ..GroupSnapshot::default()
        };
        let mut tick = SessionTick {
            registered: beat.registered,
            ..SessionTick::default()
        };
        for shard in view.available_shards() {
            if self.reading.insert(shard.shard_id.clone()) {
                tick.gained.push(shard.shard_id.clone());
            }
        }
        Ok(tick)
    }

    /// Stores a checkpoint in its scope (monotonic; fenced by the EFO lock
    /// when reading with one: [`crate::state::StateError::LeaseLost`] if it is lost).
    pub async fn checkpoint(
        &self,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        let checkpoints = self.store.checkpoints();
        let out = match &self.efo {
            Efo::Locked(Some(lock)) => checkpoints.save_efo(lock, shard, cp, arrival).await,
            _ => {
                checkpoints
                    .save_unleased(&self.scope, shard, cp, arrival)
                    .await
            }
        };
        Ok(out?)
    }

    /// The shard was read to its end: depleted in its scope, children next.
    /// Reading with an EFO consumer, the end is first checkpointed through
    /// the EFO lock ([`crate::state::StateError::LeaseLost`] if it is lost:
    /// a worker that lost its lock never marks a shard done under the
    /// consumer's new holder). A failure leaves the shard being read, to be
    /// completed again.
    pub async fn complete_shard(
        &mut self,
        shard: &ShardId,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        if let Efo::Locked(Some(lock)) = &self.efo {
            let end = self
                .store
                .checkpoints()
                .save_efo(lock, shard, &Checkpoint::ShardEnd, None)
                .await;
            if let Err(e) = end {
                if e.is_lease_lost() {
                    self.reading.remove(shard);
                }
                return Err(e.into());
            }
        }
        let depleted = self
            .store
            .checkpoints()
            .mark_depleted_unleased(&self.scope, shard, children)
            .await?;
        self.reading.remove(shard);
        Ok(depleted)
    }

    /// Checkpoints every shard at its progress (a stop; the checkpoints stay
    /// for the next start under the same consumer id).
    pub async fn checkpoint_all(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<()> {
        for shard in std::mem::take(&mut self.reading) {
            if let Some((cp, arrival)) = progress(&shard) {
                match self.checkpoint(&shard, &cp, arrival).await {
                    Err(e) if !e.is_lease_lost() => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }
}
