//! The replica recipe (node-dynamodb-stream's "replicating small tables"):
//! take the stream's position, scan the whole table, then apply the stream
//! from that position. No change made during the scan is missed; one the
//! scan already saw is applied again, which is harmless because applying is
//! idempotent (put on insert and modify, delete on remove, by key).

use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::reader::StreamReader;
use crate::pipeline::InitialPosition;
use crate::processing::RecordError;
use crate::processing::{ChangeKind, ChangeRecord, Image};
use crate::state::{call_aws, RetryPolicy, Service};
use crate::Error;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::BTreeMap;

/// One key attribute's value (keys are strings, numbers or binary).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyValue {
    /// A string key.
    S(String),
    /// A number key, as DynamoDB writes it.
    N(String),
    /// A binary key.
    B(Vec<u8>),
}

/// An item's key: its key attributes, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemKey(pub Vec<(String, KeyValue)>);

impl ItemKey {
    /// The key of `item` (or of a stream record's keys) for the table's key
    /// attribute names; [`Error::Item`] when an attribute is missing or
    /// not a key type.
    pub fn of(item: &Image, key_names: &[String]) -> Result<ItemKey, Error> {
        Self::read(item, key_names).map_err(|reason| Error::Item { reason })
    }

    /// The key, or what is wrong with it.
    fn read(item: &Image, key_names: &[String]) -> Result<ItemKey, String> {
        let part = |name: &String| {
            let value = match item.get(name) {
                Some(AttributeValue::S(s)) => KeyValue::S(s.clone()),
                Some(AttributeValue::N(n)) => KeyValue::N(n.clone()),
                Some(AttributeValue::B(b)) => KeyValue::B(b.as_ref().to_vec()),
                Some(other) => return Err(format!("key attribute {name} is {other:?}")),
                None => return Err(format!("no key attribute {name}")),
            };
            Ok((name.clone(), value))
        };
        key_names
            .iter()
            .map(part)
            .collect::<Result<_, _>>()
            .map(ItemKey)
    }
}

/// A copy of a table in memory, keyed by the table's key attributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replica {
    key_names: Vec<String>,
    items: BTreeMap<ItemKey, Image>,
}

/// What [`build_replica`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaReport {
    /// Items the scan read.
    pub scanned: usize,
    /// Scan pages.
    pub scan_pages: usize,
    /// Stream records applied after the scan (some may repeat what the scan saw).
    pub applied: usize,
}

impl Replica {
    /// An empty replica of a table with these key attribute names.
    pub fn new(key_names: Vec<String>) -> Self {
        Replica {
            key_names,
            items: BTreeMap::new(),
        }
    }

    /// The table's key attribute names.
    pub fn key_names(&self) -> &[String] {
        &self.key_names
    }

    /// Puts an item read from the table (replacing the one with its key).
    pub fn put(&mut self, item: Image) -> Result<(), Error> {
        let key = ItemKey::read(&item, &self.key_names).map_err(|reason| Error::Item {
            reason: format!("a table item has no usable key: {reason}"),
        })?;
        self.items.insert(key, item);
        Ok(())
    }

    /// Applies one stream record: the new image is put on insert and modify,
    /// the key deleted on remove. Applying a record twice leaves the same
    /// replica. Insert and modify need a stream view type with new images:
    /// a record that cannot be applied is an [`Error::Record`].
    pub fn apply(&mut self, record: &ChangeRecord) -> Result<(), Error> {
        let seq = record.sequence_number.as_str();
        let unfit = |what: String| Error::Record {
            shard_id: record.shard_id.to_string(),
            error: RecordError::payload(seq, what),
        };
        let key = ItemKey::read(&record.keys, &self.key_names)
            .map_err(|r| unfit(format!("keys: {r}")))?;
        match (record.kind, &record.new_image) {
            (ChangeKind::Remove, _) => {
                self.items.remove(&key);
            }
            (_, Some(new)) => {
                self.items.insert(key, new.clone());
            }
            (kind, None) => {
                let view = record.view_type.as_deref().unwrap_or("unknown");
                let what = format!(
                    "{} has no new image (stream view type {view})",
                    kind.as_str()
                );
                return Err(unfit(what));
            }
        }
        Ok(())
    }

    /// The item with this key.
    pub fn get(&self, key: &ItemKey) -> Option<&Image> {
        self.items.get(key)
    }

    /// Every item, by key.
    pub fn items(&self) -> impl Iterator<Item = (&ItemKey, &Image)> {
        self.items.iter()
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// `true` when the replica has no items.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Applies the stream until every change made before this call is
    /// applied ([`StreamReader::read_past`] the time of the call; reached
    /// under a steady write load too), committing as it goes; returns the
    /// records applied. Call it again to keep following
    /// the table.
    pub async fn catch_up<C: StreamsClient>(
        &mut self,
        reader: &mut StreamReader<C>,
    ) -> Result<usize, Error> {
        let since = reader.store().now();
        let mut applied = 0;
        loop {
            let batch = reader.next_batch().await?;
            // Applying is idempotent: a batch that fails part-way is read
            // again whole.
            for record in batch.records() {
                if let Err(e) = self.apply(record) {
                    reader.rewind();
                    return Err(e);
                }
            }
            reader.commit(&batch).await?;
            applied += batch.len();
            if reader.read_past(since) {
                return Ok(applied);
            }
            if batch.is_empty() {
                tokio::time::sleep(reader.config().idle_pause).await;
            }
        }
    }
}

/// Every item of `table` (a strongly consistent Scan, every page, throttling
/// retried with `retry`) and the number of pages read.
pub async fn scan_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    retry: &RetryPolicy,
) -> Result<(Vec<Image>, usize), Error> {
    let mut items = Vec::new();
    let mut pages = 0;
    let mut start = None;
    loop {
        let req = dynamodb
            .scan()
            .table_name(table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take());
        let page = call_aws(retry, Service::DynamoDb, "Scan", || req.clone().send()).await?;
        pages += 1;
        items.extend(page.items.unwrap_or_default());
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok((items, pages)),
        }
    }
}

/// Builds a replica of `table` whose stream `reader` reads: takes the
/// stream's position (a `LATEST` iterator per shard, taken now), scans the
/// whole table (strongly consistent, every page), takes the position again
/// (the time the scan ended), then applies the stream from the first
/// position until it has read past the second. Keep it current with [`Replica::catch_up`]. The reader's saved positions are not used: the replica
/// lives in memory, so it is rebuilt from a scan.
pub async fn build_replica<C: StreamsClient>(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    reader: &mut StreamReader<C>,
) -> Result<(Replica, ReplicaReport), Error> {
    let retry = reader.store().config().retry;
    let described = call_aws(&retry, Service::DynamoDb, "DescribeTable", || {
        dynamodb.describe_table().table_name(table).send()
    })
    .await?;
    let key_names = described
        .table()
        .map(|t| t.key_schema())
        .unwrap_or_default()
        .iter()
        .map(|k| k.attribute_name().to_owned())
        .collect();
    reader.seek(InitialPosition::Latest).await?;
    let mut replica = Replica::new(key_names);
    let (items, pages) = scan_table(dynamodb, table, &retry).await?;
    let mut report = ReplicaReport {
        scanned: items.len(),
        scan_pages: pages,
        applied: 0,
    };
    for item in items {
        replica.put(item)?;
    }
    report.applied = replica.catch_up(reader).await?;
    Ok((replica, report))
}
