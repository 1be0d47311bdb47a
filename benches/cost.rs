//! Cost benchmark: DynamoDB requests and write/read units of the state store's
//! operations for groups of 8, 1,024 and 10,000 shards, against the baseline of
//! keeping a whole group in one item (the layout of lifion-kinesis), measured in
//! the same run on the in-process DynamoDB server.
//!
//! Run: `cargo bench --bench cost` (prints a Markdown table).

#[allow(dead_code)]
mod support;

use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::state::{
    cost, Checkpoint, ConsumerId, ConsumerInfo, RawItem, ShardScope, ShardSpec, StateStore,
    StoreConfig, TakeFrom,
};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::HashMap;
use std::time::Duration;

const SEQ: &str = "49590338271490256608559692538361571095921575989136588898";

struct Row {
    shards: usize,
    op: &'static str,
    requests: u64,
    bytes: usize,
    units: u64,
    unit: &'static str,
}

impl Row {
    fn write(shards: usize, op: &'static str, requests: u64, bytes: usize) -> Self {
        Row {
            shards,
            op,
            requests,
            bytes,
            units: cost::write_units(bytes),
            unit: "WCU",
        }
    }
}

async fn raw_item(aws: &AwsClients, table: &str, pk: &str, sk: &str) -> RawItem {
    aws.dynamodb
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.into()))
        .key("sk", AttributeValue::S(sk.into()))
        .send()
        .await
        .expect("get item")
        .item
        .expect("item exists")
}

/// The seed's layout: the whole group in one item, one map entry per shard.
fn single_item_group(shards: usize, consumers: usize) -> RawItem {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let shard = |i: usize| {
        let fields: HashMap<String, AttributeValue> = [
            ("checkpoint", s(SEQ)),
            ("depleted", AttributeValue::Bool(false)),
            ("leaseExpiration", s("2026-11-21T05:00:00.000Z")),
            ("leaseOwner", s(&format!("consumer-{:04}", i % consumers))),
            ("parent", AttributeValue::Null(true)),
            ("version", s("mhvXdrZT4jP5T8vE5xcwaA")),
            ("approximateArrivalTimestamp", s("2026-11-21T05:00:00.000Z")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        (format!("shardId-{i:012}"), AttributeValue::M(fields))
    };
    let consumer = |i: usize| {
        let fields: HashMap<String, AttributeValue> = [
            ("appName", s("orders-app")),
            ("heartbeat", s("2026-11-21T05:00:00.000Z")),
            ("host", s("ip-10-0-0-1")),
            ("isActive", AttributeValue::Bool(true)),
            ("isStandalone", AttributeValue::Bool(false)),
            ("pid", AttributeValue::N("4242".into())),
            ("startedOn", s("2026-11-21T04:00:00.000Z")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        (format!("consumer-{i:04}"), AttributeValue::M(fields))
    };
    [
        ("pk".to_owned(), s("baseline#orders")),
        ("sk".to_owned(), s("GROUP")),
        ("consumerGroup".to_owned(), s("billing")),
        ("streamName".to_owned(), s("orders")),
        ("streamCreatedOn".to_owned(), s("2026-11-01T00:00:00.000Z")),
        ("version".to_owned(), s("mhvXdrZT4jP5T8vE5xcwaA")),
        (
            "shards".to_owned(),
            AttributeValue::M((0..shards).map(shard).collect()),
        ),
        (
            "consumers".to_owned(),
            AttributeValue::M((0..consumers).map(consumer).collect()),
        ),
        (
            "enhancedConsumers".to_owned(),
            AttributeValue::M(HashMap::new()),
        ),
    ]
    .into_iter()
    .collect()
}

async fn measure(aws: &AwsClients, table: &str, shards: usize, rows: &mut Vec<Row>) {
    let group = unique_name("bench");
    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new(&group, "orders")
            .unwrap()
            .table(table)
            .unwrap(),
    );
    let consumers = 16.min(shards);
    // Seed the group: every shard, each leased and checkpointed, and the consumers.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..16 {
        let store = store.clone();
        tasks.spawn(async move {
            for i in (w..shards).step_by(16) {
                let spec = ShardSpec::new(&format!("shardId-{i:012}")).unwrap();
                store
                    .shards()
                    .ensure(&ShardScope::Group, &spec)
                    .await
                    .unwrap();
                let owner = ConsumerId::new(format!("consumer-{:04}", i % consumers)).unwrap();
                let lease = store
                    .leases()
                    .acquire(&spec.shard_id, &owner, Duration::from_secs(300))
                    .await
                    .unwrap()
                    .unwrap();
                let cp = Checkpoint::after(SEQ).unwrap();
                store
                    .checkpoints()
                    .save(&lease, &cp, Some(1_700_000_000_000))
                    .await
                    .unwrap();
            }
        });
    }
    tasks.join_all().await;
    for i in 0..consumers {
        let id = ConsumerId::new(format!("consumer-{i:04}")).unwrap();
        store
            .consumers()
            .heartbeat(&ConsumerInfo::for_this_process(id, store.now()))
            .await
            .unwrap();
    }
    let pk = store.layout().partition_key().to_owned();
    let target = shards - 1;
    let shard_sk = format!("SHARD#shardId-{target:012}");
    let me = ConsumerId::new(format!("consumer-{:04}", target % consumers)).unwrap();
    let shard_id = format!("shardId-{target:012}").as_str().try_into().unwrap();

    // Checkpoint.
    let lease = store.leases().owned_shards(&me).await.unwrap();
    let lease = lease
        .iter()
        .find(|s| s.shard_id == shard_id)
        .and_then(|s| s.lease())
        .unwrap();
    let before = aws.dynamodb_requests.snapshot();
    let later = format!("{SEQ}1");
    store
        .checkpoints()
        .save(
            &lease,
            &Checkpoint::after_sub(&later, 2).unwrap(),
            Some(1_700_000_000_500),
        )
        .await
        .unwrap();
    let requests = aws.dynamodb_requests.requests_since(&before);
    let bytes = cost::item_size(&raw_item(aws, table, &pk, &shard_sk).await);
    rows.push(Row::write(shards, "checkpoint", requests, bytes));

    // Heartbeat.
    let before = aws.dynamodb_requests.snapshot();
    store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(me.clone(), store.now()))
        .await
        .unwrap();
    let requests = aws.dynamodb_requests.requests_since(&before);
    let bytes = cost::item_size(&raw_item(aws, table, &pk, &format!("CONSUMER#{me}")).await);
    rows.push(Row::write(shards, "heartbeat", requests, bytes));

    // Lease take (the rebalancer's assignment by counter).
    let other = ConsumerId::new("consumer-new").unwrap();
    let before = aws.dynamodb_requests.snapshot();
    store
        .leases()
        .take(
            &lease.shard_id,
            &other,
            &TakeFrom::Stale {
                counter: lease.counter,
                expires: Some(lease.expires),
                session: None,
            },
            Some("holding-token"),
            Duration::from_secs(300),
        )
        .await
        .unwrap()
        .unwrap();
    let requests = aws.dynamodb_requests.requests_since(&before);
    let bytes = cost::item_size(&raw_item(aws, table, &pk, &shard_sk).await);
    rows.push(Row::write(shards, "lease take", requests, bytes));

    // Full read of the group.
    let before = aws.dynamodb_requests.snapshot();
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.shards.len(), shards);
    let requests = aws.dynamodb_requests.requests_since(&before);
    let items: Vec<RawItem> = store
        .client()
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk.clone()))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    let bytes: usize = items.iter().map(cost::item_size).sum();
    rows.push(Row {
        shards,
        op: "full group read",
        requests,
        bytes,
        units: cost::read_units(bytes),
        unit: "RCU",
    });

    // Baseline: the whole group in one item; every checkpoint rewrites it.
    let single = single_item_group(shards, consumers);
    let bytes = cost::item_size(&single);
    let accepted = aws
        .dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(single))
        .send()
        .await
        .is_ok();
    let op = if accepted {
        "baseline: one-item group, checkpoint"
    } else {
        "baseline: one-item group, checkpoint (item over 400 KB: rejected)"
    };
    rows.push(Row {
        shards,
        op,
        requests: 1,
        bytes,
        units: cost::write_units(bytes),
        unit: "WCU",
    });
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let table = support::state_table(&aws, "bench").await;
        let mut rows = Vec::new();
        for shards in [8, 1024, 10_000] {
            measure(&aws, &table, shards, &mut rows).await;
        }
        println!("| shards | operation | requests | item bytes | units |");
        println!("| ---: | --- | ---: | ---: | ---: |");
        for r in &rows {
            println!("| {} | {} | {} | {} | {} {} |", r.shards, r.op, r.requests, r.bytes, r.units, r.unit);
        }
        println!();
        println!("| shards | checkpoint WCU, one item per shard | checkpoint WCU, one item per group | ratio |");
        println!("| ---: | ---: | ---: | ---: |");
        for shards in [8, 1024, 10_000] {
            let ours = rows.iter().find(|r| r.shards == shards && r.op == "checkpoint").unwrap();
            let base = rows.iter().find(|r| r.shards == shards && r.op.starts_with("baseline")).unwrap();
            println!("| {shards} | {} | {} | {}x |", ours.units, base.units, base.units / ours.units);
        }
    });
}
