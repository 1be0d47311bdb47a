//! Per-record state for event-source-mapped processing: attempts of failing
//! records, and parked (poison) records set aside so a shard can move on.

use crate::batch::{key_part, stream_key_part, stream_part};
use crate::clock::EpochMillis;
use crate::error::Result;
use crate::item::{n, s, Expr, ItemReader, RawItem};
use crate::names::ShardId;
use crate::schema::{attr, TTL};
use crate::sequence::SequenceNumber;
use crate::store::StateStore;
use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use std::time::Duration;

/// Sort-key prefix of attempt counters.
pub(crate) const SK_ATTEMPTS: &str = "RECORD#";
/// Sort-key prefix of parked records.
pub(crate) const SK_PARKED: &str = "PARKED#";

/// Which user record. A self-managed consumer's records are named by their
/// shard (its group names the stream); an event-source-mapped record by
/// its consumer (the function), its stream, and its shard or, where the
/// event names no shard (DynamoDB Streams), its event id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordKey {
    /// The consumer of an event-source-mapped record (by default the
    /// function's name), `None` for a self-managed consumer.
    pub consumer: Option<String>,
    /// The event source ARN of an event-source-mapped record (`None` for a
    /// self-managed consumer, whose group names its stream).
    pub source: Option<String>,
    /// The shard (`None` when the event does not name it, as for DynamoDB
    /// Streams).
    pub shard_id: Option<ShardId>,
    /// The record's event id, where the event names no shard: DynamoDB
    /// Streams sequence numbers are ordered only within a shard.
    pub event_id: Option<String>,
    /// The (aggregated) record's sequence number.
    pub sequence: SequenceNumber,
    /// The user record's position in its aggregate (0 if not aggregated).
    pub sub_sequence: u64,
}

impl RecordKey {
    /// The key of a self-managed consumer's record.
    pub fn in_shard(shard_id: ShardId, sequence: SequenceNumber, sub_sequence: u64) -> Self {
        RecordKey {
            consumer: None,
            source: None,
            shard_id: Some(shard_id),
            event_id: None,
            sequence,
            sub_sequence,
        }
    }

    /// What spreads the record's items over the buckets: its shard, or its
    /// event id, or (items written before event ids) its sequence number.
    pub(crate) fn spread_by(&self) -> &str {
        self.shard_id
            .as_ref()
            .map(ShardId::as_str)
            .or(self.event_id.as_deref())
            .unwrap_or(self.sequence.as_str())
    }

    /// The sort key of the record's attempt counter.
    pub(crate) fn attempts_sk(&self) -> String {
        format!("{SK_ATTEMPTS}{}", self.suffix())
    }

    /// The sort key of the record, parked.
    pub(crate) fn parked_sk(&self) -> String {
        format!("{SK_PARKED}{}", self.suffix())
    }

    fn suffix(&self) -> String {
        let place = self
            .shard_id
            .as_ref()
            .map(ShardId::as_str)
            .or(self.event_id.as_deref())
            .unwrap_or("");
        let record = format!("{}#{}", self.sequence.sortable(), self.sub_sequence);
        let source = self.source.as_deref().map(stream_part);
        match (&self.consumer, source) {
            (Some(consumer), Some(source)) => format!("{consumer}#{source}#{place}#{record}"),
            (None, Some(source)) => format!("{source}#{place}#{record}"),
            _ => format!("{place}#{record}"),
        }
    }

    /// Checks the parts that go into a key (see [`crate::BatchKey`]).
    pub(crate) fn validate(&self) -> Result<()> {
        if let Some(consumer) = &self.consumer {
            key_part("consumer", consumer)?;
        }
        if let Some(source) = &self.source {
            stream_key_part(source)?;
        }
        if let Some(id) = &self.event_id {
            key_part("event id", id)?;
        }
        Ok(())
    }
}

/// A poison record set aside after too many failed attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedRecord {
    /// Which record.
    pub key: RecordKey,
    /// Its partition key (or item key, for DynamoDB Streams).
    pub partition_key: String,
    /// Its payload, or a prefix of it when it was too large to keep (then
    /// `data_sha256` is set).
    pub data: Vec<u8>,
    /// The size of the whole payload (bytes).
    pub data_size: u64,
    /// The SHA-256 (hex) of the whole payload, when `data` is only a prefix:
    /// the record itself can be read again from the stream by its key while
    /// the stream retains it.
    pub data_sha256: Option<String>,
    /// The last error.
    pub error: String,
    /// How many attempts failed.
    pub attempts: u32,
    /// When it was parked (ms).
    pub parked_at: EpochMillis,
}

fn ttl_at(now: EpochMillis, ttl: Duration) -> i64 {
    now / 1000 + ttl.as_secs() as i64
}

/// The state event-source-mapped processing keeps per batch and per record:
/// batch progress (see the `batch` module), attempts of failing records and
/// parked records. From [`StateStore::record_state`].
#[derive(Debug, Clone, Copy)]
pub struct RecordState<'a> {
    pub(crate) store: &'a StateStore,
}

impl RecordState<'_> {
    /// Counts one more failed attempt of a record and returns the count.
    /// The counter expires by TTL after `ttl`. With `attempt` (what names
    /// this attempt: an invocation's request id), an attempt already
    /// counted is not counted again (a write sent again after its answer
    /// was lost, or a second failure reported for the record in the same
    /// attempt): the count comes back as it stands.
    pub async fn record_attempt(
        self,
        key: &RecordKey,
        ttl: Duration,
        attempt: Option<&str>,
    ) -> Result<u32> {
        key.validate()?;
        let mut expr = Expr::new()
            .names(&[attr::ATTEMPTS, TTL])
            .value("one", n(1))
            .value("ttl", n(ttl_at(self.store.now(), ttl)));
        let at = self
            .store
            .spread_new(key.spread_by(), key.attempts_sk())
            .await?;
        let item = match attempt {
            None => {
                let req = self.store.update_req(
                    &at,
                    &expr,
                    "SET #expires_ttl = :ttl ADD #attempts :one",
                    None,
                );
                let out = self
                    .store
                    .call_plain("UpdateItem", || req.clone().send())
                    .await?;
                out.attributes.unwrap_or_default()
            }
            Some(attempt) => {
                expr = expr
                    .names(&[attr::LAST_ATTEMPT])
                    .value("attempt", s(attempt));
                let req = self.store.update_req(
                    &at,
                    &expr,
                    "SET #expires_ttl = :ttl, #last_attempt = :attempt ADD #attempts :one",
                    Some("attribute_not_exists(#last_attempt) OR #last_attempt <> :attempt"),
                );
                match self.store.conditional_update(req).await? {
                    Ok(item) => item,
                    // Counted already: the item as it stands (read, where
                    // the server does not return it with the refusal).
                    Err(Some(item)) => item,
                    Err(None) => self.store.get_item(&at).await?.unwrap_or_default(),
                }
            }
        };
        Ok(ItemReader::new(&item).u64_or(attr::ATTEMPTS, 1)? as u32)
    }

    /// Stores a parked record (kept for `ttl`).
    pub async fn park(self, record: &ParkedRecord, ttl: Duration) -> Result<()> {
        record.key.validate()?;
        let now = self.store.now();
        let expr = Expr::new()
            .names(&[
                attr::CONSUMER,
                attr::SOURCE,
                attr::SHARD,
                attr::EVENT_ID,
                attr::SEQ,
                attr::SUB,
                attr::PARTITION_KEY,
                attr::DATA,
                attr::ERROR,
                attr::ATTEMPTS,
                attr::PARKED,
                attr::DATA_SIZE,
                attr::DATA_SHA256,
                TTL,
            ])
            .value("consumer", s(record.key.consumer.as_deref().unwrap_or("")))
            .value("source", s(record.key.source.as_deref().unwrap_or("")))
            .value("event_id", s(record.key.event_id.as_deref().unwrap_or("")))
            .value(
                "shard",
                s(record.key.shard_id.as_ref().map_or("", ShardId::as_str)),
            )
            .value("seq", s(record.key.sequence.as_str()))
            .value("sub", n(record.key.sub_sequence))
            .value("pk", s(&record.partition_key))
            .value("data", AttributeValue::B(Blob::new(record.data.clone())))
            .value("error", s(&record.error))
            .value("size", n(record.data_size))
            .value("sha", s(record.data_sha256.as_deref().unwrap_or("")))
            .value("attempts", n(record.attempts))
            .value("now", n(now))
            .value("ttl", n(ttl_at(now, ttl)));
        let at = self
            .store
            .spread_new(record.key.spread_by(), record.key.parked_sk())
            .await?;
        let req = self.store.update_req(
            &at,
            &expr,
            "SET #consumer = :consumer, #source = :source, #shard = :shard, #event_id = :event_id, #seq = :seq, #sub = :sub, #partition_key = :pk, #data = :data, \
             #error = :error, #attempts = :attempts, #parked = :now, #expires_ttl = :ttl, \
             #data_size = :size, #data_sha256 = :sha",
            None,
        );
        self.store
            .call_plain("UpdateItem", || req.clone().send())
            .await?;
        Ok(())
    }

    /// Removes a parked record (replayed, or dealt with); `false` if it was
    /// not parked.
    pub async fn remove_parked(self, key: &RecordKey) -> Result<bool> {
        let at = self.store.spread(key.spread_by(), key.parked_sk()).await?;
        self.store
            .delete_item(&at, Some("attribute_exists(pk)"), &Expr::new())
            .await
    }

    /// Every parked record of the group, oldest sequence first per shard.
    pub async fn list_parked(self) -> Result<Vec<ParkedRecord>> {
        self.store
            .query_buckets(SK_PARKED)
            .await?
            .iter()
            .map(parked_from)
            .collect()
    }
}

pub(crate) fn parked_from(item: &RawItem) -> Result<ParkedRecord> {
    let r = ItemReader::new(item);
    let data = match item.get(attr::DATA) {
        Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
        _ => Vec::new(),
    };
    // A text attribute written empty where the key has no such part.
    let part = |name| -> Result<Option<String>> {
        Ok(r.opt_s(name)?.filter(|v| !v.is_empty()).map(str::to_owned))
    };
    Ok(ParkedRecord {
        key: RecordKey {
            consumer: part(attr::CONSUMER)?,
            event_id: part(attr::EVENT_ID)?,
            source: part(attr::SOURCE)?,
            shard_id: r
                .opt_s(attr::SHARD)?
                .filter(|v| !v.is_empty())
                .map(|v| r.parse(attr::SHARD, ShardId::new(v)))
                .transpose()?,
            sequence: r.parse(attr::SEQ, SequenceNumber::new(r.s(attr::SEQ)?))?,
            sub_sequence: r.u64_or(attr::SUB, 0)?,
        },
        partition_key: r.opt_s(attr::PARTITION_KEY)?.unwrap_or_default().to_owned(),
        data_size: r.u64_or(attr::DATA_SIZE, data.len() as u64)?,
        data_sha256: r
            .opt_s(attr::DATA_SHA256)?
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        data,
        error: r.opt_s(attr::ERROR)?.unwrap_or_default().to_owned(),
        attempts: r.u64_or(attr::ATTEMPTS, 0)? as u32,
        parked_at: r.i64_or(attr::PARKED, 0)?,
    })
}
