//! The lease's holder keeping it or letting it go: renewal (kept for the
//! upgrade window), release with hand-off to a claimant, and the claims.

use super::*;

impl Leases<'_> {
    /// Extends the lease by `term` from now. Returns the open hand-off claim,
    /// if any; [`StateError::LeaseLost`] if the lease is no longer held.
    pub async fn renew(self, lease: &Lease, term: Duration) -> Result<Renewal> {
        let now = self.store.now();
        let expr = lease_names(Expr::new())
            .value("me", s(lease.owner.as_str()))
            .value("n", n(lease.counter))
            .value("now", n(now))
            .value("until", n(now + duration_millis(term)));
        let req = self.store.update_req(
            &self.lease_at(&lease.shard_id).await?,
            &expr,
            "SET #expires = :until, #updated = :now",
            Some(FENCE),
        );
        match self.store.conditional_update(req).await? {
            Ok(item) => {
                let state = ShardState::from_item(&item)?;
                Ok(Renewal {
                    lease: Lease {
                        expires: state.expires.unwrap_or(now),
                        ..lease.clone()
                    },
                    claim: state.claim,
                })
            }
            Err(old) => Err(lost(&lease.shard_id, lease, old.as_ref())),
        }
    }

    /// Releases the lease. If another consumer claimed it, the shard goes
    /// straight to that consumer for `term` (the hand-off), else it is free.
    /// Checkpoint before releasing. [`StateError::LeaseLost`] if not held.
    ///
    /// Safe to apply twice: a retry whose first answer was lost finds the
    /// lease free, or with the claimant, at the next counter, and reports
    /// what its first attempt did.
    pub async fn release(self, lease: &Lease, term: Duration) -> Result<Released> {
        let at = self.lease_at(&lease.shard_id).await?;
        for _ in 0..4 {
            let now = self.store.now();
            let expr = lease_names(Expr::new())
                .value("me", s(lease.owner.as_str()))
                .value("n", n(lease.counter))
                .value("now", n(now))
                .value("one", n(1));
            let free = self.store.update_req(
                &at,
                &expr,
                "SET #updated = :now ADD #counter :one REMOVE #owner, #expires, #holder",
                Some("#owner = :me AND #counter = :n AND attribute_not_exists(#claim_by)"),
            );
            let old = match self.store.conditional_update(free).await? {
                Ok(_) => return Ok(Released::Free),
                Err(old) => old,
            };
            let state = old.as_ref().map(ShardState::from_item).transpose()?;
            let Some(state) = state else {
                return Err(lost(&lease.shard_id, lease, None));
            };
            if state.owner.is_none() && state.counter == lease.counter + 1 {
                // This release's own write, applied once already.
                return Ok(Released::Free);
            }
            if state.owner.as_ref() != Some(&lease.owner) || state.counter != lease.counter {
                return Err(lost(&lease.shard_id, lease, old.as_ref()));
            }
            let Some(claim) = state.claim else { continue };
            let expr = expr
                .value("by", s(claim.by.as_str()))
                .value("until", n(now + duration_millis(term)));
            // The hand-off and its note to the claimant, in one transaction.
            let hand_off = |named| -> Result<Vec<TransactWriteItem>> {
                Ok(vec![
                    self.store.tx_update(
                        &at,
                        &expr,
                        "SET #owner = :by, #expires = :until, #updated = :now ADD #counter :one REMOVE #claim_by, #claim_at, #holder",
                        Some("#owner = :me AND #counter = :n AND #claim_by = :by"),
                    )?,
                    self.store
                        .consumers()
                        .given_part(&claim.by, &lease.shard_id, named)?,
                ])
            };
            let mut outcome = self.store.transact(hand_off(true)?).await?;
            if matches!(&outcome, Err(codes) if only_the_note_failed(codes, 2)) {
                outcome = self.store.transact(hand_off(false)?).await?;
            }
            if outcome.is_err() {
                let now = self.store.get_item(&at).await?;
                let now = now.as_ref().map(ShardState::from_item).transpose()?;
                let Some(now) = now else { continue };
                // A retry whose first answer was lost finds its own write.
                let handed =
                    now.owner.as_ref() == Some(&claim.by) && now.counter == lease.counter + 1;
                let still_ours = now.owner.as_ref() == Some(&lease.owner)
                    && now.counter == lease.counter
                    && now.claim.as_ref().map(|c| &c.by) == Some(&claim.by);
                if still_ours {
                    // The claimant is no longer registered: the shard is
                    // freed, its claim with it.
                    let free = self.store.update_req(
                        &at,
                        &expr,
                        CLEAR_OWNER,
                        Some("#owner = :me AND #counter = :n AND #claim_by = :by"),
                    );
                    if self.store.conditional_update(free).await?.is_ok() {
                        return Ok(Released::Free);
                    }
                }
                if !handed {
                    continue;
                }
            }
            tracing::debug!(shard = %lease.shard_id, from = %lease.owner, to = %claim.by, "lease handed off");
            return Ok(Released::HandedOff(claim.by));
        }
        Err(lost(&lease.shard_id, lease, None))
    }

    /// Asks `owner` for its lease on `shard` for `claimant`: one
    /// transaction marks the lease claimed and notes the shard on the
    /// owner's item, so the owner learns of it from its next heartbeat's
    /// answer, checkpoints and hands the shard over. `false` if the lease
    /// changed since `expected_counter`, is not `owner`'s, is already
    /// claimed or held by the claimant itself, or `owner` is not registered.
    pub async fn claim(
        self,
        shard: &ShardId,
        claimant: &ConsumerId,
        owner: &ConsumerId,
        expected_counter: u64,
    ) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("me", s(owner.as_str()))
            .value("n", n(expected_counter))
            .value("now", n(self.store.now()));
        let lease = self.store.tx_update(
            &self.lease_at(shard).await?,
            &expr,
            "SET #claim_by = :by, #claim_at = :now, #updated = :now",
            Some("#counter = :n AND #owner = :me AND #owner <> :by AND attribute_not_exists(#claim_by)"),
        )?;
        let note = Expr::new()
            .names(&[attr::CLAIMED])
            .value("shard", AttributeValue::Ss(vec![shard.to_string()]));
        let note = self.store.tx_update(
            &self.store.home(consumer_sk(owner)),
            &note,
            "ADD #claimed :shard",
            Some("attribute_exists(pk)"),
        )?;
        Ok(self.store.transact(vec![lease, note]).await?.is_ok())
    }

    /// Withdraws `claimant`'s claim on the shard (the claimant died, or the
    /// plan changed); `false` if it holds no claim there.
    pub async fn cancel_claim(self, shard: &ShardId, claimant: &ConsumerId) -> Result<bool> {
        let expr = lease_names(Expr::new())
            .value("by", s(claimant.as_str()))
            .value("now", n(self.store.now()));
        let req = self.store.update_req(
            &self.lease_at(shard).await?,
            &expr,
            "SET #updated = :now REMOVE #claim_by, #claim_at",
            Some("#claim_by = :by"),
        );
        Ok(self.store.conditional_update(req).await?.is_ok())
    }
}
