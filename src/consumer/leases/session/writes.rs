//! A session's writes for the shards it holds: checkpoints, a shard's
//! completion, releasing its leases and leaving the group.

use super::*;

impl ConsumerSession {
    /// Stores a checkpoint on a held lease. A lost lease is dropped from the
    /// session and comes back as a lost lease ([`crate::Error::is_lease_lost`]): stop that shard.
    pub async fn checkpoint(
        &mut self,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
    ) -> Result<CheckpointOutcome> {
        let lease = self.held(shard)?;
        let out = self.store.checkpoints().save(&lease, cp, arrival).await;
        if matches!(out, Err(StateError::LeaseLost { .. })) {
            self.forget_refused(shard);
        }
        Ok(out?)
    }

    /// Stores a checkpoint on a held lease with `effects`, in one
    /// transaction (see [`crate::state::Checkpoints::save_with`]). A lost
    /// lease is dropped from the session, as [`ConsumerSession::checkpoint`]
    /// drops it.
    pub async fn checkpoint_with(
        &mut self,
        shard: &ShardId,
        cp: &Checkpoint,
        arrival: Option<EpochMillis>,
        effects: Vec<aws_sdk_dynamodb::types::TransactWriteItem>,
    ) -> Result<crate::state::EffectsOutcome> {
        let lease = self.held(shard)?;
        let out = self
            .store
            .checkpoints()
            .save_with(&lease, cp, arrival, effects)
            .await;
        if matches!(out, Err(StateError::LeaseLost { .. })) {
            self.forget_refused(shard);
        }
        Ok(out?)
    }

    /// The shard was read to its end: marks it depleted (its lease ends) and
    /// makes its children leasable.
    pub async fn complete_shard(
        &mut self,
        shard: &ShardId,
        children: &[ShardSpec],
    ) -> Result<Depleted> {
        let lease = self.held(shard)?;
        let out = self
            .store
            .checkpoints()
            .mark_depleted(&lease, children)
            .await;
        // The lease ends with the write; a write that failed transiently
        // keeps it, to be made again (depletion is idempotent).
        if out.is_ok() {
            self.forget(shard);
        } else if out.as_ref().is_err_and(StateError::is_lease_lost) {
            self.forget_refused(shard);
        }
        Ok(out?)
    }

    /// Checkpoints every held shard at its progress and releases it (a
    /// claimed one goes to its claimant): for a clean shutdown.
    pub async fn release_all(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<Vec<ShardId>> {
        let held: Vec<Lease> = self.leases.values().cloned().collect();
        let mut released = Vec::new();
        for lease in held {
            match self.hand_over(&lease, &progress).await {
                Ok(_) => released.push(lease.shard_id),
                Err(e) if e.is_lease_lost() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(released)
    }

    /// Leaves the group cleanly: marks the consumer inactive (the rebalancer
    /// stops giving it leases), checkpoints and releases every held lease,
    /// deregisters, then frees any lease a rebalancer assigned meanwhile.
    /// Within a term of taking the id over from another process (which may
    /// still be processing under the id's leases), it neither deregisters
    /// nor frees: the reaper does, once the heartbeat is stale.
    /// Returns the shards released. A process whose id a newer process took
    /// over touches nothing and gets [`StateError::Superseded`].
    pub async fn leave(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<Vec<ShardId>> {
        // No heartbeat of the pulse registers it again after it left.
        self.end_keep_alive();
        // A process superseded under its id leaves nothing: the id, and the
        // leases in its name, are the newer process's now.
        self.beat().await?;
        self.store.consumers().set_active(self.id(), false).await?;
        let mut released = self.release_all(progress).await?;
        // Deregistered, the id's leases would be free to every other
        // consumer at once, while another process that this one took the
        // id over from may still be inside a batch under them (until a
        // term after the takeover). The reaper removes the consumer once
        // its heartbeat is stale, and frees a lease only a term after.
        if self
            .holding
            .others_may_run(self.store.monotonic_now(), self.lease_term)
        {
            tracing::info!(
                consumer = %self.id(),
                "left within a term of taking the id over from another process: the registration and the leases still in the id's name are left to the reaper"
            );
            return Ok(released);
        }
        self.store.consumers().deregister(self.id()).await?;
        for shard in self.store.leases().owned_shards(self.id()).await? {
            if self
                .store
                .leases()
                .remove_owner(&shard.shard_id, self.id(), Some(shard.counter))
                .await?
            {
                released.push(shard.shard_id);
            }
        }
        Ok(released)
    }

    /// Checkpoints every held shard at its progress and keeps the leases (a
    /// stop after which the same consumer id comes back and renews them).
    pub async fn checkpoint_all(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<()> {
        let held: Vec<ShardId> = self.leases.keys().cloned().collect();
        for shard in held {
            if let Some((cp, arrival)) = progress(&shard) {
                match self.checkpoint(&shard, &cp, arrival).await {
                    Ok(_) => {}
                    Err(e) if e.is_lease_lost() => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(())
    }

    pub(super) fn held(&self, shard: &ShardId) -> Result<Lease> {
        let lost = || StateError::LeaseLost {
            shard_id: shard.to_string(),
            reason: format!("{} holds no lease on it", self.info.id),
        };
        Ok(self.leases.get(shard).cloned().ok_or_else(lost)?)
    }
}
