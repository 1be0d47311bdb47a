//! The registry of consumers: reading it, a consumer leaving it, and the
//! reaper's removal of consumers whose heartbeats stopped.

use super::*;

impl Consumers<'_> {
    /// Removes this consumer's registration (a clean leave: the rebalancer
    /// then treats any lease still in its name as free); `false` if it was
    /// not registered.
    pub async fn deregister(self, consumer: &ConsumerId) -> Result<bool> {
        self.store
            .delete_item(
                &self.store.home(consumer_sk(consumer)),
                Some("attribute_exists(pk)"),
                &Expr::new(),
            )
            .await
    }

    /// One consumer, if registered.
    pub async fn get(self, consumer: &ConsumerId) -> Result<Option<ConsumerState>> {
        self.store
            .get_item(&self.store.home(consumer_sk(consumer)))
            .await?
            .map(|item| ConsumerState::from_item(consumer.as_str(), &item))
            .transpose()
    }

    /// Every registered consumer of the group.
    pub async fn list(self) -> Result<Vec<ConsumerState>> {
        self.store
            .query_home(SK_CONSUMER)
            .await?
            .iter()
            .filter_map(|item| sk_suffix(item, SK_CONSUMER).map(|id| (id, item)))
            .map(|(id, item)| ConsumerState::from_item(id, item))
            .collect()
    }

    /// Removes a consumer if its heartbeat is still the one seen in `seen`
    /// (a consumer that heartbeated since is left alone); `true` if removed.
    pub async fn remove_if_unchanged(self, seen: &ConsumerState) -> Result<bool> {
        let expr = Expr::new()
            .names(&[attr::HEARTBEAT])
            .value("seen", n(seen.heartbeat));
        self.store
            .delete_item(
                &self.store.home(consumer_sk(seen.id())),
                Some("#heartbeat = :seen"),
                &expr,
            )
            .await
    }

    /// Removes a consumer that missed its heartbeat, if its heartbeat is
    /// still the one seen, then frees the leases given (each only if it is
    /// still as seen and the consumer still absent; pass only leases seen
    /// unchanged for a term, the others are given away later) and unlocks
    /// the EFO consumers it held (each on the lock counter seen). `None` if
    /// the consumer heartbeated since (nothing is touched).
    pub async fn reap(
        self,
        seen: &ConsumerState,
        leases: &[Lease],
        efo: &[EfoLock],
    ) -> Result<Option<ClearReport>> {
        if !self.remove_if_unchanged(seen).await? {
            return Ok(None);
        }
        tracing::info!(consumer = %seen.id(), heartbeat = seen.heartbeat, "removed a consumer that missed its heartbeat");
        let mut report = ClearReport {
            removed: vec![seen.id().clone()],
            ..ClearReport::default()
        };
        for lease in leases.iter().filter(|l| l.owner == *seen.id()) {
            if self.store.leases().free_stale(lease).await? {
                report.leases_released.push(lease.shard_id.clone());
            }
        }
        for lock in efo {
            if self.store.efo_consumers().release(lock).await? {
                report.efo_released.push(lock.name.clone());
            }
        }
        Ok(Some(report))
    }

    /// Removes consumers whose heartbeat is older than `timeout`, frees
    /// their leases whose stored expiry has passed, and unlocks EFO
    /// consumers held by removed or unknown consumers, all by the store's
    /// clock (an operator's clean-up; the reaper judges by what it
    /// observed instead). Every write is conditional on the state it was
    /// decided on, so it is safe to run from several places at once.
    pub async fn clear_old(self, timeout: Duration) -> Result<ClearReport> {
        let snapshot = self.store.load_group().await?;
        let now = self.store.now();
        let limit = duration_millis(timeout);
        let mut report = ClearReport::default();
        for consumer in &snapshot.consumers {
            if now - consumer.heartbeat <= limit {
                continue;
            }
            let leases: Vec<Lease> = snapshot
                .shards
                .iter()
                .filter(|s| s.expires.is_some_and(|e| e < now))
                .filter_map(|s| s.lease())
                .filter(|l| l.owner == *consumer.id())
                .collect();
            let locks: Vec<EfoLock> = snapshot
                .efo
                .iter()
                .filter(|e| e.used_by.as_ref() == Some(consumer.id()))
                .filter_map(|e| e.lock())
                .collect();
            if let Some(done) = self.reap(consumer, &leases, &locks).await? {
                report.removed.extend(done.removed);
                report.leases_released.extend(done.leases_released);
                report.efo_released.extend(done.efo_released);
            }
        }
        let registered: BTreeSet<&ConsumerId> =
            snapshot.consumers.iter().map(ConsumerState::id).collect();
        for lock in snapshot.efo.iter().filter_map(|e| e.lock()) {
            if !registered.contains(&lock.consumer)
                && self.store.efo_consumers().release(&lock).await?
            {
                report.efo_released.push(lock.name.clone());
            }
        }
        Ok(report)
    }
}
