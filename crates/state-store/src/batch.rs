//! Checkpoints of event-source-mapped batches: one item per batch, keyed by
//! the stream, the shard and the batch's first record, in a sort-key family
//! of their own (never a lease item).
//!
//! Lambda retries a batch from the same first record (after a timeout, a
//! crash, or as the first half of a bisection) and builds each batch as a
//! contiguous run of one shard's records (with a parallelization factor
//! above 1, of the records of one concurrent batcher of the shard). So the
//! progress stored under a batch's first record covers only records that
//! batch completed, whatever runs in parallel beside it: a retry skips
//! those and nothing else.

use crate::checkpoint::{checkpoint_expr, stale_from, CheckpointOutcome, MONOTONIC};
use crate::error::{Result, StateError};
use crate::item::{n, s};
use crate::model::stored_checkpoint;
use crate::schema::{attr, TTL};
use crate::sequence::{Checkpoint, SequenceNumber};
use crate::store::StateStore;
use std::time::Duration;

/// Sort-key prefix of batch checkpoints.
pub const SK_BATCH: &str = "BATCH#";

/// Which event-source-mapped batch: its stream (the event source ARN), its
/// shard (empty when the event does not name it, as for DynamoDB Streams)
/// and its first record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchKey {
    /// The stream's ARN, as the event gives it.
    pub stream: String,
    /// The shard id, or empty.
    pub shard: String,
    /// The sequence number of the batch's first record.
    pub first: SequenceNumber,
}

impl BatchKey {
    /// The item's sort key.
    pub fn sort_key(&self) -> String {
        format!(
            "{SK_BATCH}{}#{}#{}",
            self.stream,
            self.shard,
            self.first.sortable()
        )
    }

    /// What spreads the batch's item over the buckets: its shard, or its
    /// first record's sequence number where the event names no shard.
    pub(crate) fn spread_by(&self) -> &str {
        if self.shard.is_empty() {
            self.first.as_str()
        } else {
            &self.shard
        }
    }

    fn validate(&self) -> Result<()> {
        if self.stream.is_empty() {
            return Err(StateError::validation("stream ARN", "must not be empty"));
        }
        if self.sort_key().len() > 1024 {
            return Err(StateError::validation(
                "batch key",
                "stream ARN and shard id are longer than a sort key allows",
            ));
        }
        Ok(())
    }
}

impl StateStore {
    /// The progress stored for `batch`, if any: every record of the batch up
    /// to it was completed (handled or parked) by an earlier attempt.
    pub async fn batch_checkpoint(&self, batch: &BatchKey) -> Result<Option<Checkpoint>> {
        batch.validate()?;
        let at = self.spread(batch.spread_by(), batch.sort_key()).await?;
        match self.get_item(&at).await? {
            Some(item) => stored_checkpoint(&item),
            None => Ok(None),
        }
    }

    /// Stores the progress of `batch` (monotonic: never moves it backwards;
    /// one UpdateItem of one small item). The item expires by TTL after
    /// `ttl`: a retry later than that repeats the batch's records, never
    /// skips one.
    pub async fn checkpoint_batch(
        &self,
        batch: &BatchKey,
        cp: &Checkpoint,
        ttl: Duration,
    ) -> Result<CheckpointOutcome> {
        batch.validate()?;
        let (expr, update) = checkpoint_expr(cp, None, self.now());
        let expr = expr
            .names(&[attr::SHARD, TTL])
            .value("shard", s(batch.shard.as_str()))
            .value("ttl", n(self.now() / 1000 + ttl.as_secs() as i64));
        let update = format!("{update}, #shard = :shard, #expires_ttl = :ttl");
        let at = self.spread_new(batch.spread_by(), batch.sort_key()).await?;
        let req = self.update_req(&at, &expr, &update, Some(MONOTONIC));
        match self.conditional_update(req).await? {
            Ok(_) => Ok(CheckpointOutcome::Stored),
            Err(old) => stale_from(old.as_ref()),
        }
    }
}
