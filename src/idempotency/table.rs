//! Where idempotency entries live, and their reads and writes.
//!
//! - An entry is one item: its key the namespace and a SHA-256 of the
//!   idempotency key (`<namespace>#IDEM#<hex>`), under the sort key `IDEM`
//!   when the table has one.
//! - Its attributes: `status` (`INPROGRESS` or `COMPLETED`), `expires_ttl`
//!   (epoch seconds: past it the entry counts as absent, and the table's TTL
//!   deletes it), `in_progress_until` (epoch milliseconds: an in-progress
//!   claim past it may be taken over), `claim` (the claim's token),
//!   `payload_hash`, `result` (the handler's result, JSON) and `sequence`
//!   (the record that completed it).
//! - Reads are strongly consistent; `BatchGetItem` reads up to 100 a request.

use crate::idempotency::entry::{Entry, ATTR_CLAIM, ATTR_HASH, ATTR_RESULT, ATTR_SEQUENCE};
use crate::idempotency::entry::{ATTR_STATUS, ATTR_UNTIL, COMPLETED, IN_PROGRESS};
use crate::processing::parking::sha256_hex;
use crate::state::{call_aws, RetryPolicy, Service, StateError, StateStore, TTL_ATTRIBUTE};
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem};
use std::collections::HashMap;
use std::time::Duration;

/// The sort key of an entry, in a table that has one.
const SK_IDEM: &str = "IDEM";

/// The most keys one `BatchGetItem` reads (DynamoDB's limit).
const BATCH_GET_KEYS: usize = 100;

/// How often keys a `BatchGetItem` left unprocessed are asked for again.
const UNPROCESSED_ROUNDS: u32 = 3;

/// The table that keeps idempotency entries: the state table
/// ([`IdempotencyTable::in_state`]) or one of the user's
/// ([`IdempotencyTable::new`]).
#[derive(Debug, Clone)]
pub struct IdempotencyTable {
    client: aws_sdk_dynamodb::Client,
    table: String,
    namespace: String,
    partition_key: String,
    sort_key: Option<String>,
    retry: RetryPolicy,
}

/// An entry's write: a `Put` to send alone, or to stage with the record's
/// effects.
pub(crate) type EntryPut = Put;

impl IdempotencyTable {
    /// Entries in `table`, keyed by `pk` (a string) and `sk` (a string), in
    /// the namespace `namespace` (e.g. the function or the consumer: keys
    /// of two namespaces never meet). Enable TTL on `expires_ttl` so expired
    /// entries go; they count as absent from their expiry either way.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table: impl Into<String>,
        namespace: impl Into<String>,
    ) -> Self {
        IdempotencyTable {
            client,
            table: table.into(),
            namespace: namespace.into(),
            partition_key: "pk".to_owned(),
            sort_key: Some("sk".to_owned()),
            retry: RetryPolicy::default(),
        }
    }

    /// Entries in the state table of `store`, in the namespace of its group
    /// and stream (`<group>#<stream>`), with its retries.
    pub fn in_state(store: &StateStore) -> Self {
        let config = store.config();
        IdempotencyTable {
            retry: config.retry,
            ..IdempotencyTable::new(
                store.client().clone(),
                config.table.clone(),
                store.layout().partition_key(),
            )
        }
    }

    /// The table's key attributes: a string partition key and, if any, a
    /// string sort key.
    pub fn key_attributes(mut self, partition_key: &str, sort_key: Option<&str>) -> Self {
        self.partition_key = partition_key.to_owned();
        self.sort_key = sort_key.map(str::to_owned);
        self
    }

    /// Retries of throttled and failed-in-passing requests.
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The entry key of idempotency key `key`.
    pub(crate) fn entry_key(&self, key: &str) -> String {
        format!("{}#IDEM#{}", self.namespace, sha256_hex(key.as_bytes()))
    }

    fn key_of(&self, entry_key: &str) -> HashMap<String, AttributeValue> {
        let mut key = HashMap::from([(
            self.partition_key.clone(),
            AttributeValue::S(entry_key.to_owned()),
        )]);
        if let Some(sk) = &self.sort_key {
            key.insert(sk.clone(), AttributeValue::S(SK_IDEM.to_owned()));
        }
        key
    }

    /// The entries of `entry_keys` as stored now (absent ones too), read in
    /// `BatchGetItem`s; keys still unread after DynamoDB's unprocessed
    /// rounds are left out (the caller reads them alone).
    pub(crate) async fn read_many(
        &self,
        entry_keys: &[String],
        now_ms: u64,
    ) -> Result<HashMap<String, Entry>, StateError> {
        let mut found = HashMap::new();
        for chunk in entry_keys.chunks(BATCH_GET_KEYS) {
            let mut keys: Vec<_> = chunk.iter().map(|k| self.key_of(k)).collect();
            let mut read: Vec<String> = chunk.to_vec();
            for round in 0..=UNPROCESSED_ROUNDS {
                if keys.is_empty() {
                    break;
                }
                if round > 0 {
                    tokio::time::sleep(self.retry.backoff().delay(round)).await;
                }
                let ask = KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| build_error("BatchGetItem", e))?;
                let out = call_aws(&self.retry, Service::DynamoDb, "BatchGetItem", || {
                    self.client
                        .batch_get_item()
                        .request_items(&self.table, ask.clone())
                        .send()
                })
                .await?;
                for item in out
                    .responses()
                    .and_then(|r| r.get(&self.table))
                    .into_iter()
                    .flatten()
                {
                    if let Some(AttributeValue::S(k)) = item.get(&self.partition_key) {
                        found.insert(k.clone(), Entry::of(item, now_ms));
                    }
                }
                keys = out
                    .unprocessed_keys()
                    .and_then(|u| u.get(&self.table))
                    .map(|k| k.keys().to_vec())
                    .unwrap_or_default();
                let unread: Vec<&str> = keys
                    .iter()
                    .filter_map(|k| k.get(&self.partition_key)?.as_s().ok().map(String::as_str))
                    .collect();
                // Asked for and not returned, nor left unprocessed: absent.
                for k in read.drain(..) {
                    if !unread.contains(&k.as_str()) {
                        found.entry(k).or_insert(Entry::Absent);
                    }
                }
                read = unread.into_iter().map(str::to_owned).collect();
            }
        }
        Ok(found)
    }

    /// The entry of `entry_key` as stored now.
    pub(crate) async fn read(&self, entry_key: &str, now_ms: u64) -> Result<Entry, StateError> {
        let out = call_aws(&self.retry, Service::DynamoDb, "GetItem", || {
            self.client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(self.key_of(entry_key)))
                .consistent_read(true)
                .send()
        })
        .await?;
        Ok(out.item().map_or(Entry::Absent, |i| Entry::of(i, now_ms)))
    }

    /// Claims `entry_key` in progress until `until_ms` under `token`: `true`
    /// if claimed, `false` if another holds or completed it (read it). A
    /// claim under `ours` (a token this process claimed with before) is
    /// taken over.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn claim(
        &self,
        entry_key: &str,
        token: &str,
        ours: Option<&str>,
        until_ms: u64,
        expires: Duration,
        hash: Option<&str>,
        now_ms: u64,
    ) -> Result<bool, StateError> {
        let mut put = self.entry_put(entry_key, IN_PROGRESS, expires, hash, now_ms);
        put = put
            .item(ATTR_CLAIM, AttributeValue::S(token.to_owned()))
            .item(ATTR_UNTIL, AttributeValue::N(until_ms.to_string()));
        let mut condition = FREE.to_owned();
        if let Some(ours) = ours {
            // (Only a claim: a completion under that token stays.)
            condition.push_str(" OR (#claim = :ours AND #status = :in_progress)");
            put = put
                .expression_attribute_names("#claim", ATTR_CLAIM)
                .expression_attribute_values(":ours", AttributeValue::S(ours.to_owned()));
        }
        let put = self.free_condition(put, &condition, now_ms);
        self.send(put).await
    }

    /// The completion of `entry_key` under `token`: for the claim of that
    /// token if `claimed`, else of an entry that must be free. To write
    /// alone or with the record's effects; the token stays on it, so a
    /// write whose answer was lost is told apart.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn completion(
        &self,
        entry_key: &str,
        token: &str,
        claimed: bool,
        expires: Duration,
        hash: Option<&str>,
        result: String,
        sequence: &str,
        now_ms: u64,
    ) -> EntryPut {
        let put = self
            .entry_put(entry_key, COMPLETED, expires, hash, now_ms)
            .item(ATTR_RESULT, AttributeValue::S(result))
            .item(ATTR_SEQUENCE, AttributeValue::S(sequence.to_owned()))
            .item(ATTR_CLAIM, AttributeValue::S(token.to_owned()));
        match claimed {
            true => put
                .condition_expression("#claim = :token AND #status = :in_progress")
                .expression_attribute_names("#claim", ATTR_CLAIM)
                .expression_attribute_names("#status", ATTR_STATUS)
                .expression_attribute_values(":token", AttributeValue::S(token.to_owned()))
                .expression_attribute_values(
                    ":in_progress",
                    AttributeValue::S(IN_PROGRESS.to_owned()),
                ),
            false => self.free_condition(put, FREE, now_ms),
        }
        .build()
        .expect("an entry's put has its table and item")
    }

    /// Writes `put` alone: `true` if written, `false` if its condition
    /// failed.
    pub(crate) async fn write(&self, put: EntryPut) -> Result<bool, StateError> {
        let builder = Put::builder()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(put.expression_attribute_names().cloned())
            .set_expression_attribute_values(put.expression_attribute_values().cloned());
        self.send(builder).await
    }

    /// Deletes the claim `token` of `entry_key` (a failed call's: a retry
    /// need not wait for it to run out), if it still holds it.
    pub(crate) async fn release(&self, entry_key: &str, token: &str) -> Result<(), StateError> {
        let sent = call_aws(&self.retry, Service::DynamoDb, "DeleteItem", || {
            self.client
                .delete_item()
                .table_name(&self.table)
                .set_key(Some(self.key_of(entry_key)))
                .condition_expression("#claim = :token AND #status = :in_progress")
                .expression_attribute_names("#claim", ATTR_CLAIM)
                .expression_attribute_names("#status", ATTR_STATUS)
                .expression_attribute_values(":token", AttributeValue::S(token.to_owned()))
                .expression_attribute_values(
                    ":in_progress",
                    AttributeValue::S(IN_PROGRESS.to_owned()),
                )
                .send()
        })
        .await;
        match sent {
            Err(e) if !is_condition_failure(&e) => Err(e),
            _ => Ok(()),
        }
    }

    /// `put` as a transaction's item.
    pub(crate) fn transact_item(put: EntryPut) -> TransactWriteItem {
        TransactWriteItem::builder().put(put).build()
    }

    fn entry_put(
        &self,
        entry_key: &str,
        status: &str,
        expires: Duration,
        hash: Option<&str>,
        now_ms: u64,
    ) -> aws_sdk_dynamodb::types::builders::PutBuilder {
        let expires_s = (now_ms + expires.as_millis() as u64).div_ceil(1000);
        let mut put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(self.key_of(entry_key)))
            .item(ATTR_STATUS, AttributeValue::S(status.to_owned()))
            .item(TTL_ATTRIBUTE, AttributeValue::N(expires_s.to_string()));
        if let Some(hash) = hash {
            put = put.item(ATTR_HASH, AttributeValue::S(hash.to_owned()));
        }
        put
    }

    /// `put` on condition `condition` (which names [`FREE`]'s terms).
    fn free_condition(
        &self,
        put: aws_sdk_dynamodb::types::builders::PutBuilder,
        condition: &str,
        now_ms: u64,
    ) -> aws_sdk_dynamodb::types::builders::PutBuilder {
        put.condition_expression(condition)
            .expression_attribute_names("#pk", &self.partition_key)
            .expression_attribute_names("#ttl", TTL_ATTRIBUTE)
            .expression_attribute_names("#status", ATTR_STATUS)
            .expression_attribute_names("#until", ATTR_UNTIL)
            .expression_attribute_values(":now_s", AttributeValue::N((now_ms / 1000).to_string()))
            .expression_attribute_values(":now_ms", AttributeValue::N(now_ms.to_string()))
            .expression_attribute_values(":in_progress", AttributeValue::S(IN_PROGRESS.to_owned()))
    }

    async fn send(
        &self,
        put: aws_sdk_dynamodb::types::builders::PutBuilder,
    ) -> Result<bool, StateError> {
        let put = put.build().map_err(|e| build_error("PutItem", e))?;
        let sent = call_aws(&self.retry, Service::DynamoDb, "PutItem", || {
            self.client
                .put_item()
                .table_name(put.table_name())
                .set_item(Some(put.item().clone()))
                .set_condition_expression(put.condition_expression().map(str::to_owned))
                .set_expression_attribute_names(put.expression_attribute_names().cloned())
                .set_expression_attribute_values(put.expression_attribute_values().cloned())
                .send()
        })
        .await;
        match sent {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failure(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Whether `e` is a write's condition that failed.
fn is_condition_failure(e: &StateError) -> bool {
    matches!(e, StateError::Sdk { code: Some(code), .. } if code == "ConditionalCheckFailedException")
}

/// The condition of an entry free to claim or complete: none stored, one
/// expired, or a claim whose time ran out.
const FREE: &str = "attribute_not_exists(#pk) OR #ttl < :now_s \
     OR (#status = :in_progress AND #until < :now_ms)";

fn build_error(operation: &'static str, e: impl std::fmt::Display) -> StateError {
    StateError::Sdk {
        service: Service::DynamoDb,
        operation,
        code: None,
        message: e.to_string(),
    }
}
