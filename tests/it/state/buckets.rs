//! A group's shard items spread over bucket keys: where items land, how the
//! layout is chosen once, and groups written before buckets existed.

use crate::support::common::{ctx, seed_shards, Ctx};
use shardkeeper::state::{
    Buckets, Checkpoint, ConsumerId, GroupPart, ParkedRecord, RecordKey, SequenceNumber,
    ShardScope, StateStore, StoreConfig, SCHEMA_VERSION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

fn store_with(ctx: &Ctx, group: &str, buckets: u16) -> StateStore {
    let config = StoreConfig::new(group, "orders")
        .unwrap()
        .table(&ctx.table)
        .unwrap()
        .buckets(Buckets::new(buckets).unwrap());
    StateStore::with_clock(
        ctx.aws.dynamodb.clone(),
        config,
        Arc::new(ctx.clock.clone()),
    )
}

/// Every item of the table under a partition key starting with `home`, by
/// partition key (read raw, as DynamoDB holds them).
async fn items_by_key(ctx: &Ctx, home: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut start = None;
    loop {
        let out = ctx
            .aws
            .dynamodb
            .scan()
            .table_name(&ctx.table)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .unwrap();
        for item in out.items() {
            let text = |k: &str| item[k].as_s().unwrap().clone();
            let pk = text("pk");
            if pk == home || pk.starts_with(&format!("{home}#")) {
                keys.entry(pk).or_default().insert(text("sk"));
            }
        }
        match out.last_evaluated_key {
            Some(k) if !k.is_empty() => start = Some(k),
            _ => return keys,
        }
    }
}

#[tokio::test]
async fn a_spread_group_keeps_each_shard_under_its_bucket_and_reads_back_whole() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("spread");
    let store = store_with(&ctx, &group, 8);
    store.stream_item().init(1_000, None).await.unwrap();
    let shards = seed_shards(&store, 64).await;
    let me = ConsumerId::new("w").unwrap();
    let lease = store
        .leases()
        .acquire(&shards[5], &me, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .save(&lease, &Checkpoint::after("12345").unwrap(), None)
        .await
        .unwrap();

    let home = store.layout().partition_key().to_owned();
    let keys = items_by_key(&ctx, &home).await;
    // The home key holds the group's own items; each shard lives in the
    // bucket its id hashes to, and nowhere else.
    assert_eq!(
        keys[&home],
        BTreeSet::from(["BUCKETS".to_owned(), "STREAM".to_owned()])
    );
    let buckets = Buckets::new(8).unwrap();
    for shard in &shards {
        let pk = format!("{home}#{}", buckets.of(shard.as_str()));
        assert!(keys[&pk].contains(&format!("SHARD#{shard}")), "{shard}");
        assert_eq!(store.layout().key_of(shard.as_str()).await.unwrap(), pk);
    }
    assert_eq!(keys.len(), 9, "the home key and 8 buckets: {keys:?}");
    assert_eq!(keys.values().map(BTreeSet::len).sum::<usize>(), 64 + 2);

    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.buckets, buckets);
    let read: Vec<_> = snapshot.shards.iter().map(|s| s.shard_id.clone()).collect();
    assert_eq!(read, shards, "every shard, in shard id order");
    assert_eq!(
        snapshot.stream.unwrap().schema_version,
        SCHEMA_VERSION,
        "code that knows no buckets (or no sessions) refuses it"
    );
    assert_eq!(store.leases().owned_shards(&me).await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_layout_is_recorded_once_and_every_process_follows_the_stored_one() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("spread");
    let first = store_with(&ctx, &group, 16);
    let shards = seed_shards(&first, 20).await;
    // A process configured otherwise (another deploy, a different shard
    // count at its start) reads and writes where the first one laid out.
    let second = store_with(&ctx, &group, 2);
    assert_eq!(second.layout().buckets().await.unwrap().count(), 16);
    let lease = second
        .leases()
        .acquire(
            &shards[3],
            &ConsumerId::new("b").unwrap(),
            Duration::from_secs(10),
        )
        .await
        .unwrap()
        .unwrap();
    second
        .checkpoints()
        .save(&lease, &Checkpoint::after("7").unwrap(), None)
        .await
        .unwrap();
    let seen = first
        .shards()
        .get(&ShardScope::Group, &shards[3])
        .await
        .unwrap();
    assert_eq!(seen.checkpoint, Some(Checkpoint::after("7").unwrap()));
    assert_eq!(first.load_group().await.unwrap().shards.len(), 20);
    let keys = items_by_key(&ctx, first.layout().partition_key()).await;
    assert!(keys.len() > 2, "spread over 16 buckets: {keys:?}");
}

#[tokio::test]
async fn a_group_written_before_buckets_existed_stays_under_its_one_key() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("legacy");
    // Written as a group of one key is, then its layout item removed: what
    // code from before buckets leaves behind.
    let old = store_with(&ctx, &group, 1);
    old.stream_item().init(1_000, None).await.unwrap();
    seed_shards(&old, 10).await;
    ctx.aws
        .dynamodb
        .delete_item()
        .table_name(&ctx.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(old.layout().partition_key().into()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("BUCKETS".into()),
        )
        .send()
        .await
        .unwrap();

    // Upgraded code configured for many buckets finds that state and keeps
    // the group under its one key.
    let new = store_with(&ctx, &group, 64);
    new.stream_item().init(1_000, None).await.unwrap();
    assert_eq!(new.layout().buckets().await.unwrap(), Buckets::ONE);
    assert_eq!(new.load_group().await.unwrap().shards.len(), 10);
    new.shards()
        .ensure(
            &ShardScope::Group,
            &shardkeeper::state::ShardSpec::new("shardId-000000000099").unwrap(),
        )
        .await
        .unwrap();
    let keys = items_by_key(&ctx, new.layout().partition_key()).await;
    assert_eq!(keys.len(), 1, "one key: {keys:?}");
    assert_eq!(keys[new.layout().partition_key()].len(), 10 + 1 + 2);
    assert_eq!(
        new.stream_item()
            .state()
            .await
            .unwrap()
            .unwrap()
            .schema_version,
        SCHEMA_VERSION,
        "the schema of sessions, which code that renews each lease refuses"
    );
}

#[tokio::test]
async fn records_without_a_shard_are_spread_by_event_id_and_listed_from_every_bucket() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("spread");
    let store = store_with(&ctx, &group, 8);
    let source = "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2026-01-01T00:00:00.000";
    let mut parked = Vec::new();
    for i in 0..12u32 {
        let key = RecordKey {
            consumer: Some("projector".to_owned()),
            source: Some(source.to_owned()),
            shard_id: None,
            event_id: Some(format!("event-{i:02}")),
            sequence: SequenceNumber::new(&format!("{}", 1_000 + i)).unwrap(),
            sub_sequence: 0,
        };
        assert_eq!(
            store
                .record_state()
                .record_attempt(&key, Duration::from_secs(60), None)
                .await
                .unwrap(),
            1
        );
        let record = ParkedRecord {
            key: key.clone(),
            partition_key: format!("k{i}"),
            data: vec![1, 2, 3],
            data_size: 3,
            data_sha256: None,
            error: "poison".to_owned(),
            attempts: 3,
            parked_at: ctx.clock_now(),
        };
        store
            .record_state()
            .park(&record, Duration::from_secs(60))
            .await
            .unwrap();
        parked.push(record);
    }
    let keys = items_by_key(&ctx, store.layout().partition_key()).await;
    assert!(keys.len() > 4, "spread by event id: {keys:?}");
    let listed = store.record_state().list_parked().await.unwrap();
    assert_eq!(listed, parked, "every bucket, in sequence order");
    assert!(store
        .record_state()
        .remove_parked(&parked[4].key)
        .await
        .unwrap());
    assert_eq!(store.record_state().list_parked().await.unwrap().len(), 11);
}

/// Moves an item the way a `layout().respread` cut short had: put under `pk`, deleted
/// where it was.
async fn move_raw(ctx: &Ctx, from_pk: &str, sk: &str, to_pk: &str) {
    use aws_sdk_dynamodb::types::AttributeValue::S;
    let mut item = crate::support::common::raw_item(ctx, from_pk, sk)
        .await
        .unwrap();
    item.insert("pk".into(), S(to_pk.into()));
    ctx.aws
        .dynamodb
        .put_item()
        .table_name(&ctx.table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
    ctx.aws
        .dynamodb
        .delete_item()
        .table_name(&ctx.table)
        .key("pk", S(from_pk.into()))
        .key("sk", S(sk.into()))
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_group_moved_to_more_buckets_keeps_every_item_lease_and_checkpoint() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("respread");
    let store = store_with(&ctx, &group, 1);
    store.stream_item().init(1_000, None).await.unwrap();
    let shards = seed_shards(&store, 40).await;
    let me = ConsumerId::new("w").unwrap();
    let lease = store
        .leases()
        .acquire(&shards[7], &me, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .save(&lease, &Checkpoint::after("99").unwrap(), None)
        .await
        .unwrap();
    let own = ShardScope::Consumer(me.clone());
    store
        .checkpoints()
        .save_unleased(&own, &shards[3], &Checkpoint::after("5").unwrap(), None)
        .await
        .unwrap();
    let before = store.load_group().await.unwrap();

    let report = store
        .layout()
        .respread(Buckets::new(8).unwrap())
        .await
        .unwrap();
    assert_eq!((report.from.count(), report.to.count()), (1, 8));
    assert_eq!(report.moved + report.in_place, 41);
    assert!(report.moved > 30, "{report:?}");

    let keys = items_by_key(&ctx, store.layout().partition_key()).await;
    assert_eq!(keys.len(), 9, "{keys:?}");
    let after = store.load_group().await.unwrap();
    assert_eq!(
        after.shards, before.shards,
        "every lease and checkpoint as it was"
    );
    assert_eq!(after.own_shards, before.own_shards);
    assert_eq!(after.buckets.count(), 8);
    assert_eq!(after.stream.unwrap().schema_version, SCHEMA_VERSION);
    // The lease taken before the move still fences: its holder renews and
    // checkpoints it where it is now.
    store
        .leases()
        .renew(&lease, Duration::from_secs(60))
        .await
        .unwrap();
    store
        .checkpoints()
        .save(&lease, &Checkpoint::after("100").unwrap(), None)
        .await
        .unwrap();
    // A process started afterwards, configured for one bucket, follows.
    let later = store_with(&ctx, &group, 1);
    assert_eq!(
        later
            .shards()
            .get(&ShardScope::Group, &shards[7])
            .await
            .unwrap()
            .checkpoint,
        Some(Checkpoint::after("100").unwrap())
    );
}

#[tokio::test]
async fn a_move_cut_short_stops_new_processes_and_finishes_when_run_again() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("respread");
    let store = store_with(&ctx, &group, 1);
    store.stream_item().init(1_000, None).await.unwrap();
    let shards = seed_shards(&store, 20).await;
    let home = store.layout().partition_key().to_owned();
    // A run cut short: the layout marked, five items moved, the rest not.
    ctx.aws
        .dynamodb
        .update_item()
        .table_name(&ctx.table)
        .key(
            "pk",
            aws_sdk_dynamodb::types::AttributeValue::S(home.clone()),
        )
        .key(
            "sk",
            aws_sdk_dynamodb::types::AttributeValue::S("BUCKETS".into()),
        )
        .update_expression("SET moving_to = :to")
        .expression_attribute_values(
            ":to",
            aws_sdk_dynamodb::types::AttributeValue::N("8".into()),
        )
        .send()
        .await
        .unwrap();
    let eight = Buckets::new(8).unwrap();
    for shard in &shards[..5] {
        let to = store.layout().bucket_key(eight, eight.of(shard.as_str()));
        move_raw(&ctx, &home, &format!("SHARD#{shard}"), &to).await;
    }

    // A process starting now is refused, with a clear error.
    let starting = store_with(&ctx, &group, 1);
    let err = starting.stream_item().init(1_000, None).await.unwrap_err();
    assert!(
        matches!(
            err,
            shardkeeper::state::StateError::Respreading { from: 1, to: 8 }
        ),
        "{err}"
    );
    // Another count is refused too: the move under way must finish first.
    let err = store
        .layout()
        .respread(Buckets::new(4).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(err, shardkeeper::state::StateError::Respreading { .. }),
        "{err}"
    );

    let report = store.layout().respread(eight).await.unwrap();
    assert_eq!((report.moved, report.in_place), (15, 5));
    let started = store_with(&ctx, &group, 1);
    started.stream_item().init(1_000, None).await.unwrap();
    let read: Vec<_> = started
        .load_group()
        .await
        .unwrap()
        .shards
        .into_iter()
        .map(|s| s.shard_id)
        .collect();
    assert_eq!(read, shards);
    assert_eq!(items_by_key(&ctx, &home).await.len(), 9);
}

/// A writer still running from before the move (it read the old layout)
/// stores a checkpoint after the move read the group and before it moved
/// that item: the move finds the item changed, reads it again and moves it
/// as it is now. Before, the copy read first replaced it, and the
/// checkpoint moved back.
#[tokio::test]
async fn a_write_between_the_moves_read_and_its_move_is_kept() {
    let faulty = crate::support::faulty::Faulty::start(13).await;
    let group = shardkeeper_local::unique_name("respread-race");
    // The move goes through a proxy that holds every request 300 ms; the
    // writer goes straight to the server.
    let moving = store_with(&faulty.ctx, &group, 1);
    let direct_ctx = crate::support::common::Ctx {
        aws: faulty.direct.clone(),
        table: faulty.ctx.table.clone(),
        clock: faulty.ctx.clock.clone(),
    };
    let writer = store_with(&direct_ctx, &group, 1);
    writer.stream_item().init(1_000, None).await.unwrap();
    let shards = seed_shards(&writer, 4).await;
    let last = shards.last().unwrap();
    let lease = writer
        .leases()
        .acquire(
            last,
            &ConsumerId::new("w").unwrap(),
            Duration::from_secs(60),
        )
        .await
        .unwrap()
        .unwrap();
    writer
        .checkpoints()
        .save(&lease, &Checkpoint::after("10").unwrap(), None)
        .await
        .unwrap();
    faulty
        .dynamodb
        .set_faults(shardkeeper_local::Faults {
            delay: 1.0,
            latency: Duration::from_millis(300)..=Duration::from_millis(300),
            ..shardkeeper_local::Faults::none()
        })
        .unwrap();
    let respread =
        tokio::spawn(async move { moving.layout().respread(Buckets::new(8).unwrap()).await });
    // The mark, then the reads of the group (300 ms each): the items are
    // read; the last one is moved at least three moves (900 ms) later.
    let marked = std::time::Instant::now();
    while crate::support::common::raw_item(&direct_ctx, writer.layout().partition_key(), "BUCKETS")
        .await
        .and_then(|item| item.get("moving_to").cloned())
        .is_none()
    {
        assert!(marked.elapsed() < Duration::from_secs(10), "never marked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    writer
        .checkpoints()
        .save(&lease, &Checkpoint::after("20").unwrap(), None)
        .await
        .unwrap();
    let report = respread.await.unwrap().unwrap();
    assert_eq!(report.to.count(), 8);
    faulty
        .dynamodb
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    let after = store_with(&direct_ctx, &group, 8);
    let state = after.shards().get(&ShardScope::Group, last).await.unwrap();
    assert_eq!(state.checkpoint, Some(Checkpoint::after("20").unwrap()));
}

/// The observers' reads are the group without what only the records need
/// (failed attempts, parked payloads), eventually consistent: the whole
/// group (the reaper's, once a minute) has the same shards, consumers,
/// standalone shards and stream as a whole read; the leases (the
/// rebalancer's, every tick) cost under half its read units as the table
/// reports them; the home key (the reaper's, every tick) has the consumers
/// and no shard. In one key and over buckets.
#[tokio::test]
async fn an_observers_read_is_the_group_without_its_records_at_under_half_the_read_units() {
    let ctx = ctx().await;
    for buckets in [1, 8] {
        let group = shardkeeper_local::unique_name("observed");
        let store = store_with(&ctx, &group, buckets);
        store.stream_item().init(1_000, None).await.unwrap();
        let shards = seed_shards(&store, 16).await;
        let me = ConsumerId::new("w").unwrap();
        let info = shardkeeper::state::ConsumerInfo::for_this_process(me.clone(), store.now());
        store.consumers().heartbeat(&info).await.unwrap();
        store
            .leases()
            .acquire(&shards[3], &me, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        let own = shardkeeper::state::ShardSpec::new("shardId-000000000000").unwrap();
        store
            .shards()
            .ensure(&ShardScope::Consumer(me.clone()), &own)
            .await
            .unwrap();
        for i in 0..24u32 {
            let key = RecordKey {
                consumer: None,
                source: None,
                shard_id: Some(shards[(i % 16) as usize].clone()),
                event_id: None,
                sequence: SequenceNumber::new(&format!("{}", 1_000 + i)).unwrap(),
                sub_sequence: 0,
            };
            store
                .record_state()
                .record_attempt(&key, Duration::from_secs(60), None)
                .await
                .unwrap();
            let record = ParkedRecord {
                key,
                partition_key: format!("k{i}"),
                data: vec![7; 1024],
                data_size: 1024,
                data_sha256: None,
                error: "poison".to_owned(),
                attempts: 3,
                parked_at: ctx.clock_now(),
            };
            store
                .record_state()
                .park(&record, Duration::from_secs(60))
                .await
                .unwrap();
        }
        // AWS charges a strongly consistent read one unit a 4 KB (a 9 KB
        // item: 3); a server that does not (moto reports one a request)
        // cannot show what a read costs, only what it returns.
        let by_size = sized_capacity(&ctx).await;
        let units = |store: &StateStore| store.stats().read_milliunits;
        let before = units(&store);
        let whole = store.load_group().await.unwrap();
        let whole_units = units(&store) - before;
        let observed = store.observe_group(GroupPart::Group).await.unwrap();
        assert_eq!(observed.shards, whole.shards, "{buckets} buckets");
        assert_eq!(observed.consumers, whole.consumers);
        assert_eq!(observed.own_shards, whole.own_shards);
        assert_eq!(observed.stream, whole.stream);
        assert_eq!(observed.own_shards.len(), 1);
        let before = units(&store);
        let leases = store.observe_group(GroupPart::Leases).await.unwrap();
        let observed_units = units(&store) - before;
        assert_eq!(leases.shards, whole.shards);
        assert_eq!(leases.consumers, whole.consumers);
        assert!(
            !by_size || (whole_units > 0 && observed_units * 2 < whole_units),
            "{buckets} buckets: observed {observed_units}, whole {whole_units} (thousandths)"
        );
        let home = store.observe_group(GroupPart::Home).await.unwrap();
        assert!(home.shards.is_empty(), "{buckets} buckets");
        assert_eq!(home.consumers, whole.consumers);
        assert_eq!(home.stream, whole.stream);
    }
}

/// Whether the server reports read capacity by item size, as DynamoDB does
/// (<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>):
/// a strongly consistent GetItem of a 9 KB item is 3 read units.
async fn sized_capacity(ctx: &Ctx) -> bool {
    use aws_sdk_dynamodb::types::{AttributeValue::S, ReturnConsumedCapacity};
    let key = shardkeeper_local::unique_name("sized");
    ctx.aws
        .dynamodb
        .put_item()
        .table_name(&ctx.table)
        .item("pk", S(key.clone()))
        .item("sk", S("item".into()))
        .item("data", S("x".repeat(9 * 1024)))
        .send()
        .await
        .unwrap();
    let out = ctx
        .aws
        .dynamodb
        .get_item()
        .table_name(&ctx.table)
        .key("pk", S(key))
        .key("sk", S("item".into()))
        .consistent_read(true)
        .return_consumed_capacity(ReturnConsumedCapacity::Total)
        .send()
        .await
        .unwrap();
    let units = out.consumed_capacity().and_then(|c| c.capacity_units());
    if units != Some(3.0) {
        println!("the server reports {units:?} read units for a 9 KB item, not 3: read costs not compared");
    }
    units == Some(3.0)
}
