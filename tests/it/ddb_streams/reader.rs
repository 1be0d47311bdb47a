//! The self-managed DynamoDB Streams reader and the replica recipe: against
//! the DynamoDB server's table streams through the real SDK clients, and
//! against a fake behind `StreamsClient` for what the server cannot show
//! (its stream has one shard that never rotates and iterators that never
//! expire): shard rotation, expired iterators, throttling, trimmed data.

use crate::support::common::{create_stream_table, ctx, Ctx};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::{
    AttributeValue as StreamValue, OperationType, Record, StreamRecord, StreamViewType,
};
use proptest::prelude::*;
use shardkeeper::ddb_streams::{
    build_replica, Batch, ChangesPage, ItemKey, KeyValue, OnTrimmed, ReaderConfig, Replica,
    ShardPage, StreamReader, StreamsClient, StreamsError, StreamsIteratorStart,
};
use shardkeeper::lambda::DynamoDbProcessor;
use shardkeeper::pipeline::InitialPosition;
use shardkeeper::processing::{
    changes, Change, Keys, Parking, ProcessingOptions, StreamRecord as HandlerRecord,
};
use shardkeeper::state::{SequenceNumber, ShardSpec, StateStore};
use shardkeeper::Error;
use shardkeeper_local::unique_name;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// The keys of item `id` of a table made by `create_stream_table`.
fn keys(id: &str) -> Keys {
    Keys::from_json(&format!(r#"{{"id": {{"S": "{id}"}}}}"#)).unwrap()
}

fn config() -> ReaderConfig {
    ReaderConfig::default().idle_pause(Duration::from_millis(5))
}

/// Reads and commits until the reader is caught up; the records' ids, in order.
async fn drain<C: StreamsClient>(reader: &mut StreamReader<C>) -> Vec<String> {
    let mut ids = Vec::new();
    for _ in 0..200 {
        let batch = reader.next_batch().await.unwrap();
        ids.extend(record_ids(&batch));
        reader.commit(&batch).await.unwrap();
        if batch.caught_up {
            return ids;
        }
    }
    panic!("never caught up; read {ids:?}");
}

fn record_ids(batch: &Batch) -> Vec<String> {
    batch
        .records()
        .map(|r| match r.keys.get("id") {
            Some(AttributeValue::S(id)) => id.clone(),
            other => panic!("no id key: {other:?}"),
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Against the DynamoDB server.

#[derive(Debug, Clone, serde::Deserialize, PartialEq)]
struct Order {
    id: String,
    status: String,
}

async fn put(ctx: &Ctx, table: &str, id: &str, status: &str) {
    ctx.aws
        .dynamodb
        .put_item()
        .table_name(table)
        .item("id", AttributeValue::S(id.into()))
        .item("status", AttributeValue::S(status.into()))
        .send()
        .await
        .unwrap();
}

async fn delete(ctx: &Ctx, table: &str, id: &str) {
    ctx.aws
        .dynamodb
        .delete_item()
        .table_name(table)
        .key("id", AttributeValue::S(id.into()))
        .send()
        .await
        .unwrap();
}

fn server_reader(
    ctx: &Ctx,
    store: StateStore,
    arn: &str,
) -> StreamReader<aws_sdk_dynamodbstreams::Client> {
    StreamReader::new(ctx.aws.streams.clone(), store, arn, config())
}

#[tokio::test]
async fn inserts_modifies_and_removes_arrive_as_typed_changes_in_order() {
    let ctx = ctx().await;
    let (table, arn) = create_stream_table(&ctx.aws).await;
    put(&ctx, &table, "o1", "new").await;
    put(&ctx, &table, "o2", "new").await;
    put(&ctx, &table, "o1", "paid").await;
    delete(&ctx, &table, "o2").await;

    let mut reader = server_reader(&ctx, ctx.store(&table), &arn);
    let mut changes = Vec::new();
    for _ in 0..50 {
        let batch = reader.next_batch().await.unwrap();
        for record in batch.records() {
            changes.push(record.change::<Order>().unwrap());
        }
        reader.commit(&batch).await.unwrap();
        if batch.caught_up {
            break;
        }
    }
    let order = |id: &str, status: &str| Order {
        id: id.into(),
        status: status.into(),
    };
    assert_eq!(
        changes,
        vec![
            Change::Insert {
                new: order("o1", "new")
            },
            Change::Insert {
                new: order("o2", "new")
            },
            Change::Modify {
                old: Some(order("o1", "new")),
                new: order("o1", "paid")
            },
            Change::Remove {
                old: Some(order("o2", "new")),
                keys: keys("o2"),
                expired: false,
            },
        ]
    );
}

#[tokio::test]
async fn a_restarted_reader_resumes_after_the_committed_position() {
    let ctx = ctx().await;
    let (table, arn) = create_stream_table(&ctx.aws).await;
    for id in ["a", "b", "c"] {
        put(&ctx, &table, id, "new").await;
    }
    let group = unique_name("g");
    let limited = config().limit(Some(2));
    let mut first = StreamReader::new(
        ctx.aws.streams.clone(),
        ctx.store_for(&group, &table),
        &arn,
        limited.clone(),
    );
    let accepted = first.next_batch().await.unwrap();
    assert_eq!(record_ids(&accepted), ["a", "b"]);
    first.commit(&accepted).await.unwrap();
    // Read but never committed: the process stops here.
    let unaccepted = first.next_batch().await.unwrap();
    assert_eq!(record_ids(&unaccepted), ["c"]);
    drop(first);

    let saved = ctx
        .store_for(&group, &table)
        .positions()
        .load()
        .await
        .unwrap();
    assert_eq!(saved.len(), 1);
    assert_eq!(saved[0].iterator_type, "AFTER_SEQUENCE_NUMBER");
    let last_accepted = accepted.records().last().unwrap();
    assert_eq!(
        saved[0].sequence_number.as_ref(),
        Some(&last_accepted.sequence_number)
    );

    put(&ctx, &table, "d", "new").await;
    let mut second = StreamReader::new(
        ctx.aws.streams.clone(),
        ctx.store_for(&group, &table),
        &arn,
        limited,
    );
    assert_eq!(drain(&mut second).await, ["c", "d"]);
}

/// Epoch milliseconds of the next whole second, after waiting for it.
async fn next_whole_second() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let next = (now.as_millis() as i64 / 1000 + 1) * 1000;
    tokio::time::sleep(Duration::from_millis(
        (next - now.as_millis() as i64) as u64 + 20,
    ))
    .await;
    next
}

#[tokio::test]
async fn seeking_to_a_time_skips_the_records_created_before_it() {
    let ctx = ctx().await;
    let (table, arn) = create_stream_table(&ctx.aws).await;
    put(&ctx, &table, "old-1", "new").await;
    put(&ctx, &table, "old-2", "new").await;
    // The server keeps creation times in whole seconds: seek to the next one.
    let time = next_whole_second().await;
    put(&ctx, &table, "new-1", "new").await;
    put(&ctx, &table, "old-1", "paid").await;

    let mut reader = server_reader(&ctx, ctx.store(&table), &arn);
    reader
        .seek(InitialPosition::AtTimestamp(time))
        .await
        .unwrap();
    assert_eq!(drain(&mut reader).await, ["new-1", "old-1"]);
}

#[tokio::test]
async fn the_replica_equals_the_table_after_writes_during_the_build() {
    let ctx = ctx().await;
    let (table, arn) = create_stream_table(&ctx.aws).await;
    for i in 0..150 {
        put(&ctx, &table, &format!("item-{i}"), "initial").await;
    }
    const WRITES: usize = 400;
    let writes = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (ctx, table, writes) = (
            crate::support::common::ctx().await,
            table.clone(),
            writes.clone(),
        );
        tokio::spawn(async move {
            for round in 0..WRITES {
                let id = format!("item-{}", (round * 7) % 180);
                match round % 3 {
                    0 => put(&ctx, &table, &id, &format!("round-{round}")).await,
                    1 => delete(&ctx, &table, &id).await,
                    _ => put(&ctx, &table, &format!("late-{round}"), "new").await,
                }
                writes.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    // Let the writer get going, so the build overlaps it from the start.
    while writes.load(Ordering::SeqCst) < 10 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut reader = server_reader(&ctx, ctx.store(&table), &arn);
    let (mut replica, report) = build_replica(&ctx.aws.dynamodb, &table, &mut reader)
        .await
        .unwrap();
    let done_when_built = writes.load(Ordering::SeqCst);
    writer.await.unwrap();
    assert!(report.scanned >= 100, "{report:?}");
    assert!(
        report.applied > 0,
        "changes made during the build were applied: {report:?}"
    );
    assert!(
        done_when_built > 10,
        "the writer was writing during the build ({done_when_built} of {WRITES})"
    );
    replica.catch_up(&mut reader).await.unwrap();

    let mut table_items = BTreeMap::new();
    let mut start = None;
    loop {
        let page = ctx
            .aws
            .dynamodb
            .scan()
            .table_name(&table)
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        for item in page.items() {
            let Some(AttributeValue::S(id)) = item.get("id") else {
                panic!("no id")
            };
            table_items.insert(id.clone(), item.clone());
        }
        match page.last_evaluated_key {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => break,
        }
    }
    let replica_items: BTreeMap<String, _> = replica
        .items()
        .map(|(_, item)| match item.get("id") {
            Some(AttributeValue::S(id)) => (id.clone(), item.clone()),
            other => panic!("no id: {other:?}"),
        })
        .collect();
    assert_eq!(replica.key_names(), ["id"]);
    let ids: BTreeSet<&String> = replica_items.keys().chain(table_items.keys()).collect();
    let differing: Vec<&&String> = ids
        .iter()
        .filter(|id| replica_items.get(**id) != table_items.get(**id))
        .collect();
    assert!(
        differing.is_empty(),
        "replica and table differ at {differing:?}"
    );
    assert_eq!(replica_items.len(), table_items.len());
}

// ---------------------------------------------------------------------------
// Against a fake DynamoDB Streams client.

struct FakeRecord {
    seq: SequenceNumber,
    id: String,
    created_ms: i64,
}

struct FakeShard {
    id: String,
    parent: Option<String>,
    records: Vec<FakeRecord>,
    closed: bool,
}

#[derive(Default)]
struct FakeState {
    shards: Vec<FakeShard>,
    next_seq: u64,
    /// Iterators handed out before this generation are expired.
    generation: u64,
    /// Records with smaller sequence numbers are trimmed.
    trimmed_below: u64,
    /// The next this many calls are throttled.
    throttle: u32,
    describe_page: usize,
    page: usize,
    /// A writer that never stops: every GetRecords first appends a record
    /// created at this time to this shard.
    steady_writes: Option<(String, i64)>,
    iterator_requests: Vec<String>,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<FakeState>>);

const SEQ_BASE: u64 = 100_000_000_000_000_000;

impl Fake {
    fn new() -> Self {
        let fake = Fake::default();
        {
            let mut s = fake.0.lock().unwrap();
            s.describe_page = 100;
            s.page = 100;
        }
        fake
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap()
    }

    /// A fake stream of one open shard `shard` holding these records.
    fn one_shard(ids: &[&str], created_ms: i64) -> Self {
        let fake = Fake::new();
        fake.add_shard("shard", None);
        for id in ids {
            fake.write("shard", id, created_ms);
        }
        fake
    }

    fn add_shard(&self, id: &str, parent: Option<&str>) {
        self.state().shards.push(FakeShard {
            id: id.into(),
            parent: parent.map(str::to_owned),
            records: Vec::new(),
            closed: false,
        });
    }

    fn write(&self, shard: &str, id: &str, created_ms: i64) {
        self.state().append(shard, id, created_ms);
    }

    fn close(&self, shard: &str) {
        self.state()
            .shards
            .iter_mut()
            .find(|x| x.id == shard)
            .unwrap()
            .closed = true;
    }

    fn seq_of(&self, id: &str) -> SequenceNumber {
        let s = self.state();
        s.shards
            .iter()
            .flat_map(|x| x.records.iter())
            .find(|r| r.id == id)
            .map(|r| r.seq.clone())
            .unwrap()
    }
}

impl FakeState {
    fn append(&mut self, shard: &str, id: &str, created_ms: i64) {
        self.next_seq += 1;
        let seq = SequenceNumber::new(&(SEQ_BASE + self.next_seq).to_string()).unwrap();
        let shard = self.shards.iter_mut().find(|x| x.id == shard).unwrap();
        assert!(!shard.closed);
        shard.records.push(FakeRecord {
            seq,
            id: id.into(),
            created_ms,
        });
    }

    fn throttled(&mut self) -> Result<(), StreamsError> {
        if self.throttle > 0 {
            self.throttle -= 1;
            return Err(StreamsError::Throttled("Rate exceeded for shard".into()));
        }
        Ok(())
    }

    fn is_trimmed(&self, seq: &SequenceNumber) -> bool {
        seq < &SequenceNumber::new(&(SEQ_BASE + self.trimmed_below).to_string()).unwrap()
    }

    fn describe(&mut self, start: Option<&str>) -> Result<ShardPage, StreamsError> {
        self.throttled()?;
        let from = match start {
            Some(id) => self.shards.iter().position(|s| s.id == id).unwrap() + 1,
            None => 0,
        };
        let page: Vec<&FakeShard> = self
            .shards
            .iter()
            .skip(from)
            .take(self.describe_page)
            .collect();
        let more = from + page.len() < self.shards.len();
        Ok(ShardPage {
            shards: page
                .iter()
                .map(|s| {
                    let parents: Vec<&str> = s.parent.as_deref().into_iter().collect();
                    ShardSpec::new(&s.id)
                        .unwrap()
                        .with_parents(&parents)
                        .unwrap()
                })
                .collect(),
            last_evaluated_shard_id: page.last().filter(|_| more).map(|s| s.id.clone()),
        })
    }

    fn iterator(
        &mut self,
        shard: &str,
        start: &StreamsIteratorStart,
    ) -> Result<Option<String>, StreamsError> {
        self.throttled()?;
        self.iterator_requests.push(format!("{shard} {start}"));
        let s = self
            .shards
            .iter()
            .find(|s| s.id == shard)
            .ok_or_else(|| StreamsError::ResourceNotFound(shard.into()))?;
        let first_kept = s.records.iter().position(|r| !self.is_trimmed(&r.seq));
        let pos = match start {
            StreamsIteratorStart::TrimHorizon => first_kept.unwrap_or(s.records.len()),
            StreamsIteratorStart::Latest => s.records.len(),
            StreamsIteratorStart::AtSequence(seq) | StreamsIteratorStart::AfterSequence(seq) => {
                let at = matches!(start, StreamsIteratorStart::AtSequence(_));
                let pos = s
                    .records
                    .iter()
                    .position(|r| if at { &r.seq >= seq } else { &r.seq > seq })
                    .unwrap_or(s.records.len());
                if first_kept.is_some_and(|k| pos < k)
                    || (first_kept.is_none() && pos < s.records.len())
                {
                    return Err(StreamsError::TrimmedData(format!("{shard} {seq}")));
                }
                pos
            }
        };
        Ok(Some(format!("{}|{shard}|{pos}", self.generation)))
    }

    fn records(&mut self, iterator: &str) -> Result<ChangesPage, StreamsError> {
        self.throttled()?;
        if let Some((shard, created)) = self.steady_writes.clone() {
            let id = format!("steady-{}", self.next_seq);
            self.append(&shard, &id, created);
        }
        let mut parts = iterator.split('|');
        let generation: u64 = parts.next().unwrap().parse().unwrap();
        let shard = parts.next().unwrap().to_owned();
        let pos: usize = parts.next().unwrap().parse().unwrap();
        if generation < self.generation {
            return Err(StreamsError::ExpiredIterator(iterator.into()));
        }
        let s = self.shards.iter().find(|s| s.id == shard).unwrap();
        if s.records.get(pos).is_some_and(|r| self.is_trimmed(&r.seq)) {
            return Err(StreamsError::TrimmedData(iterator.into()));
        }
        let end = (pos + self.page).min(s.records.len());
        let records = s.records[pos..end]
            .iter()
            .map(|r| sdk_record(&r.seq, &r.id, r.created_ms))
            .collect();
        let next = (!(s.closed && end == s.records.len()))
            .then(|| format!("{}|{shard}|{end}", self.generation));
        Ok(ChangesPage {
            records,
            next_iterator: next,
        })
    }
}

fn sdk_record(seq: &SequenceNumber, id: &str, created_ms: i64) -> Record {
    let data = StreamRecord::builder()
        .sequence_number(seq.as_str())
        .approximate_creation_date_time(aws_smithy_types::DateTime::from_millis(created_ms))
        .stream_view_type(StreamViewType::NewImage)
        .keys("id", StreamValue::S(id.into()))
        .new_image("id", StreamValue::S(id.into()))
        .build();
    Record::builder()
        .event_id(seq.as_str())
        .event_name(OperationType::Insert)
        .dynamodb(data)
        .build()
}

impl StreamsClient for Fake {
    fn describe_stream(
        &self,
        _stream_arn: &str,
        start: Option<&str>,
    ) -> impl Future<Output = Result<ShardPage, StreamsError>> + Send {
        std::future::ready(self.state().describe(start))
    }

    fn get_shard_iterator(
        &self,
        _stream_arn: &str,
        shard_id: &str,
        start: &StreamsIteratorStart,
    ) -> impl Future<Output = Result<Option<String>, StreamsError>> + Send {
        std::future::ready(self.state().iterator(shard_id, start))
    }

    fn get_records(
        &self,
        iterator: &str,
        _limit: Option<i32>,
    ) -> impl Future<Output = Result<ChangesPage, StreamsError>> + Send {
        std::future::ready(self.state().records(iterator))
    }
}

const ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000";

fn fake_reader(ctx: &Ctx, fake: &Fake, config: ReaderConfig) -> (StreamReader<Fake>, StateStore) {
    let store = ctx.store(&unique_name("orders"));
    let reader = StreamReader::new(fake.clone(), store.clone(), ARN, config);
    (reader, store)
}

async fn saved_shards(store: &StateStore) -> BTreeSet<String> {
    store
        .positions()
        .load()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.shard_id.to_string())
        .collect()
}

#[tokio::test]
async fn children_are_read_after_their_parent_and_new_and_removed_shards_are_reported() {
    let ctx = ctx().await;
    let fake = Fake::new();
    fake.state().describe_page = 1; // DescribeStream pages are followed
    let now = ctx.clock_now();
    fake.add_shard("parent", None);
    for id in ["p1", "p2", "p3"] {
        fake.write("parent", id, now);
    }
    let (mut reader, store) = fake_reader(&ctx, &fake, config());

    let first = reader.next_batch().await.unwrap();
    let discovery = first.discovery.clone().unwrap();
    assert_eq!(discovery.new_shards.len(), 1);
    assert_eq!(record_ids(&first), ["p1", "p2", "p3"]);
    reader.commit(&first).await.unwrap();

    // The parent closes after one more record; two children take over.
    fake.write("parent", "p4", now);
    fake.close("parent");
    fake.add_shard("child-a", Some("parent"));
    fake.add_shard("child-b", Some("parent"));
    fake.write("child-a", "a1", now);
    fake.write("child-b", "b1", now);
    fake.write("child-a", "a2", now);

    let last_of_parent = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&last_of_parent), ["p4"]);
    assert!(last_of_parent.shards[0].ended);
    // The parent is read to its end but not committed: its children wait.
    let waiting = reader.next_batch().await.unwrap();
    let found = waiting.discovery.clone().unwrap();
    assert_eq!(found.pages, 3);
    let new: Vec<String> = found.new_shards.iter().map(|s| s.to_string()).collect();
    assert_eq!(new, ["child-a", "child-b"]);
    assert!(waiting.is_empty());
    reader.commit(&waiting).await.unwrap();
    assert!(reader.next_batch().await.unwrap().is_empty());

    reader.commit(&last_of_parent).await.unwrap();
    let children = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&children), ["a1", "a2", "b1"]);
    reader.commit(&children).await.unwrap();
    assert_eq!(
        saved_shards(&store).await,
        BTreeSet::from(["parent".into(), "child-a".into(), "child-b".into()])
    );

    // 24 hours later the parent is trimmed away: reported, position dropped.
    fake.state().shards.retain(|s| s.id != "parent");
    ctx.clock.advance(Duration::from_secs(61));
    let later = reader.next_batch().await.unwrap();
    let removed: Vec<String> = later
        .discovery
        .unwrap()
        .removed_shards
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(removed, ["parent"]);
    assert_eq!(
        saved_shards(&store).await,
        BTreeSet::from(["child-a".into(), "child-b".into()])
    );
}

#[tokio::test]
async fn an_expired_iterator_is_replaced_after_the_last_record_read() {
    let ctx = ctx().await;
    let now = ctx.clock_now();
    let fake = Fake::one_shard(&["r1", "r2", "r3"], now);
    let (mut reader, _store) = fake_reader(&ctx, &fake, config());
    let first = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&first), ["r1", "r2", "r3"]);
    // Not committed: the refresh follows what was handed out, not what was saved.
    fake.write("shard", "r4", now);
    fake.write("shard", "r5", now);
    fake.state().generation += 1;
    let second = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&second), ["r4", "r5"]);
    assert_eq!(reader.stats().shards.iterators_refreshed, 1);
    let requests = fake.state().iterator_requests.clone();
    assert_eq!(
        requests.last().unwrap(),
        &format!("shard AFTER_SEQUENCE_NUMBER {}", fake.seq_of("r3"))
    );
}

#[tokio::test]
async fn an_expired_latest_iterator_is_never_replaced_at_latest() {
    let ctx = ctx().await;
    let fake = Fake::new();
    let now = ctx.clock_now();
    fake.add_shard("shard", None);
    fake.write("shard", "before", now - 60_000);
    let latest = config().initial_position(InitialPosition::Latest);
    let (mut reader, _store) = fake_reader(&ctx, &fake, latest);
    assert!(reader.next_batch().await.unwrap().is_empty());
    // Records arrive while the reader is away for longer than an iterator lives.
    fake.write("shard", "after-1", now + 1_000);
    fake.write("shard", "after-2", now + 2_000);
    fake.state().generation += 1;
    let batch = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&batch), ["after-1", "after-2"]);
    let requests = fake.state().iterator_requests.clone();
    assert_eq!(requests, ["shard LATEST", "shard TRIM_HORIZON"]);
    assert_eq!(batch.shards[0].skipped, 1);
}

#[tokio::test]
async fn throttling_is_backed_off_and_retried_without_loss() {
    let ctx = ctx().await;
    let now = ctx.clock_now();
    let fake = Fake::one_shard(&["r1", "r2"], now);
    let (mut reader, _store) = fake_reader(&ctx, &fake, config());
    fake.state().throttle = 2;
    let batch = reader.next_batch().await.unwrap();
    assert_eq!(record_ids(&batch), ["r1", "r2"]);
    assert_eq!(reader.stats().shards.throttled, 2);
    reader.commit(&batch).await.unwrap();

    // Throttled past the retry policy: a typed error, then nothing lost.
    fake.write("shard", "r3", now);
    fake.state().throttle = 1_000;
    let err = reader.next_batch().await.unwrap_err();
    assert!(err.is_throttled(), "{err}");
    fake.state().throttle = 0;
    assert_eq!(drain(&mut reader).await, ["r3"]);
}

#[tokio::test]
async fn trimmed_data_restarts_at_trim_horizon_and_is_reported_or_fails_when_asked() {
    let ctx = ctx().await;
    for on_trimmed in [OnTrimmed::RestartAtTrimHorizon, OnTrimmed::Fail] {
        let now = ctx.clock_now();
        let fake = Fake::one_shard(&["r1", "r2", "r3", "r4", "r5"], now);
        fake.state().page = 2;
        let cfg = config().on_trimmed(on_trimmed);
        let (mut reader, _store) = fake_reader(&ctx, &fake, cfg);
        let first = reader.next_batch().await.unwrap();
        assert_eq!(record_ids(&first), ["r1", "r2"]);
        reader.commit(&first).await.unwrap();
        // r3 is trimmed before it is read (the reader was away for a day).
        fake.state().trimmed_below = 4;
        match on_trimmed {
            OnTrimmed::RestartAtTrimHorizon => {
                let batch = reader.next_batch().await.unwrap();
                assert_eq!(batch.trimmed.len(), 1);
                assert_eq!(batch.trimmed[0].shard_id.as_str(), "shard");
                assert_eq!(record_ids(&batch), ["r4", "r5"]);
                assert_eq!(reader.stats().trimmed_restarts, 1);
            }
            _ => {
                let err = reader.next_batch().await.unwrap_err();
                assert!(
                    matches!(&err, Error::TrimmedData { shard_id, .. } if shard_id == "shard"),
                    "{err}"
                );
            }
        }
    }
}

#[tokio::test]
async fn poll_commits_what_the_handler_accepted_and_reads_the_rest_again() {
    let ctx = ctx().await;
    let now = ctx.clock_now();
    let fake = Fake::one_shard(&["r1", "r2", "r3"], now);
    let (mut reader, store) = fake_reader(&ctx, &fake, config());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = |fail_on: &'static str| {
        let seen = seen.clone();
        move |record: shardkeeper::processing::StreamRecord| {
            let seen = seen.clone();
            async move {
                // The record's keys, in DynamoDB JSON (as an event source mapping gives them).
                let keys: serde_json::Value = serde_json::from_str(&record.partition_key).unwrap();
                let Some(id) = keys["id"]["S"].as_str().map(str::to_owned) else {
                    return Err("no id".to_owned());
                };
                if id == fail_on {
                    return Err(format!("cannot handle {id}"));
                }
                seen.lock().unwrap().push(id);
                Ok(())
            }
        }
    };
    let err = reader.poll(&handler("r2")).await.unwrap_err();
    assert!(
        matches!(&err, Error::Handler { sequence_number, .. } if *sequence_number == fake.seq_of("r2").to_string()),
        "{err}"
    );
    let saved = store.positions().load().await.unwrap();
    assert_eq!(saved[0].sequence_number, Some(fake.seq_of("r1")));
    // The failing shard pauses before it is read again.
    ctx.clock.advance(Duration::from_secs(1));
    let report = reader.poll(&handler("none")).await.unwrap();
    assert_eq!(report.shards.processed, 2);
    assert_eq!(seen.lock().unwrap().clone(), ["r1", "r2", "r3"]);
}

/// With `concurrency` above 1 the reader handles its due shards at once,
/// and the changes of different items of a shard at once: each item's
/// changes still in order, each change once, a child's after every change
/// of its parent.
#[tokio::test]
async fn the_readers_shards_and_items_run_at_once_each_item_in_order() {
    let ctx = ctx().await;
    let now = ctx.clock_now();
    let fake = Fake::new();
    for shard in ["a", "b", "c"] {
        fake.add_shard(shard, None);
    }
    fake.add_shard("d", Some("c"));
    for n in 0..6 {
        for shard in ["a", "b", "c", "d"] {
            fake.write(shard, &format!("{shard}{}", n % 3), now);
        }
    }
    fake.close("c");
    let processing = ProcessingOptions::default().concurrency(8);
    let (mut reader, _) = fake_reader(&ctx, &fake, config().processing(processing));
    let done: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (done, running, most) = (done.clone(), running.clone(), most.clone());
        move |record: shardkeeper::processing::StreamRecord| {
            let (done, running, most) = (done.clone(), running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later changes of an item wait less: out of order unless
                // the reader keeps each item's order.
                let seq: u64 = record.sequence_number.parse().unwrap();
                tokio::time::sleep(Duration::from_millis(2 + (100 - seq % 100) % 7)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                let keys: serde_json::Value = serde_json::from_str(&record.partition_key).unwrap();
                let id = keys["id"]["S"].as_str().unwrap().to_owned();
                done.lock()
                    .unwrap()
                    .push((id, record.sequence_number.to_string()));
                Ok::<(), std::io::Error>(())
            }
        }
    };
    for _ in 0..50 {
        let report = reader.poll(&handler).await.unwrap();
        if report.caught_up && done.lock().unwrap().len() == 24 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = done.lock().unwrap().clone();
    assert_eq!(done.len(), 24, "each change once: {done:?}");
    assert!(most.load(Ordering::SeqCst) > 3, "shards and items at once");
    let mut by_item: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, seq) in &done {
        by_item.entry(id).or_default().push(seq);
    }
    for (id, seqs) in &by_item {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{id} out of order: {seqs:?}"
        );
    }
    let last_of_c = done
        .iter()
        .rposition(|(id, _)| id.starts_with('c'))
        .unwrap();
    let first_of_d = done.iter().position(|(id, _)| id.starts_with('d')).unwrap();
    assert!(
        last_of_c < first_of_d,
        "the child after its parent: {done:?}"
    );
}

/// A poll that breaks off on a state table error (here: every request to
/// the table fails while `r2` is handled, so its position cannot be saved)
/// reads its shard again after the last record handled: nothing after it is
/// skipped. Before, the reader went on after the batch it had read, and
/// `r3`, never handled, was lost until a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_broken_off_by_the_state_table_reads_its_shard_again() {
    let faulty = crate::support::faulty::Faulty::start(11).await;
    let now = faulty.ctx.clock_now();
    let fake = Fake::one_shard(&["r1", "r2", "r3"], now);
    let config = config()
        // A position saved after every record.
        .processing(ProcessingOptions::default().checkpoint_records(Some(1)));
    let (mut reader, _store) = fake_reader(&faulty.ctx, &fake, config);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (at_r2, go_on) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let paused = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (seen, at_r2, go_on, paused) =
            (seen.clone(), at_r2.clone(), go_on.clone(), paused.clone());
        move |record: HandlerRecord| {
            let (seen, at_r2, go_on, paused) =
                (seen.clone(), at_r2.clone(), go_on.clone(), paused.clone());
            async move {
                let keys: serde_json::Value = serde_json::from_str(&record.partition_key).unwrap();
                let id = keys["id"]["S"].as_str().unwrap().to_owned();
                if id == "r2" && paused.fetch_add(1, Ordering::SeqCst) == 0 {
                    // The table goes down while r2 is handled: its position
                    // cannot be saved.
                    at_r2.notify_one();
                    go_on.notified().await;
                }
                seen.lock().unwrap().push(id);
                Ok::<(), std::io::Error>(())
            }
        }
    };
    let outage = async {
        at_r2.notified().await;
        faulty.set_faults(&crate::support::faulty::every_request_fails());
        go_on.notify_one();
    };
    let (first, ()) = tokio::join!(reader.poll(&handler), outage);
    assert!(first.is_err(), "{first:?}");
    faulty.set_faults(&shardkeeper_local::Faults::none());
    let second = reader.poll(&handler).await.unwrap();
    // r2 was handled; its position is saved by the next commit. r3 comes.
    assert_eq!(seen.lock().unwrap().clone(), ["r1", "r2", "r3"]);
    assert_eq!(second.shards.processed, 1);
}

/// A raw handler under the reader gets each record as the reader decoded
/// it (`change`), with no text (`data` is empty) and its keys in DynamoDB
/// JSON (`partition_key`, as an event source mapping gives them); the typed
/// change is the one `ChangeRecord::change` decodes.
#[tokio::test]
async fn a_raw_handler_under_the_reader_gets_the_decoded_record() {
    let ctx = ctx().await;
    let fake = Fake::one_shard(&["r1", "r2"], ctx.clock_now());
    let (mut reader, _store) = fake_reader(&ctx, &fake, config());
    let seen: Arc<Mutex<Vec<HandlerRecord>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |record: HandlerRecord| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(record);
                Ok::<(), std::io::Error>(())
            }
        }
    };
    assert_eq!(reader.poll(&handler).await.unwrap().shards.processed, 2);
    let seen = seen.lock().unwrap();
    let mut ids = Vec::new();
    for record in seen.iter() {
        let change = record.change.as_deref().expect("the decoded record");
        let Some(AttributeValue::S(id)) = change.keys.get("id") else {
            panic!("no id key: {change:?}");
        };
        assert!(record.data.is_empty());
        assert_eq!(&*record.sequence_number, change.sequence_number.as_str());
        assert_eq!(change.sequence_number, fake.seq_of(id));
        assert_eq!(
            &*record.partition_key,
            format!(r#"{{"id":{{"S":"{id}"}}}}"#)
        );
        assert_eq!(
            change.change::<serde_json::Value>().unwrap(),
            Change::Insert {
                new: serde_json::json!({ "id": id })
            }
        );
        ids.push(id.clone());
    }
    assert_eq!(ids, ["r1", "r2"]);
}

/// The handler contract is one across modes: the `changes` handler value a
/// `DynamoDbProcessor` runs for an event source mapping runs unchanged under
/// the reader, and the records the reader hands out, put in an event, decode
/// the same through the processor.
#[tokio::test]
async fn the_same_changes_handler_runs_under_the_reader_and_an_event_source_mapping() {
    let ctx = ctx().await;
    let (table, arn) = create_stream_table(&ctx.aws).await;
    put(&ctx, &table, "o1", "new").await;
    put(&ctx, &table, "o1", "paid").await;
    delete(&ctx, &table, "o1").await;

    let seen: Arc<Mutex<Vec<Change<Order>>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        changes(move |change: Change<Order>, _record: HandlerRecord| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(change);
                Ok::<(), std::io::Error>(())
            }
        })
    };
    let mut reader = server_reader(&ctx, ctx.store(&table), &arn);
    let mut records = Vec::new();
    for _ in 0..50 {
        // What the reader hands out, kept to build an event from below.
        let batch = reader.next_batch().await.unwrap();
        records.extend(batch.records().map(|r| r.to_event_json(&arn)));
        reader.rewind();
        let report = reader.poll(&handler).await.unwrap();
        if report.caught_up {
            break;
        }
    }
    let from_reader = std::mem::take(&mut *seen.lock().unwrap());
    let order = |status: &str| Order {
        id: "o1".into(),
        status: status.into(),
    };
    assert_eq!(
        from_reader,
        vec![
            Change::Insert { new: order("new") },
            Change::Modify {
                old: Some(order("new")),
                new: order("paid")
            },
            Change::Remove {
                old: Some(order("paid")),
                keys: keys("o1"),
                expired: false,
            },
        ]
    );

    let event = format!("{{\"Records\":[{}]}}", records.join(","));
    let processor = DynamoDbProcessor::new(handler);
    let report = processor.process(&event, None).await.unwrap();
    assert!(report.failures.is_empty(), "{report:?}");
    assert_eq!(*seen.lock().unwrap(), from_reader);
}

/// The reader runs the processing core's rules: a failing record holds up
/// its own shard only (the others are handled and committed once, and go on
/// while it pauses), its attempts are counted across polls, and after
/// `max_attempts` it is parked and its shard moves on.
#[tokio::test]
async fn a_failing_record_holds_up_its_shard_alone_until_it_is_parked() {
    let ctx = ctx().await;
    let now = ctx.clock_now();
    let fake = Fake::new();
    fake.add_shard("a", None);
    fake.add_shard("b", None);
    for id in ["a1", "a2", "a3"] {
        fake.write("a", id, now);
    }
    for id in ["b1", "b2"] {
        fake.write("b", id, now);
    }
    let options = ProcessingOptions::default()
        .max_attempts(2)
        .parking(Parking::StateTable {
            ttl: Duration::from_secs(3600),
        });
    let (mut reader, store) = fake_reader(&ctx, &fake, config().processing(options));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let seen = seen.clone();
        move |record: HandlerRecord| {
            let seen = seen.clone();
            async move {
                let keys: serde_json::Value = serde_json::from_str(&record.partition_key).unwrap();
                let id = keys["id"]["S"].as_str().unwrap().to_owned();
                if id == "a2" {
                    return Err(format!("cannot handle {id}"));
                }
                seen.lock().unwrap().push(id);
                Ok(())
            }
        }
    };
    let err = reader.poll(&handler).await.unwrap_err();
    assert!(
        matches!(&err, Error::Handler { shard_id, sequence_number, .. }
            if shard_id == "a" && *sequence_number == fake.seq_of("a2").to_string()),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().clone(), ["a1", "b1", "b2"]);
    // Shard a pauses after its failure (b, done, has nothing new).
    fake.write("b", "b3", now);
    let report = reader.poll(&handler).await.unwrap();
    assert_eq!(
        (report.shards.processed, report.shards.parked),
        (1, 0),
        "b3 only"
    );
    ctx.clock.advance(Duration::from_secs(1));
    let report = reader.poll(&handler).await.unwrap();
    assert_eq!((report.shards.processed, report.shards.parked), (1, 1));
    assert_eq!(seen.lock().unwrap().clone(), ["a1", "b1", "b2", "b3", "a3"]);
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(parked[0].key.sequence, fake.seq_of("a2"));
    assert_eq!(parked[0].attempts, 2);
    // Nothing is handed out again: every shard is committed to its end.
    let report = reader.poll(&handler).await.unwrap();
    assert_eq!((report.shards.processed, report.shards.parked), (0, 0));
}

#[test]
fn a_replica_applies_changes_idempotently() {
    let mut replica = Replica::new(vec!["id".into()]);
    let shard = shardkeeper::state::ShardId::new("shard").unwrap();
    let seq = SequenceNumber::new("100000000000000000001").unwrap();
    let insert =
        shardkeeper::processing::ChangeRecord::from_sdk(&shard, 0, &sdk_record(&seq, "x", 0))
            .unwrap();
    replica.apply(&insert).unwrap();
    replica.apply(&insert).unwrap();
    assert_eq!(replica.len(), 1);
    let mut remove = insert.clone();
    remove.kind = shardkeeper::processing::ChangeKind::Remove;
    remove.new_image = None;
    replica.apply(&remove).unwrap();
    replica.apply(&remove).unwrap();
    assert!(replica.is_empty());
}

#[tokio::test]
async fn catching_up_ends_while_the_table_is_written_all_the_time() {
    let ctx = ctx().await;
    let fake = Fake::new();
    let now = ctx.clock_now();
    fake.add_shard("shard", None);
    for i in 0..20 {
        fake.write("shard", &format!("old-{i}"), now - 10_000);
    }
    fake.state().page = 3;
    fake.state().steady_writes = Some(("shard".into(), now));
    let (mut reader, _store) = fake_reader(&ctx, &fake, config());
    let mut replica = Replica::new(vec!["id".into()]);
    let applied = replica.catch_up(&mut reader).await.unwrap();
    // Every change made before the catch-up started is applied, although
    // no read ever came back empty.
    assert!(applied >= 20, "{applied}");
    for i in 0..20 {
        let key = ItemKey(vec![("id".into(), KeyValue::S(format!("old-{i}")))]);
        assert!(replica.get(&key).is_some(), "old-{i} missing");
    }
}

// ---------------------------------------------------------------------------
// Parents first, on random shard trees.

/// Shard `i`'s parents are among shards `0..i` (one after a split, two after a merge).
fn shard_tree() -> impl Strategy<Value = Vec<ShardSpec>> {
    (1usize..40)
        .prop_flat_map(|n| {
            let parents = (0..n)
                .map(|i| proptest::collection::vec(0..i.max(1), if i == 0 { 0..1 } else { 0..3 }))
                .collect::<Vec<_>>();
            (parents, Just(n))
        })
        .prop_map(|(parents, n)| {
            (0..n)
                .map(|i| {
                    let ids: BTreeSet<String> =
                        parents[i].iter().map(|p| format!("s{p}")).collect();
                    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                    ShardSpec::new(&format!("s{i}"))
                        .unwrap()
                        .with_parents(&ids)
                        .unwrap()
                })
                .collect()
        })
        .prop_shuffle()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn parents_first_places_every_parent_before_its_children(tree in shard_tree()) {
        let ids: BTreeSet<String> = tree.iter().map(|s| s.shard_id.to_string()).collect();
        let ordered = ShardSpec::parents_first(tree.clone());
        let placed: Vec<String> = ordered.iter().map(|s| s.shard_id.to_string()).collect();
        prop_assert_eq!(placed.iter().cloned().collect::<BTreeSet<_>>(), ids);
        prop_assert_eq!(placed.len(), tree.len());
        for (at, spec) in ordered.iter().enumerate() {
            for parent in &spec.parents {
                let parent_at = placed.iter().position(|p| p == parent.as_str()).unwrap();
                prop_assert!(parent_at < at, "{} before its parent {}", spec.shard_id, parent);
            }
        }
    }
}
