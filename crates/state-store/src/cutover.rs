//! Moving a consumer between an event source mapping and the worker fleet,
//! as the state table sees it:
//!
//! - what a mapping's consumer completed in a shard: the furthest progress
//!   its batches stored there (each batch's item: `BATCH#<consumer>#<stream>#<shard>#<first>`);
//! - a floor on that consumer's shard (`BATCH#<consumer>#<stream>#<shard>#FLOOR`):
//!   records at or before it are done, so batches of a mapping created over
//!   records the fleet processed skip them. A floor is progress too.

use crate::batch::{key_part, stream_key_part, stream_part, SK_BATCH};
use crate::checkpoint::checkpoint_expr;
use crate::clock::EpochMillis;
use crate::error::Result;
use crate::item::{n, ItemReader};
use crate::model::stored_checkpoint;
use crate::records::RecordState;
use crate::schema::{attr, TTL};
use crate::sequence::Checkpoint;
use std::time::Duration;

/// The last part of a floor's sort key (after the shard; a batch's is its
/// first record's sequence number, digits only).
const FLOOR: &str = "FLOOR";

/// What a mapping's consumer completed in one shard, from the progress its
/// batches stored (not yet expired) and its floor.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShardProgress {
    /// The furthest record done, of the progress counted.
    pub furthest: Option<Checkpoint>,
    /// Progress items stored for the shard.
    pub stored: usize,
    /// Of those, the ones stored at or after the time asked for.
    pub counted: usize,
}

fn key_prefix(consumer: &str, stream: &str, shard: &str) -> Result<String> {
    key_part("consumer", consumer)?;
    stream_key_part(stream)?;
    key_part("shard", shard)?;
    let stream = stream_part(stream);
    Ok(format!("{SK_BATCH}{consumer}#{stream}#{shard}#"))
}

/// The later of two checkpoints, as positions in one shard (after a
/// record, by sequence and sub-sequence; `SHARD_END` last).
fn further(a: Option<Checkpoint>, b: Checkpoint) -> Option<Checkpoint> {
    let rank = |c: &Checkpoint| match c {
        Checkpoint::ShardEnd => (2, None),
        Checkpoint::After {
            sequence,
            sub_sequence,
        } => (1, Some((sequence.clone(), *sub_sequence))),
        _ => (0, None),
    };
    match a {
        Some(a) if rank(&a) >= rank(&b) => Some(a),
        _ => Some(b),
    }
}

impl RecordState<'_> {
    /// What `consumer` (a mapping's, see `ProcessingOptions::consumer`)
    /// completed in `shard` of `stream` (its ARN): the furthest progress its
    /// batches and floor stored there, counting only what was stored at or
    /// after `since`. One Query of the shard's bucket.
    pub async fn shard_progress(
        self,
        consumer: &str,
        stream: &str,
        shard: &str,
        since: Option<EpochMillis>,
    ) -> Result<ShardProgress> {
        let prefix = key_prefix(consumer, stream, shard)?;
        let at = self.store.spread(shard, prefix.clone()).await?;
        let mut progress = ShardProgress::default();
        for item in self.store.query_key(&at.pk, &prefix).await? {
            let Some(cp) = stored_checkpoint(&item)? else {
                continue;
            };
            progress.stored += 1;
            let updated = ItemReader::new(&item).i64_or(attr::UPDATED, 0)?;
            if since.is_some_and(|t| updated < t) {
                continue;
            }
            progress.counted += 1;
            progress.furthest = further(progress.furthest.take(), cp);
        }
        Ok(progress)
    }

    /// The floor set on `consumer`'s `shard` of `stream`, if any.
    pub async fn shard_floor(
        self,
        consumer: &str,
        stream: &str,
        shard: &str,
    ) -> Result<Option<Checkpoint>> {
        let sk = key_prefix(consumer, stream, shard)? + FLOOR;
        let at = self.store.spread(shard, sk).await?;
        match self.store.get_item(&at).await? {
            Some(item) => stored_checkpoint(&item),
            None => Ok(None),
        }
    }

    /// Sets the floor of `consumer`'s `shard` of `stream` to `floor` (the
    /// records at or before it are done), expiring after `ttl`.
    pub async fn set_shard_floor(
        self,
        consumer: &str,
        stream: &str,
        shard: &str,
        floor: &Checkpoint,
        ttl: Duration,
    ) -> Result<()> {
        let sk = key_prefix(consumer, stream, shard)? + FLOOR;
        let at = self.store.spread_new(shard, sk).await?;
        let (expr, update) = checkpoint_expr(floor, None, self.store.now());
        let expr = expr
            .names(&[attr::SHARD, TTL])
            .value("shard", crate::item::s(shard))
            .value("ttl", n(self.store.now() / 1000 + ttl.as_secs() as i64));
        let update = format!("{update}, #shard = :shard, #expires_ttl = :ttl");
        let req = self.store.update_req(&at, &expr, &update, None);
        self.store.conditional_update(req).await?.ok();
        Ok(())
    }
}
