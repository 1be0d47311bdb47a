//! What keeping a group alive costs: DynamoDB requests of an idle group in
//! one minute, counted at the client on the in-process servers, for 64,
//! 1,000 and 10,000 shards, with the consumers a worker fleet runs for them
//! (32 shards a worker), the rebalancer and the reaper at their defaults
//! (sessions tick every 3 s, the rebalancer and the reaper every 5 s, lease
//! term 10 s), on a simulated clock.
//!
//! It prints the requests of each operation in the measured minute, the
//! writes, the read units the table reported in its answers (counted at
//! the client: every store read asks for its consumed capacity), and the
//! size of the group. Run it on
//! this commit and on one from before sessions to compare the protocols
//! (docs/BENCHMARKS.md, "What liveness costs", has both and the cost model).
//!
//! Run: `cargo bench --bench liveness` (a few minutes);
//! `SHARDKEEPER_BENCH_SHARDS=64,1000` to choose the sizes.

#[allow(dead_code)]
mod support;

use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::{Reaper, Rebalancer};
use shardkeeper::group::{ReapConfig, RebalanceConfig};
use shardkeeper::state::{
    Buckets, ConsumerId, ConsumerInfo, ManualClock, SpreadPolicy, StateStore, StoreConfig,
    TableOptions,
};
use shardkeeper_local::{
    unique_name, AwsClients, Endpoints, LocalOptions, LocalServers, OperationCount, DYNAMODB_WRITES,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS_PER_WORKER: usize = 32;
const LEASE_TERM: Duration = Duration::from_secs(10);
const SESSION_EVERY_S: u64 = 3;
const TICK_EVERY_S: u64 = 5;

struct Measured {
    shards: usize,
    consumers: usize,
    requests: BTreeMap<String, OperationCount>,
    /// Read units the table reported for the minute's reads (thousandths).
    read_milliunits: u64,
    /// The requests of one rotation (a worker leaves, another takes its
    /// shards), and the read units they cost (thousandths).
    rotation: BTreeMap<String, OperationCount>,
    rotation_milliunits: u64,
    moved: usize,
    buckets: u16,
    group_bytes: usize,
    group_items: usize,
    setup: Duration,
    minute: Duration,
}

async fn measure(shards: usize) -> Measured {
    let started = Instant::now();
    let consumers = shards.div_ceil(SHARDS_PER_WORKER);
    // Servers of its own, with room for the size's shards.
    let servers = LocalServers::start(LocalOptions {
        shard_limit: (shards as u32).max(10_000),
        ..LocalOptions::default()
    })
    .expect("servers");
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let stream = unique_name("liveness");
    aws.kinesis
        .create_stream()
        .stream_name(&stream)
        .shard_count(shards as i32)
        .send()
        .await
        .unwrap();
    let clock = ManualClock::new(1_800_000_000_000);
    let table = unique_name("liveness");
    // The layout a group of this size gets when its functions start.
    let buckets = Buckets::for_shards(shards, &SpreadPolicy::default());
    let config = StoreConfig::new("bench", &stream)
        .unwrap()
        .table(&table)
        .unwrap()
        .buckets(buckets);
    let store = StateStore::with_clock(aws.dynamodb.clone(), config, Arc::new(clock.clone()));
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    let rebalancer = Rebalancer::new(
        store.clone(),
        aws.kinesis.clone(),
        RebalanceConfig::default().lease_term(LEASE_TERM),
    );
    let reaper = Reaper::new(store.clone(), aws.kinesis.clone(), ReapConfig::default());
    let mut sessions: Vec<ConsumerSession> = (0..consumers)
        .map(|i| {
            let id = ConsumerId::new(format!("worker-{i:04}")).unwrap();
            let info = ConsumerInfo::for_this_process(id, store.now());
            ConsumerSession::new(store.clone(), info, LEASE_TERM)
        })
        .collect();
    // Balanced: the sessions register, the rebalancer gives every shard,
    // the sessions take them up.
    let mut t = 0u64;
    loop {
        clock.advance(Duration::from_secs(1));
        t += 1;
        if t.is_multiple_of(SESSION_EVERY_S) {
            for s in sessions.iter_mut() {
                s.tick(|_| None).await.unwrap();
            }
        }
        if t.is_multiple_of(TICK_EVERY_S) {
            rebalancer.tick().await.unwrap();
            reaper.tick().await.unwrap();
        }
        let held: usize = sessions.iter().map(|s| s.leases().count()).sum();
        if held == shards && t % TICK_EVERY_S == 1 {
            break;
        }
        assert!(t < 600, "not balanced after {t} s: {held} of {shards} held");
    }
    let setup = started.elapsed();

    // One idle minute.
    let started = Instant::now();
    let before = aws.dynamodb_requests.snapshot();
    let units_before = store.stats().read_milliunits;
    for _ in 0..60 {
        clock.advance(Duration::from_secs(1));
        t += 1;
        if t.is_multiple_of(SESSION_EVERY_S) {
            for s in sessions.iter_mut() {
                let tick = s.tick(|_| None).await.unwrap();
                assert!(tick.lost.is_empty(), "{tick:?}");
            }
        }
        if t.is_multiple_of(TICK_EVERY_S) {
            rebalancer.tick().await.unwrap();
            reaper.tick().await.unwrap();
        }
    }
    let requests = aws.dynamodb_requests.since(&before);
    let read_milliunits = store.stats().read_milliunits - units_before;
    let minute = started.elapsed();

    // One rotation of a fleet: a worker leaves at the end of its run
    // (checkpoints nothing here, releases each lease, deregisters), a new
    // one registers (reading the group once), the rebalancer gives it the
    // freed leases, and it takes them up.
    let before = aws.dynamodb_requests.snapshot();
    let units_before = store.stats().read_milliunits;
    let mut leaving = sessions.remove(0);
    let moved = leaving.leases().count();
    leaving.leave(|_| None).await.unwrap();
    let id = ConsumerId::new("worker-new").unwrap();
    let mut newcomer = ConsumerSession::new(
        store.clone(),
        ConsumerInfo::for_this_process(id, store.now()),
        LEASE_TERM,
    );
    newcomer.tick(|_| None).await.unwrap();
    clock.advance(Duration::from_secs(1));
    rebalancer.tick().await.unwrap();
    clock.advance(Duration::from_secs(1));
    newcomer.tick(|_| None).await.unwrap();
    // The freed leases went to the newcomer (and, over its quota, to a
    // consumer below its own).
    assert!(newcomer.leases().count() + 1 >= moved);
    let rotation = aws.dynamodb_requests.since(&before);
    let rotation_milliunits = store.stats().read_milliunits - units_before;

    // The group as a read returns it.
    let mut group_bytes = 0;
    let mut group_items = 0;
    let mut start = None;
    loop {
        let page = aws
            .dynamodb
            .scan()
            .table_name(&table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            group_bytes += shardkeeper::state::cost::item_size(item);
            group_items += 1;
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    Measured {
        shards,
        consumers,
        requests,
        read_milliunits,
        rotation,
        rotation_milliunits,
        moved,
        buckets: buckets.count(),
        group_bytes,
        group_items,
        setup,
        minute,
    }
}

fn main() {
    let sizes: Vec<usize> = std::env::var("SHARDKEEPER_BENCH_SHARDS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().parse().unwrap()).collect())
        .unwrap_or_else(|| vec![64, 1000, 10_000]);
    let runtime = support::runtime();
    println!(
        "An idle group for one simulated minute, DynamoDB requests counted at the client \
         (sessions every {SESSION_EVERY_S} s, rebalancer and reaper every {TICK_EVERY_S} s, \
         {SHARDS_PER_WORKER} shards a consumer):\n"
    );
    println!("| shards | buckets | consumers | writes/min | of them UpdateItem | reads/min (requests) | read units/min | group | run |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut rotations = Vec::new();
    for shards in sizes {
        let m = runtime.block_on(measure(shards));
        let count = |op: &str| m.requests.get(op).map_or(0, |c| c.requests);
        let writes: u64 = DYNAMODB_WRITES.iter().map(|op| count(op)).sum();
        let queries = count("Query");
        let gets = count("GetItem");
        // As the table reported them in its answers (every store read asks
        // for its consumed capacity), not computed from sizes.
        let read_units = m.read_milliunits as f64 / 1000.0;
        println!(
            "| {} | {} | {} | {} | {} | {} ({queries} Query, {gets} GetItem) | {:.0} | {} items, {} KB | {:.0} s + {:.0} s |",
            m.shards,
            m.buckets,
            m.consumers,
            writes,
            count("UpdateItem"),
            queries + gets,
            read_units,
            m.group_items,
            m.group_bytes / 1024,
            m.setup.as_secs_f64(),
            m.minute.as_secs_f64(),
        );
        eprintln!("{shards} shards: {:?}", m.requests);
        let rot = |op: &str| m.rotation.get(op).map_or(0, |c| c.requests);
        // A transaction of a give is two items, two write units each.
        let rotation_writes =
            rot("UpdateItem") + rot("PutItem") + rot("DeleteItem") + 4 * rot("TransactWriteItems");
        rotations.push(format!(
            "| {} | {} | {} UpdateItem, {} DeleteItem, {} TransactWriteItems: {} write units | {} Query, {} GetItem: {:.0} read units |",
            m.shards,
            m.moved,
            rot("UpdateItem"),
            rot("DeleteItem"),
            rot("TransactWriteItems"),
            rotation_writes,
            rot("Query"),
            rot("GetItem"),
            m.rotation_milliunits as f64 / 1000.0,
        ));
        eprintln!("{shards} shards, one rotation: {:?}", m.rotation);
    }
    println!("\nOne rotation of a worker fleet (a worker leaves, a new one takes its shards):\n");
    println!("| shards | leases moved | writes | reads |");
    println!("| ---: | ---: | --- | --- |");
    for row in rotations {
        println!("{row}");
    }
}
