//! What a session does for the other consumers and for older code: renew
//! leases for a rebalancer or reaper of the code before sessions, honour a
//! claim (checkpoint, then hand over), and read the leases given to it by
//! name.

use super::*;

impl ConsumerSession {
    /// For [`UPGRADE_WINDOW`](crate::state::UPGRADE_WINDOW) after
    /// the group was raised to the schema of sessions, and after code from
    /// before sessions was last seen running in it (a consumer of it
    /// registered, or a claim on a lease alone), renews each held lease
    /// before the heartbeat, as the code before sessions did, so a rebalancer or reaper of that code still
    /// running sees the leases renewed and keeps its hands off. Returns the
    /// shards whose renewal found a claim (that code's claims are on the
    /// lease alone).
    pub(super) async fn renew_for_older_code(
        &mut self,
        tick: &mut SessionTick,
    ) -> Result<BTreeSet<ShardId>> {
        // Read again when the window seems over, then every few minutes:
        // code from before sessions seen since moves its end on.
        let now = self.store.now();
        let fresh = |(until, read): (Option<EpochMillis>, EpochMillis)| match until {
            Some(until) if now < until => true,
            Some(until) if read < until => false,
            _ => now - read < duration_millis(WINDOW_READ_EVERY),
        };
        let until = match self.renew_until {
            Some(cached) if fresh(cached) => cached.0,
            _ => {
                let state = self.store.stream_item().state().await?;
                let until = state.and_then(|s| s.upgrade_window_ends());
                self.renew_until = Some((until, now));
                until
            }
        };
        let mut claimed = BTreeSet::new();
        if until.is_none_or(|until| self.store.now() >= until) {
            return Ok(claimed);
        }
        let held: Vec<Lease> = self.leases.values().cloned().collect();
        for lease in held {
            match self.store.leases().renew(&lease, self.lease_term).await {
                Ok(renewal) if renewal.claim.is_some() => {
                    claimed.insert(lease.shard_id);
                }
                Ok(_) => {}
                Err(e) if e.is_lease_lost() => {
                    tracing::warn!(shard = %lease.shard_id, error = %e, "lease lost: stop processing the shard");
                    self.forget_refused(&lease.shard_id);
                    tick.lost.push(lease.shard_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(claimed)
    }

    /// A claim on `shard` was noted on this consumer's item: if the lease
    /// is this process's (held by the session, or still in its name under
    /// its token after the session dropped it) and the claim still stands
    /// (it may have been withdrawn, or be the note of an earlier claim),
    /// checkpoint and hand the shard over; a lease found lost is dropped.
    pub(super) async fn honour_claim(
        &mut self,
        shard: &ShardId,
        tick: &mut SessionTick,
        progress: &impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<()> {
        let held = self.leases.get(shard).cloned();
        let state = match self.store.shards().get(&ShardScope::Group, shard).await {
            Ok(state) => Some(state),
            Err(StateError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let lease = match (state.as_ref().and_then(|s| s.lease()), &held) {
            (Some(stored), Some(held))
                if stored.owner == held.owner && stored.counter == held.counter =>
            {
                Some(held.clone())
            }
            // Dropped by the session (a hand-over that failed part-way),
            // still this process's.
            (Some(stored), None)
                if stored.owner == *self.id()
                    && state.as_ref().and_then(|s| s.holder.as_deref())
                        == Some(self.holding.token()) =>
            {
                Some(stored)
            }
            _ => None,
        };
        let Some(lease) = lease else {
            if held.is_some() {
                tracing::warn!(%shard, "lease lost: stop processing the shard");
                self.forget_refused(shard);
                tick.lost.push(shard.clone());
            }
            return Ok(());
        };
        if state.is_none_or(|s| s.claim.is_none()) {
            return Ok(());
        }
        let report = held.is_some();
        // A lease adopted at a counter this session never held: an
        // operator moved the shard since the session last held it (the
        // holder kept), and the claim came after the move. The session's
        // progress is from before the move; the stored position (the
        // move's, or later) is handed over as it is, since a checkpoint
        // never moves back.
        let own_progress = report || self.dropped.get(shard) == Some(&lease.counter);
        let stored = |_: &ShardId| -> Option<(Checkpoint, Option<EpochMillis>)> { None };
        let handed = if own_progress {
            self.hand_over(&lease, progress).await
        } else {
            tracing::warn!(%shard, counter = lease.counter, "a claim on a lease moved since it was held: handed over at its stored position");
            self.hand_over(&lease, &stored).await
        };
        match handed {
            Ok(Released::HandedOff(to)) if report => {
                tick.handed_off.push((shard.clone(), Some(to)))
            }
            Ok(Released::Free) if report => tick.handed_off.push((shard.clone(), None)),
            Ok(_) => {}
            Err(e) if e.is_lease_lost() => {
                // Refused by a moved counter: still in this consumer's name
                // after an operator's move, perhaps.
                self.recheck.insert(shard.clone());
                if report {
                    tick.lost.push(shard.clone())
                }
            }
            Err(e) => {
                // The session no longer holds it; the note stays
                // unacknowledged, so the next tick hands it over. Its shard
                // is reported lost, so it is read no more.
                if report {
                    tick.lost.push(shard.clone());
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// The shards of `named` that this consumer owns now, in shard order
    /// (one read each, [`GIVEN_READS_AT_ONCE`] at a time; a shard given away
    /// again, or gone, is left).
    pub(super) async fn given_to_me(
        &self,
        named: &[ShardId],
    ) -> Result<Vec<crate::state::ShardState>> {
        let mut owned = Vec::new();
        for chunk in named.chunks(GIVEN_READS_AT_ONCE) {
            let mut reads = tokio::task::JoinSet::new();
            for shard in chunk {
                let (store, shard) = (self.store.clone(), shard.clone());
                reads.spawn(async move { store.shards().get(&ShardScope::Group, &shard).await });
            }
            while let Some(read) = reads.join_next().await {
                let read = read.map_err(|e| StateError::Sdk {
                    service: crate::state::Service::DynamoDb,
                    operation: "GetItem",
                    code: None,
                    message: format!("a read of a given shard stopped: {e}"),
                })?;
                match read {
                    Ok(state) if !state.depleted && state.owner.as_ref() == Some(self.id()) => {
                        owned.push(state)
                    }
                    Ok(_) | Err(StateError::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        owned.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        Ok(owned)
    }

    pub(super) async fn hand_over(
        &mut self,
        lease: &Lease,
        progress: &impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<Released> {
        self.forget(&lease.shard_id);
        if let Some((cp, arrival)) = progress(&lease.shard_id) {
            self.store.checkpoints().save(lease, &cp, arrival).await?;
        }
        Ok(self.store.leases().release(lease, self.lease_term).await?)
    }
}
