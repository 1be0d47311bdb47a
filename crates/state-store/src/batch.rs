//! Progress of event-source-mapped batches: one item per batch, keyed by
//! the consumer (the function the mapping invokes), the stream, where the
//! batch is (its shard, or its first record's event id where the event
//! names no shard) and its first record, in a sort-key family of its own
//! (never a lease item).
//!
//! Lambda retries a batch from the same first record (after a timeout, a
//! crash, or as the first half of a bisection), but a batch that starts at
//! the same record may hold other records than the one before it (the
//! parallelization factor, the batch size or the filter changed between
//! the attempts). So the progress says which records it covers: digests of
//! prefixes of the batch that stored it, each with its length. A batch
//! skips the longest prefix of its own whose digest is stored, and nothing
//! else; the digests themselves are computed by the processor.

use crate::checkpoint::{checkpoint_expr, stale_from, CheckpointOutcome, MONOTONIC};
use crate::effects::{commit_with_effects, stale, EffectsOutcome, ItemTest, ProgressWrite};
use crate::error::{Result, StateError};
use crate::item::{n, s, Expr, RawItem};
use crate::model::stored_checkpoint;
use crate::records::RecordState;
use crate::schema::{attr, TTL};
use crate::sequence::{Checkpoint, SequenceNumber};
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use std::time::Duration;

/// Sort-key prefix of batch progress items.
pub(crate) const SK_BATCH: &str = "BATCH#";

/// The longest consumer name, stream ARN piece or event id a key takes.
const MAX_PART: usize = 256;

/// Which event-source-mapped batch: whose (the consumer), of which stream,
/// where in it, and its first record.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BatchKey {
    /// The consumer whose progress it is: by default the name of the
    /// function the mapping invokes. Two functions (or two mappings given
    /// two names) on one stream never share progress.
    pub consumer: String,
    /// The stream's ARN, as the event gives it.
    pub stream: String,
    /// The shard id (Kinesis), or `None` where the event does not name it
    /// (DynamoDB Streams).
    pub shard: Option<String>,
    /// The event id of the batch's first record, where the event names no
    /// shard: DynamoDB Streams sequence numbers are ordered only within a
    /// shard, and a table has many shards, while an event id is unique.
    pub first_event_id: Option<String>,
    /// The sequence number of the batch's first record.
    pub first: SequenceNumber,
}

impl BatchKey {
    /// The item's sort key: `BATCH#<consumer>#<stream>#<place>#<first>`,
    /// the place being the shard or the first record's event id.
    pub fn sort_key(&self) -> String {
        format!(
            "{SK_BATCH}{}#{}#{}#{}",
            self.consumer,
            stream_part(&self.stream),
            self.spread_by(),
            self.first.sortable()
        )
    }

    /// What spreads the batch's item over the buckets: its shard, or its
    /// first record's event id.
    pub(crate) fn spread_by(&self) -> &str {
        self.shard
            .as_deref()
            .or(self.first_event_id.as_deref())
            .unwrap_or("")
    }

    /// Checks that every part can go into a key: a consumer, stream ARN,
    /// shard or event id that is empty, holds `#` or a control character,
    /// or is over 256 bytes (a stream ARN: keyed by its digest instead) is a
    /// [`StateError::Validation`] naming it.
    pub fn validate(&self) -> Result<()> {
        key_part("consumer", &self.consumer)?;
        stream_key_part(&self.stream)?;
        match (&self.shard, &self.first_event_id) {
            (Some(shard), _) => key_part("shard", shard),
            (None, Some(id)) => key_part("event id", id),
            (None, None) => Err(StateError::validation(
                "batch key",
                "names neither a shard nor its first record's event id",
            )),
        }
    }
}

/// Checks one part of an event-source-mapped key: not empty, no `#` (the
/// separator), no control characters, at most 256 bytes.
pub(crate) fn key_part(field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(StateError::validation(field, "must not be empty"));
    }
    if value.len() > MAX_PART {
        return Err(StateError::validation(
            field,
            format!("is {} bytes long; at most {MAX_PART}", value.len()),
        ));
    }
    if value.chars().any(|c| c == '#' || c.is_control()) {
        return Err(StateError::validation(
            field,
            format!("{value:?} holds '#' or a control character"),
        ));
    }
    Ok(())
}

/// A stream ARN as a key holds it: as it is, or, over 256 bytes (a
/// DynamoDB stream's ARN holds its table's name, up to 255 characters),
/// `sha256:` and the hex digest of it.
pub(crate) fn stream_part(stream: &str) -> std::borrow::Cow<'_, str> {
    use sha2::{Digest, Sha256};
    if stream.len() <= MAX_PART {
        return stream.into();
    }
    let digest = Sha256::digest(stream.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}").into()
}

/// Checks a stream ARN for a key as [`key_part`] does, any length allowed
/// (see [`stream_part`]).
pub(crate) fn stream_key_part(stream: &str) -> Result<()> {
    key_part("stream ARN", &stream_part(stream))?;
    if stream.chars().any(|c| c == '#' || c.is_control()) {
        return Err(StateError::validation(
            "stream ARN",
            format!("{stream:?} holds '#' or a control character"),
        ));
    }
    Ok(())
}

/// A digest of a prefix of a batch: its first `records` user records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefixDigest {
    /// How many user records the prefix holds.
    pub records: u32,
    /// Their digest.
    pub digest: [u8; 16],
}

/// What a batch completed, as stored: every record of the batch that
/// stored it up to `checkpoint` was handled or parked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchProgress {
    /// The last record done.
    pub checkpoint: Checkpoint,
    /// Digests of prefixes of the batch that stored it, each within the
    /// records done, shortest first.
    pub prefixes: Vec<PrefixDigest>,
    /// The digest of the whole batch that stored it: a batch of the same
    /// contents never moves the progress backwards, one of other contents
    /// replaces it.
    pub content: [u8; 16],
    /// How the delivery that wrote it last ran (`None`: not known, an item
    /// written without it).
    pub run: Option<RunMark>,
    /// Records done after the checkpoint: run (or parked) past a failure,
    /// while the checkpoint stays before it. A record is the same record
    /// wherever a batch holds it (its sequence number is unique in its
    /// shard), so any batch of the consumer skips these.
    pub done_after: Vec<(SequenceNumber, u64)>,
}

/// The most records [`BatchProgress::done_after`] keeps (about 64 bytes
/// each: well inside an item's 400 KB); those past it run again.
pub const MAX_DONE_AFTER: usize = 1_000;

/// What a batch's progress says of the delivery that wrote it last: a
/// delivery that wrote and then neither ended nor wrote again died in the
/// batch (its process ended: out of memory, an abort, a timeout), and the
/// record it had started, if it marked one, is the one it died in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunMark {
    /// The delivery: the invocation's request id.
    pub by: String,
    /// The delivery returned.
    pub ended: bool,
    /// The record it started and had not finished when it wrote (a guarded
    /// delivery marks each record before it starts it).
    pub started: Option<(SequenceNumber, u64)>,
}

impl RunMark {
    /// A mark of the delivery `by`, not ended, no record started.
    pub fn of(by: impl Into<String>) -> Self {
        RunMark {
            by: by.into(),
            ended: false,
            started: None,
        }
    }
}

impl BatchProgress {
    /// Progress up to `checkpoint`, described by `prefixes`, of a batch
    /// whose whole digest is `content`.
    pub fn new(checkpoint: Checkpoint, prefixes: Vec<PrefixDigest>, content: [u8; 16]) -> Self {
        BatchProgress {
            checkpoint,
            prefixes,
            content,
            run: None,
            done_after: Vec::new(),
        }
    }

    /// The same progress, with `done` done after its checkpoint (at most
    /// [`MAX_DONE_AFTER`] of them are kept).
    pub fn with_done_after(
        mut self,
        done: impl IntoIterator<Item = (SequenceNumber, u64)>,
    ) -> Self {
        self.done_after = done.into_iter().take(MAX_DONE_AFTER).collect();
        self
    }

    /// The same progress, written by the delivery `run` says.
    pub fn with_run(mut self, run: RunMark) -> Self {
        self.run = Some(run);
        self
    }
}

/// One digest entry's size in the stored attribute: the length (4 bytes,
/// big-endian), then the digest.
const ENTRY: usize = 4 + 16;

fn encode_prefixes(prefixes: &[PrefixDigest]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(prefixes.len() * ENTRY);
    for p in prefixes {
        bytes.extend_from_slice(&p.records.to_be_bytes());
        bytes.extend_from_slice(&p.digest);
    }
    bytes
}

fn decode_prefixes(bytes: &[u8]) -> Result<Vec<PrefixDigest>> {
    if !bytes.len().is_multiple_of(ENTRY) {
        return Err(StateError::validation(
            "prefixes",
            format!("{} bytes is not a whole number of entries", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(ENTRY)
        .map(|entry| PrefixDigest {
            records: u32::from_be_bytes(entry[..4].try_into().expect("4 bytes")),
            digest: entry[4..].try_into().expect("16 bytes"),
        })
        .collect())
}

/// The records a progress item says are done after its checkpoint (an
/// entry that does not read is left out: its record runs again).
fn done_after(item: &crate::item::RawItem) -> Vec<(SequenceNumber, u64)> {
    let Some(AttributeValue::Ss(entries)) = item.get(attr::DONE_AFTER) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let (sequence, sub) = entry.split_once('/')?;
            Some((SequenceNumber::new(sequence).ok()?, sub.parse().ok()?))
        })
        .collect()
}

/// The run mark of a progress item, if it has one.
fn run_mark(item: &crate::item::RawItem) -> Result<Option<RunMark>> {
    let text = |name: &str| match item.get(name) {
        Some(AttributeValue::S(v)) => Some(v.clone()),
        _ => None,
    };
    let Some(by) = text(attr::RUN_BY) else {
        return Ok(None);
    };
    let ended = matches!(item.get(attr::RUN_ENDED), Some(AttributeValue::Bool(true)));
    let started = match text(attr::RUN_STARTED) {
        Some(sequence) => {
            let sub = crate::item::ItemReader::new(item).u64_or(attr::RUN_STARTED_SUB, 0)?;
            Some((SequenceNumber::new(&sequence)?, sub))
        }
        None => None,
    };
    Ok(Some(RunMark { by, ended, started }))
}

fn binary(item: &crate::item::RawItem, name: &str) -> Option<Vec<u8>> {
    match item.get(name) {
        Some(AttributeValue::B(b)) => Some(b.as_ref().to_vec()),
        _ => None,
    }
}

/// The progress a stored item holds (`None`: no checkpoint, so it covers
/// nothing).
pub(crate) fn progress_from(item: &crate::item::RawItem) -> Result<Option<BatchProgress>> {
    let Some(checkpoint) = stored_checkpoint(item)? else {
        return Ok(None);
    };
    let prefixes = match binary(item, attr::PREFIXES) {
        Some(bytes) => decode_prefixes(&bytes)?,
        None => Vec::new(),
    };
    let content = binary(item, attr::CONTENT)
        .and_then(|c| <[u8; 16]>::try_from(c.as_slice()).ok())
        .unwrap_or_default();
    Ok(Some(BatchProgress {
        checkpoint,
        prefixes,
        content,
        run: run_mark(item)?,
        done_after: done_after(item),
    }))
}

impl RecordState<'_> {
    /// The progress stored for `batch`, if any. An item stored before
    /// progress carried digests reads with none (it covers nothing).
    pub async fn batch_progress(self, batch: &BatchKey) -> Result<Option<BatchProgress>> {
        batch.validate()?;
        let at = self
            .store
            .spread(batch.spread_by(), batch.sort_key())
            .await?;
        let Some(item) = self.store.get_item(&at).await? else {
            return Ok(None);
        };
        progress_from(&item)
    }

    /// Marks, on the progress of `batch` stored by a batch whose digest is
    /// `content`, how the delivery `by` runs: the record it starts now
    /// (`started`), or none started (the one marked before is done), and
    /// whether it ended. No checkpoint moves. `false` if no progress of
    /// that content is stored (nothing written).
    pub async fn mark_run(
        self,
        batch: &BatchKey,
        content: [u8; 16],
        by: &str,
        started: Option<(&SequenceNumber, u64)>,
        ended: bool,
    ) -> Result<bool> {
        batch.validate()?;
        let mut expr = Expr::new()
            .names(&[
                attr::CONTENT,
                attr::RUN_BY,
                attr::RUN_ENDED,
                attr::RUN_STARTED,
                attr::RUN_STARTED_SUB,
            ])
            .value("content", AttributeValue::B(Blob::new(content)))
            .value("by", s(by))
            .value("ended", AttributeValue::Bool(ended));
        let update = match started {
            Some((sequence, sub)) => {
                expr = expr
                    .value("started", s(sequence.as_str()))
                    .value("started_sub", n(sub));
                "SET #run_by = :by, #run_ended = :ended, #run_started = :started, \
                 #run_started_sub = :started_sub"
            }
            None => "SET #run_by = :by, #run_ended = :ended REMOVE #run_started, #run_started_sub",
        };
        let at = self
            .store
            .spread(batch.spread_by(), batch.sort_key())
            .await?;
        let req = self
            .store
            .update_req(&at, &expr, update, Some("#content = :content"));
        Ok(self.store.conditional_update(req).await?.is_ok())
    }

    /// Stores the progress of `batch`: one UpdateItem of one small item. A
    /// batch of the same contents never moves it backwards (a late write
    /// of an earlier attempt is [`CheckpointOutcome::Stale`]); a batch of
    /// other contents replaces it. The item expires by TTL after `ttl`: a
    /// retry later than that repeats the batch's records, never skips one.
    pub async fn store_batch_progress(
        self,
        batch: &BatchKey,
        progress: &BatchProgress,
        ttl: Duration,
    ) -> Result<CheckpointOutcome> {
        let write = self.progress_write(batch, progress, ttl, MONOTONIC).await?;
        let req = self.store.update_req(
            &write.at,
            &write.expr,
            &write.update,
            Some(&write.condition),
        );
        match self.store.conditional_update(req).await? {
            Ok(_) => Ok(CheckpointOutcome::Stored),
            Err(old) => stale_from(old.as_ref()),
        }
    }

    /// Stores the progress of `batch` as [`RecordState::store_batch_progress`]
    /// does, and `effects` with it, in one transaction: both or neither.
    /// Only over the progress this delivery read or wrote last, `expected`
    /// (its checkpoint and the digest of the batch that stored it; `None`:
    /// none stored): progress another delivery moved since is
    /// [`StateError::ProgressMoved`], and nothing is written. The same
    /// write found stored already (an answer lost) is
    /// [`EffectsOutcome::Stale`].
    pub async fn store_batch_progress_with(
        self,
        batch: &BatchKey,
        progress: &BatchProgress,
        ttl: Duration,
        effects: Vec<TransactWriteItem>,
        expected: Option<(&Checkpoint, [u8; 16])>,
    ) -> Result<EffectsOutcome> {
        let mut write = self.progress_write(batch, progress, ttl, "").await?;
        write.condition = match expected {
            None => "attribute_not_exists(#cp_ord)".to_owned(),
            Some((cp, content)) => {
                write.expr = std::mem::take(&mut write.expr)
                    .value("prev_ord", s(cp.order_key()))
                    .value("prev_content", AttributeValue::B(Blob::new(content)));
                "#cp_ord = :prev_ord AND #content = :prev_content".to_owned()
            }
        };
        let expected = expected.map(|(cp, content)| (cp.clone(), content));
        let is = |old: Option<&RawItem>, want: Option<(&Checkpoint, &[u8; 16])>| -> Result<bool> {
            let stored = old.map(progress_from).transpose()?.flatten();
            Ok(match (stored, want) {
                (None, None) => true,
                (Some(p), Some((cp, content))) => p.checkpoint == *cp && p.content == *content,
                _ => false,
            })
        };
        write.holds = Box::new(move |old| is(old, expected.as_ref().map(|(c, d)| (c, d))));
        let (ours, key) = (
            (progress.checkpoint.clone(), progress.content),
            batch.sort_key(),
        );
        let judge = |old: Option<&RawItem>| {
            if is(old, Some((&ours.0, &ours.1)))? {
                stale(old)
            } else {
                Err(StateError::ProgressMoved { key: key.clone() })
            }
        };
        commit_with_effects(self.store, write, effects, judge).await
    }

    /// The write of a batch's progress, its condition ending in `forward`
    /// (how the stored checkpoint may move, for a batch of the same
    /// contents).
    async fn progress_write(
        self,
        batch: &BatchKey,
        progress: &BatchProgress,
        ttl: Duration,
        forward: &str,
    ) -> Result<ProgressWrite> {
        batch.validate()?;
        let (expr, update) = checkpoint_expr(&progress.checkpoint, None, self.store.now());
        let expr = expr
            .names(&[attr::SHARD, attr::PREFIXES, attr::CONTENT, TTL])
            .value("shard", s(batch.shard.as_deref().unwrap_or("")))
            .value(
                "prefixes",
                AttributeValue::B(Blob::new(encode_prefixes(&progress.prefixes))),
            )
            .value("content", AttributeValue::B(Blob::new(progress.content)))
            .value("ttl", n(self.store.now() / 1000 + ttl.as_secs() as i64));
        let mut expr = expr;
        let mut update = format!(
            "{update}, #shard = :shard, #prefixes = :prefixes, #content = :content, #expires_ttl = :ttl"
        );
        // A commit tells who wrote it; the record a guarded delivery had
        // started is done once a commit passes it.
        if let Some(run) = &progress.run {
            expr = expr
                .names(&[
                    attr::RUN_BY,
                    attr::RUN_ENDED,
                    attr::RUN_STARTED,
                    attr::RUN_STARTED_SUB,
                ])
                .value("by", s(&run.by))
                .value("ended", AttributeValue::Bool(run.ended));
            update.push_str(", #run_by = :by, #run_ended = :ended");
            if let Some((sequence, sub)) = &run.started {
                expr = expr
                    .value("started", s(sequence.as_str()))
                    .value("started_sub", n(*sub));
                update.push_str(", #run_started = :started, #run_started_sub = :started_sub");
            }
        }
        if !progress.done_after.is_empty() {
            let done = progress
                .done_after
                .iter()
                .map(|(sequence, sub)| format!("{sequence}/{sub}"))
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            expr = expr
                .names(&[attr::DONE_AFTER])
                .value("done_after", AttributeValue::Ss(done));
            update.push_str(", #done_after = :done_after");
        }
        let condition =
            format!("attribute_not_exists(#content) OR #content <> :content OR {forward}");
        let holds: ItemTest = Box::new(|_| Ok(true));
        let at = self
            .store
            .spread_new(batch.spread_by(), batch.sort_key())
            .await?;
        if progress.run.as_ref().is_some_and(|r| r.started.is_none()) {
            update.push_str(" REMOVE #run_started, #run_started_sub");
        }
        Ok(ProgressWrite {
            at,
            expr,
            update,
            condition,
            holds,
        })
    }
}

#[cfg(test)]
mod tests;
