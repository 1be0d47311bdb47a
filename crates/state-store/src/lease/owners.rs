//! Who owns what, and freeing a shard from an owner that is gone: for
//! operators, the reaper and the planners.

use super::*;

impl Leases<'_> {
    /// Frees the shard if `owner` holds it (and, when given, at `counter`):
    /// for operators and the reaper. `true` if it was removed.
    pub async fn remove_owner(
        self,
        shard: &ShardId,
        owner: &ConsumerId,
        counter: Option<u64>,
    ) -> Result<bool> {
        let mut expr = lease_names(Expr::new())
            .value("me", s(owner.as_str()))
            .value("now", n(self.store.now()))
            .value("one", n(1));
        let condition = match counter {
            Some(c) => {
                expr = expr.value("n", n(c));
                FENCE
            }
            None => "#owner = :me",
        };
        self.clear_owner(shard, expr, condition).await
    }

    /// Frees `lease` if it is still exactly as seen (its owner, counter and
    /// stored expiry) and its owner is still not registered: for the
    /// reaper, once it removed the owner, on a lease it observed unchanged
    /// for a term. A consumer registered again meanwhile keeps it. `true`
    /// if it was freed.
    pub async fn free_stale(self, lease: &Lease) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter))
            .value("seen", n(lease.expires))
            .value("now", n(self.store.now()))
            .value("one", n(1));
        let condition = "#owner = :me AND #counter = :n AND #expires = :seen";
        let free = self.store.tx_update(
            &self.lease_at(&lease.shard_id).await?,
            &expr,
            CLEAR_OWNER,
            Some(condition),
        )?;
        let gone = SessionSeen::Unregistered {
            consumer: lease.owner.clone(),
        };
        let revocation = Revocation {
            shard_id: lease.shard_id.clone(),
            counter: lease.counter,
        };
        let parts = vec![free, self.session_part(&gone, &revocation)?];
        Ok(self.store.transact(parts).await?.is_ok())
    }

    /// Removes the lease's owner under `condition`, moving the counter on.
    async fn clear_owner(self, shard: &ShardId, expr: Expr, condition: &str) -> Result<bool> {
        let req = self.store.update_req(
            &self.lease_at(shard).await?,
            &expr,
            CLEAR_OWNER,
            Some(condition),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// The owner of the shard's lease (expired or not), `None` when free;
    /// [`StateError::NotFound`] if the shard has no state.
    pub async fn get_owner(self, shard: &ShardId) -> Result<Option<ConsumerId>> {
        Ok(self
            .store
            .shards()
            .get(&ShardScope::Group, shard)
            .await?
            .owner)
    }

    /// The shards whose lease is in this consumer's name (not depleted),
    /// whatever their stored expiry says: a consumer takes up the leases
    /// given to it however its clock differs from the giver's. Read as an
    /// observer reads the leases, but strongly consistent: a consumer
    /// acknowledges the names of the shards given to it after this read
    /// (its full pickup), and the responses of an eventually consistent
    /// read "may not reflect the results of a recently completed write
    /// operation" (DynamoDB Developer Guide, "DynamoDB read consistency",
    /// <https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/HowItWorks.ReadConsistency.html>):
    /// a give, a hand-off or a move applied just before it would be missed.
    /// A take of what is read is conditioned on the state read.
    pub async fn owned_shards(self, consumer: &ConsumerId) -> Result<Vec<ShardState>> {
        Ok(self
            .store
            .read_group(crate::GroupPart::Leases, true)
            .await?
            .shards
            .into_iter()
            .filter(|sh| !sh.depleted && sh.owner.as_ref() == Some(consumer))
            .collect())
    }

    /// Registered consumers that hold at least one lease (a registered
    /// consumer's session keeps its leases alive), with their shards.
    pub async fn list_active_workers(self) -> Result<BTreeMap<ConsumerId, Vec<ShardState>>> {
        let registered: std::collections::BTreeSet<ConsumerId> = self
            .store
            .consumers()
            .list()
            .await?
            .into_iter()
            .map(|c| c.info.id)
            .collect();
        let mut workers: BTreeMap<ConsumerId, Vec<ShardState>> = BTreeMap::new();
        for shard in self.store.shards().list(&ShardScope::Group).await? {
            match shard.owner.clone() {
                Some(owner) if !shard.depleted && registered.contains(&owner) => {
                    workers.entry(owner).or_default().push(shard)
                }
                _ => {}
            }
        }
        Ok(workers)
    }
}
