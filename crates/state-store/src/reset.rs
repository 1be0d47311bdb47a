//! An operator's reset: moving a shard's checkpoint anywhere, backwards
//! included (the only write that may), guarded against racing the holder.

use crate::checkpoint::checkpoint_expr;
use crate::checkpoint::Checkpoints;
use crate::consumer::Revocation;
use crate::error::Result;
use crate::item::n;
use crate::model::ShardState;
use crate::schema::{attr, ShardScope};
use crate::sequence::Checkpoint;

impl Checkpoints<'_> {
    /// Sets the checkpoint of `seen.shard_id` in `scope` to `to`, if the shard
    /// is still as read in `seen`, and moves its lease counter on.
    ///
    /// Leased scope: the shard's counter must still be the one seen (the
    /// caller decided from what it read that no live lease is held, see
    /// `plan_reset`: the moved counter fences an owner that was not seen).
    /// With `evict` the lease ends too (owner, expiry and claim removed), so the holder learns
    /// `LeaseLost` at its next write instead of writing its old position
    /// over the reset. Standalone scopes have no lease: the item must not
    /// have been written since it was read (`updated` unchanged).
    /// `false` if the condition failed (nothing written).
    pub async fn reset(
        self,
        scope: &ShardScope,
        seen: &ShardState,
        to: &Checkpoint,
        evict: bool,
    ) -> Result<bool> {
        let (expr, set) = checkpoint_expr(to, None, self.store.now());
        let expr = expr
            .names(&[
                attr::CP_ARRIVAL,
                attr::COUNTER,
                attr::OWNER,
                attr::EXPIRES,
                attr::CLAIM_BY,
                attr::CLAIM_AT,
                attr::HOLDER,
            ])
            .value("one", n(1))
            .value("n", n(seen.counter))
            .value("seen_updated", n(seen.updated));
        let mut update = format!("{set} REMOVE #cp_arrival");
        let condition = match scope {
            ShardScope::Group => {
                // Only a shard that has state: a reset never creates an item.
                let counter = if seen.counter == 0 {
                    "attribute_exists(pk) AND (attribute_not_exists(#counter) OR #counter = :n)"
                } else {
                    "attribute_exists(pk) AND #counter = :n"
                };
                if evict {
                    update.push_str(", #owner, #expires, #claim_by, #claim_at, #holder");
                }
                counter.to_owned()
            }
            ShardScope::Consumer(_) | ShardScope::Efo(_) => "#updated = :seen_updated".to_owned(),
        };
        update.push_str(" ADD #counter :one");
        let req = self.store.update_req(
            &self.store.shard_at(scope, &seen.shard_id).await?,
            &expr,
            &update,
            Some(&condition),
        );
        let applied = self.store.conditional_update(req).await?.is_ok();
        if applied {
            tracing::warn!(shard = %seen.shard_id, checkpoint = %to, evict, "checkpoint reset by an operator");
            if let (true, ShardScope::Group, Some(owner)) = (evict, scope, &seen.owner) {
                // The holder learns of it at its next heartbeat (else at
                // its next checkpoint, which the moved counter refuses).
                let revoked = Revocation {
                    shard_id: seen.shard_id.clone(),
                    counter: seen.counter,
                };
                self.store.consumers().note_revoked(owner, &revoked).await?;
            }
        }
        Ok(applied)
    }
}
