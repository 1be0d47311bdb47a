//! An operator's move of a shard's position (a reset, or one shard of a
//! rewind): anywhere, backwards included (the only write that may), guarded
//! against racing the holder.

use crate::checkpoint::checkpoint_expr;
use crate::checkpoint::Checkpoints;
use crate::clock::EpochMillis;
use crate::consumer::Revocation;
use crate::error::Result;
use crate::item::{n, s};
use crate::model::ShardState;
use crate::names::ShardId;
use crate::schema::{attr, ShardScope};
use crate::sequence::Checkpoint;
use aws_sdk_dynamodb::types::AttributeValue;

/// How an operator moves one shard's position (see
/// [`Checkpoints::move_position`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PositionMove {
    /// The new checkpoint.
    pub to: Checkpoint,
    /// End the lease too (owner, expiry, claim and holder removed), and
    /// note the revocation on the owner's item, so the holder stops at its
    /// next heartbeat instead of writing its old position over the move.
    pub evict: bool,
    /// Read the shard again although it is depleted.
    pub reopen: bool,
    /// Parents (reopened by the same rewind) the shard waits for again.
    pub wait_for: Vec<ShardId>,
    /// The rewind the move belongs to, marked on the shard.
    pub rewind: Option<EpochMillis>,
    /// Where a bounded group stops reading the shard, set with the move.
    pub end: Option<Checkpoint>,
}

impl PositionMove {
    /// A move to `to`, nothing else.
    pub fn to(to: Checkpoint) -> Self {
        PositionMove {
            to,
            evict: false,
            reopen: false,
            wait_for: Vec::new(),
            rewind: None,
            end: None,
        }
    }
}

impl Checkpoints<'_> {
    /// Sets the checkpoint of `seen.shard_id` in `scope` to `to`, if the shard
    /// is still as read in `seen`, and moves its lease counter on; with
    /// `evict` the lease ends too. See [`Checkpoints::move_position`].
    pub async fn reset(
        self,
        scope: &ShardScope,
        seen: &ShardState,
        to: &Checkpoint,
        evict: bool,
    ) -> Result<bool> {
        let mv = PositionMove {
            evict,
            ..PositionMove::to(to.clone())
        };
        self.move_position(scope, seen, &mv).await
    }

    /// Moves the position of `seen.shard_id` in `scope` as `mv` says, if the
    /// shard is still as read in `seen`, and moves its lease counter on.
    ///
    /// Leased scope: the shard's counter must still be the one seen (the
    /// caller decided from what it read whether a live lease is held, see
    /// `plan_reset`: the moved counter fences an owner that was not seen).
    /// With `evict` and an owner seen, the lease stays in the owner's name
    /// and, in the same transaction, the owner's item notes the lease at the
    /// counter seen as revoked and the shard as given again: the holder
    /// stops at its next heartbeat (else at its next write, which the moved
    /// counter refuses) and the same heartbeat takes the shard up again
    /// from the moved position. No other consumer is given the shard
    /// meanwhile: its owner's session is live. An owner no longer
    /// registered processes nothing: its lease ends instead. Standalone scopes
    /// have no lease: the item must not have been written since it was read
    /// (`updated` unchanged). `false` if the condition failed (nothing
    /// written).
    pub async fn move_position(
        self,
        scope: &ShardScope,
        seen: &ShardState,
        mv: &PositionMove,
    ) -> Result<bool> {
        let now = self.store.now();
        let (expr, set) = checkpoint_expr(&mv.to, None, now);
        let mut expr = expr
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
        let mut set = set;
        if mv.reopen {
            expr = expr
                .names(&[attr::DEPLETED])
                .value("false", AttributeValue::Bool(false));
            set.push_str(", #depleted = :false");
        }
        if let Some(id) = mv.rewind {
            expr = expr.names(&[attr::REWOUND]).value("rewind", n(id));
            set.push_str(", #rewound = :rewind");
        }
        if let Some(end) = &mv.end {
            expr = expr.names(&[attr::END]).value("end", s(end.to_string()));
            set.push_str(", #end = :end");
        }
        if !mv.wait_for.is_empty() {
            expr = expr.names(&[attr::PENDING]).value(
                "wait_for",
                AttributeValue::Ss(mv.wait_for.iter().map(|p| p.as_str().to_owned()).collect()),
            );
        }
        let at = self.store.shard_at(scope, &seen.shard_id).await?;
        let condition = match scope {
            // Only a shard that has state: a move never creates an item.
            ShardScope::Group if seen.counter == 0 => {
                "attribute_exists(pk) AND (attribute_not_exists(#counter) OR #counter = :n)"
            }
            ShardScope::Group => "attribute_exists(pk) AND #counter = :n",
            ShardScope::Consumer(_) | ShardScope::Efo(_) => "#updated = :seen_updated",
        };
        // The update, with what else of the lease it removes.
        let update = |removed: &str| {
            let mut update = format!("{set} REMOVE #cp_arrival{removed} ADD #counter :one");
            if !mv.wait_for.is_empty() {
                update.push_str(", #pending :wait_for");
            }
            update
        };
        let owner = match (mv.evict, scope) {
            (true, ShardScope::Group) => seen.owner.as_ref(),
            _ => None,
        };
        let applied = match owner {
            None => {
                let removed = if mv.evict && *scope == ShardScope::Group {
                    ", #owner, #expires, #claim_by, #claim_at, #holder"
                } else {
                    ""
                };
                let req = self
                    .store
                    .update_req(&at, &expr, &update(removed), Some(condition));
                self.store.conditional_update(req).await?.is_ok()
            }
            Some(owner) => {
                let revoked = Revocation {
                    shard_id: seen.shard_id.clone(),
                    counter: seen.counter,
                };
                let parts = vec![
                    self.store.tx_update(
                        &at,
                        &expr,
                        &update(", #claim_by, #claim_at"),
                        Some(condition),
                    )?,
                    self.store.consumers().moved_part(owner, &revoked)?,
                ];
                // Applied and its answer lost, a retry would find the
                // counter moved by its own first attempt and be cancelled:
                // the token makes the retry answer as the first did.
                let token = move_token(self.store.table_name(), &at.pk, seen, mv, owner, now);
                match self.store.transact_idempotent(parts, &token).await? {
                    Ok(()) => true,
                    // The owner is not registered: nothing runs under its
                    // lease, which ends with the move.
                    Err(codes)
                        if codes.get(1).map(String::as_str) == Some("ConditionalCheckFailed")
                            && codes.first().map(String::as_str)
                                != Some("ConditionalCheckFailed") =>
                    {
                        let req = self.store.update_req(
                            &at,
                            &expr,
                            &update(", #owner, #expires, #claim_by, #claim_at, #holder"),
                            Some(condition),
                        );
                        self.store.conditional_update(req).await?.is_ok()
                    }
                    Err(_) => false,
                }
            }
        };
        if applied {
            tracing::warn!(shard = %seen.shard_id, checkpoint = %mv.to, evict = mv.evict, reopen = mv.reopen, "position moved by an operator");
        }
        Ok(applied)
    }
}

/// The client request token of a forced move: a digest of everything the
/// move's transaction is made of (where, the state seen, the move, the
/// owner told, the time written), so a retry of the same call carries the
/// same token and another move never does. 32 hexadecimal characters
/// (DynamoDB allows 1 to 36).
fn move_token(
    table: &str,
    pk: &str,
    seen: &ShardState,
    mv: &PositionMove,
    owner: &crate::names::ConsumerId,
    now: EpochMillis,
) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in [
        table.to_owned(),
        pk.to_owned(),
        seen.shard_id.to_string(),
        seen.counter.to_string(),
        seen.updated.to_string(),
        format!("{mv:?}"),
        owner.to_string(),
        now.to_string(),
    ] {
        hasher.update(part.len().to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
