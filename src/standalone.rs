//! A standalone consumer: it reads every shard of the stream itself, with
//! checkpoints of its own (`OWN#<consumer>#<shard>`), and takes no part in
//! lease balancing (registered as standalone, the rebalancer gives it
//! nothing). Parents are still read before their children.

use crate::discovery::discover_shards_in;
use crate::rebalance::available_shards;
use crate::session::SessionTick;
use crate::state::{
    Checkpoint, CheckpointOutcome, ConsumerInfo, Depleted, EpochMillis, GroupSnapshot, Result,
    ShardId, ShardScope, ShardSpec, StateStore,
};
use std::collections::BTreeSet;

/// The shards a standalone consumer reads, kept current by [`StandaloneReader::tick`].
#[derive(Debug)]
pub struct StandaloneReader {
    store: StateStore,
    kinesis: aws_sdk_kinesis::Client,
    info: ConsumerInfo,
    scope: ShardScope,
    reading: BTreeSet<ShardId>,
}

impl StandaloneReader {
    /// A reader for the consumer `info` (marked standalone) on the store's stream.
    pub fn new(
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        mut info: ConsumerInfo,
    ) -> Self {
        info.standalone = true;
        let scope = ShardScope::Consumer(info.id.clone());
        StandaloneReader {
            store,
            kinesis,
            info,
            scope,
            reading: BTreeSet::new(),
        }
    }

    /// Where its checkpoints live.
    pub fn scope(&self) -> &ShardScope {
        &self.scope
    }

    /// Heartbeats, records new and closed shards in its scope (parents
    /// first), and returns the shards that became readable: not depleted,
    /// every parent depleted. One ListShards and one Query per tick.
    pub async fn tick(&mut self) -> Result<SessionTick> {
        let beat = self.store.heartbeat(&self.info).await?;
        let known = self.store.list_shards(&self.scope).await?;
        let report = discover_shards_in(&self.store, &self.kinesis, &self.scope, &known).await?;
        let shards = if report.created.is_empty() && report.closed.is_empty() {
            known
        } else {
            self.store.list_shards(&self.scope).await?
        };
        let view = GroupSnapshot {
            shards,
            ..GroupSnapshot::default()
        };
        let mut tick = SessionTick {
            registered: beat.registered,
            ..SessionTick::default()
        };
        for shard in available_shards(&view) {
            if self.reading.insert(shard.shard_id.clone()) {
                tick.gained.push(shard.shard_id.clone());
            }
        }
        Ok(tick)
    }

    /// Stores a checkpoint in its scope (monotonic; no lease to fence).
    pub async fn checkpoint(
        &self,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        self.store
            .checkpoint_unleased(&self.scope, shard, cp, arrival)
            .await
    }

    /// The shard was read to its end: depleted in its scope, children next.
    pub async fn complete_shard(
        &mut self,
        shard: &ShardId,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        self.reading.remove(shard);
        self.store
            .mark_depleted_unleased(&self.scope, shard, children)
            .await
    }

    /// Checkpoints every shard at its progress (a stop; the checkpoints stay
    /// for the next start under the same consumer id).
    pub async fn checkpoint_all(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<()> {
        for shard in std::mem::take(&mut self.reading) {
            if let Some((cp, arrival)) = progress(&shard) {
                self.checkpoint(&shard, &cp, arrival).await?;
            }
        }
        Ok(())
    }
}
