//! Per-record state for event-source-mapped processing: attempts of failing
//! records, and parked (poison) records set aside so a shard can move on.

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
pub const SK_ATTEMPTS: &str = "RECORD#";
/// Sort-key prefix of parked records.
pub const SK_PARKED: &str = "PARKED#";

/// Which user record: shard, sequence number, sub-sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordKey {
    /// The shard.
    pub shard_id: ShardId,
    /// The (aggregated) record's sequence number.
    pub sequence: SequenceNumber,
    /// The user record's position in its aggregate (0 if not aggregated).
    pub sub_sequence: u64,
}

impl RecordKey {
    fn suffix(&self) -> String {
        format!(
            "{}#{}#{}",
            self.shard_id,
            self.sequence.sortable(),
            self.sub_sequence
        )
    }
}

/// A poison record set aside after too many failed attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedRecord {
    /// Which record.
    pub key: RecordKey,
    /// Its partition key (or item key, for DynamoDB Streams).
    pub partition_key: String,
    /// Its payload.
    pub data: Vec<u8>,
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

impl StateStore {
    /// Counts one more failed attempt of a record and returns the count.
    /// The counter expires by TTL after `ttl`.
    pub async fn record_attempt(&self, key: &RecordKey, ttl: Duration) -> Result<u32> {
        let expr = Expr::new()
            .names(&[attr::ATTEMPTS, TTL])
            .value("one", n(1))
            .value("ttl", n(ttl_at(self.now(), ttl)));
        let req = self.update_req(
            &format!("{SK_ATTEMPTS}{}", key.suffix()),
            &expr,
            "SET #expires_ttl = :ttl ADD #attempts :one",
            None,
        );
        let out = self.call_plain("UpdateItem", || req.clone().send()).await?;
        let item = out.attributes.unwrap_or_default();
        Ok(ItemReader::new(&item).u64_or(attr::ATTEMPTS, 1)? as u32)
    }

    /// Stores a parked record (kept for `ttl`).
    pub async fn park_record(&self, record: &ParkedRecord, ttl: Duration) -> Result<()> {
        let now = self.now();
        let expr = Expr::new()
            .names(&[
                attr::SHARD,
                attr::SEQ,
                attr::SUB,
                attr::PARTITION_KEY,
                attr::DATA,
                attr::ERROR,
                attr::ATTEMPTS,
                attr::PARKED,
                TTL,
            ])
            .value("shard", s(record.key.shard_id.as_str()))
            .value("seq", s(record.key.sequence.as_str()))
            .value("sub", n(record.key.sub_sequence))
            .value("pk", s(&record.partition_key))
            .value("data", AttributeValue::B(Blob::new(record.data.clone())))
            .value("error", s(&record.error))
            .value("attempts", n(record.attempts))
            .value("now", n(now))
            .value("ttl", n(ttl_at(now, ttl)));
        let req = self.update_req(
            &format!("{SK_PARKED}{}", record.key.suffix()),
            &expr,
            "SET #shard = :shard, #seq = :seq, #sub = :sub, #partition_key = :pk, #data = :data, \
             #error = :error, #attempts = :attempts, #parked = :now, #expires_ttl = :ttl",
            None,
        );
        self.call_plain("UpdateItem", || req.clone().send()).await?;
        Ok(())
    }

    /// Every parked record of the group, oldest sequence first per shard.
    pub async fn list_parked(&self) -> Result<Vec<ParkedRecord>> {
        self.query_prefix(SK_PARKED)
            .await?
            .iter()
            .map(parked_from)
            .collect()
    }
}

fn parked_from(item: &RawItem) -> Result<ParkedRecord> {
    let r = ItemReader::new(item);
    let data = match item.get(attr::DATA) {
        Some(AttributeValue::B(b)) => b.as_ref().to_vec(),
        _ => Vec::new(),
    };
    Ok(ParkedRecord {
        key: RecordKey {
            shard_id: r.parse(attr::SHARD, ShardId::new(r.s(attr::SHARD)?))?,
            sequence: r.parse(attr::SEQ, SequenceNumber::new(r.s(attr::SEQ)?))?,
            sub_sequence: r.u64_or(attr::SUB, 0)?,
        },
        partition_key: r.opt_s(attr::PARTITION_KEY)?.unwrap_or_default().to_owned(),
        data,
        error: r.opt_s(attr::ERROR)?.unwrap_or_default().to_owned(),
        attempts: r.u64_or(attr::ATTEMPTS, 0)? as u32,
        parked_at: r.i64_or(attr::PARKED, 0)?,
    })
}
