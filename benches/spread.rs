//! Scale benchmark of the bucket layout: for groups of 1,000, 10,000 and
//! 20,000 shards, one checkpoint of every shard (one second at one
//! checkpoint per shard per second), under one partition key (the layout
//! before buckets) and spread over the buckets `Buckets::for_shards` chooses,
//! measured in the same run on the in-process DynamoDB server.
//!
//! Reports, per layout:
//! - the write units a second the busiest partition key is asked for: every
//!   UpdateItem is kept by the request counter on the client (its partition
//!   and sort key), and each costs the write units of its item, sized by
//!   DynamoDB's rules;
//! - the group read (`load_group`): its requests, its read units (strongly
//!   consistent, 4 KB each, counted per key) and its median wall time;
//! - one checkpoint's requests and write units;
//! - a consumer's pickup of the 16 shards given to it (named beside its
//!   assignment counter, as the rebalancer gives them): its reads and their
//!   read units, against the group read it was before names.
//!
//! Run: `cargo bench --bench spread` (a few minutes: it writes about 200,000
//! items).

#[allow(dead_code)]
mod support;

use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::state::{
    cost, Buckets, Checkpoint, ConsumerId, ConsumerInfo, Lease, RawItem, ShardId, ShardScope,
    ShardSpec, SpreadPolicy, StateStore, StoreConfig, TakeFrom,
};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const SEQ: &str = "49590338271490256608559692538361571095921575989136588898";
const TASKS: usize = 16;
/// Shards left free, then given to one newcomer.
const GIVEN: usize = 16;

/// The requests the client sent since the last call, as (operation,
/// partition key, sort key), from the servers' request counter's log.
fn take_keys(aws: &AwsClients) -> Vec<(String, String, String)> {
    aws.dynamodb_requests
        .take_log()
        .into_iter()
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            let key = |name: &str| {
                body.pointer(&format!("/Key/{name}/S"))
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            (r.operation, key("pk"), key("sk"))
        })
        .collect()
}

struct Layout {
    name: &'static str,
    buckets: Buckets,
    busiest_wcu: u64,
    keys: usize,
    read_requests: usize,
    read_rcu: u64,
    read_ms: f64,
    checkpoint_requests: usize,
    checkpoint_wcu: u64,
    pickup_requests: usize,
    pickup_rcu: u64,
}

/// Every item under `pk`, raw.
async fn items_under(aws: &AwsClients, table: &str, pk: &str) -> Vec<RawItem> {
    aws.dynamodb
        .query()
        .table_name(table)
        .key_condition_expression("pk = :pk")
        .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
        .into_paginator()
        .items()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap()
}

async fn measure(
    aws: &AwsClients,
    table: &str,
    shards: usize,
    name: &'static str,
    buckets: Buckets,
) -> Layout {
    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new(&unique_name("scale"), "orders")
            .unwrap()
            .table(table)
            .unwrap()
            .buckets(buckets),
    );
    store
        .stream_item()
        .init(1_700_000_000_000, None)
        .await
        .unwrap();
    // The group: every shard, leased by one of 16 consumers.
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..TASKS {
        let store = store.clone();
        tasks.spawn(async move {
            let mut leases = Vec::new();
            for i in (w..shards).step_by(TASKS) {
                let spec = ShardSpec::new(&format!("shardId-{i:012}")).unwrap();
                store
                    .shards()
                    .ensure(&ShardScope::Group, &spec)
                    .await
                    .unwrap();
                if i < GIVEN {
                    continue; // given to the newcomer below
                }
                let owner = ConsumerId::new(format!("consumer-{:04}", i % 16)).unwrap();
                let lease = store
                    .leases()
                    .acquire(&spec.shard_id, &owner, Duration::from_secs(3600))
                    .await
                    .unwrap()
                    .unwrap();
                leases.push(lease);
            }
            leases
        });
    }
    let leases: Vec<Lease> = tasks.join_all().await.into_iter().flatten().collect();

    // One second at one checkpoint per shard per second.
    take_keys(aws);
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in leases.chunks(leases.len().div_ceil(TASKS)) {
        let store = store.clone();
        let chunk = chunk.to_vec();
        tasks.spawn(async move {
            for lease in &chunk {
                let cp = Checkpoint::after_sub(SEQ, 7).unwrap();
                store
                    .checkpoints()
                    .save(lease, &cp, Some(1_700_000_000_000))
                    .await
                    .unwrap();
            }
        });
    }
    tasks.join_all().await;
    let writes = take_keys(aws);

    // Each written item's size, by DynamoDB's rules, read raw from each key.
    let mut sizes: HashMap<(String, String), usize> = HashMap::new();
    let mut key_bytes: BTreeMap<String, usize> = BTreeMap::new();
    let home = store.layout().partition_key().to_owned();
    let mut pks: Vec<String> = (0..buckets.count())
        .map(|b| store.layout().bucket_key(buckets, b))
        .collect();
    if buckets != Buckets::ONE {
        pks.push(home.clone());
    }
    for pk in &pks {
        for item in items_under(aws, table, pk).await {
            let size = cost::item_size(&item);
            let sk = item["sk"].as_s().unwrap().clone();
            *key_bytes.entry(pk.clone()).or_default() += size;
            sizes.insert((pk.clone(), sk), size);
        }
    }
    let mut per_key: BTreeMap<String, u64> = BTreeMap::new();
    for (operation, pk, sk) in &writes {
        assert_eq!(operation, "UpdateItem");
        let size = sizes[&(pk.clone(), sk.clone())];
        *per_key.entry(pk.clone()).or_default() += cost::write_units(size);
    }
    assert_eq!(writes.len(), shards - GIVEN, "one request per checkpoint");

    // The group read, timed; its requests and read units.
    let mut times = Vec::new();
    let mut read_requests = 0;
    for _ in 0..5 {
        take_keys(aws);
        let started = Instant::now();
        let snapshot = store.load_group().await.unwrap();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(snapshot.shards.len(), shards);
        read_requests = take_keys(aws).len();
    }
    times.sort_by(f64::total_cmp);
    let read_rcu: u64 = key_bytes.values().map(|b| cost::read_units(*b)).sum();

    // One more checkpoint: its requests and write units.
    take_keys(aws);
    let lease = &leases[leases.len() / 2];
    store
        .checkpoints()
        .save(
            lease,
            &Checkpoint::after_sub(SEQ, 8).unwrap(),
            Some(1_700_000_000_001),
        )
        .await
        .unwrap();
    let one = take_keys(aws);
    let (_, pk, sk) = &one[0];
    let item = items_under(aws, table, pk)
        .await
        .into_iter()
        .find(|i| i["sk"].as_s().unwrap() == sk)
        .unwrap();

    // A newcomer registers (reading the group once), then is given the
    // free shards as the rebalancer gives them; its next tick picks them up.
    let newcomer = ConsumerId::new("newcomer").unwrap();
    let info = ConsumerInfo::for_this_process(newcomer.clone(), store.now());
    let mut session = ConsumerSession::new(store.clone(), info, Duration::from_secs(3600));
    session.tick(|_| None).await.unwrap();
    let given: Vec<ShardId> = (0..GIVEN)
        .map(|i| ShardId::new(format!("shardId-{i:012}")).unwrap())
        .collect();
    let free = TakeFrom::Stale {
        counter: 0,
        expires: None,
        session: None,
    };
    for shard in &given {
        store
            .leases()
            .take(shard, &newcomer, &free, None, Duration::from_secs(3600))
            .await
            .unwrap()
            .unwrap();
    }
    store
        .consumers()
        .notify_assigned(&newcomer, &given)
        .await
        .unwrap();
    take_keys(aws);
    let tick = session.tick(|_| None).await.unwrap();
    assert_eq!(tick.gained.len(), GIVEN);
    let mut pickup_requests = 0;
    let mut pickup_rcu = 0;
    for (operation, pk, sk) in take_keys(aws) {
        match operation.as_str() {
            "GetItem" => {
                let item = items_under(aws, table, &pk)
                    .await
                    .into_iter()
                    .find(|i| i["sk"].as_s().unwrap() == &sk)
                    .unwrap();
                pickup_requests += 1;
                pickup_rcu += cost::read_units(cost::item_size(&item));
            }
            "Query" => panic!("the pickup read the group"),
            _ => {}
        }
    }

    Layout {
        name,
        buckets,
        busiest_wcu: per_key.values().copied().max().unwrap_or(0),
        keys: per_key.len(),
        read_requests,
        read_rcu,
        read_ms: times[times.len() / 2],
        checkpoint_requests: one.len(),
        checkpoint_wcu: cost::write_units(cost::item_size(&item)),
        pickup_requests,
        pickup_rcu,
    }
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let table = support::state_table(&aws, "scale").await;
        aws.dynamodb_requests.start_log();
        println!("| shards | layout | buckets | keys written | busiest key, WCU/s | group read: requests | RCU | median ms | checkpoint: requests | WCU | pickup of {GIVEN} given: requests | RCU |");
        println!("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for shards in [1_000, 10_000, 20_000] {
            let spread = Buckets::for_shards(shards, &SpreadPolicy::default());
            for (name, buckets) in [("one key (before buckets)", Buckets::ONE), ("spread", spread)] {
                let l = measure(&aws, &table, shards, name, buckets).await;
                println!(
                    "| {shards} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
                    l.name,
                    l.buckets,
                    l.keys,
                    l.busiest_wcu,
                    l.read_requests,
                    l.read_rcu,
                    l.read_ms,
                    l.checkpoint_requests,
                    l.checkpoint_wcu,
                    l.pickup_requests,
                    l.pickup_rcu
                );
            }
        }
    });
}
