//! Failover and scale-out in real time with the default settings (10 s
//! lease term, 10 s heartbeat timeout, heartbeats every 3 s, rebalancer and
//! reaper ticks every 5 s), on the in-process servers: 64 shards, a producer
//! writing to every shard all along, one consumer, then three more join
//! (scale-out), then one is killed (no release, no more heartbeats). Reports
//! how long until the group is balanced, how long the killed consumer's
//! shards went unread, and the DynamoDB requests of an idle group per
//! minute.
//!
//! The floor of the failover is the lease term: a lease can move no earlier
//! than one term after its holder's last heartbeat (the rebalancer must have
//! seen its session unchanged that long), so the report gives the ratio to it.
//!
//! Run: `cargo bench --bench failover` (about two and a half minutes).

#[allow(dead_code)]
mod support;

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::PutRecordsRequestEntry;
use shardkeeper::consumer::{ConsumerSession, ShardWorker, WorkerConfig};
use shardkeeper::functions::{Reaper, Rebalancer};
use shardkeeper::group::{ReapConfig, RebalanceConfig};
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const SHARDS: i32 = 64;
const TICK: Duration = Duration::from_secs(5);

/// When each shard last had a record processed, and by whom.
type Seen = Arc<Mutex<HashMap<String, (Instant, String)>>>;

fn spawn_worker(store: &StateStore, aws: &AwsClients, name: &str, seen: &Seen) -> JoinHandle<()> {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let term = RebalanceConfig::default().lease_term;
    let session = ConsumerSession::new(store.clone(), info, term);
    let (seen, me) = (seen.clone(), name.to_owned());
    let handler = move |r: StreamRecord| {
        let (seen, me) = (seen.clone(), me.clone());
        async move {
            seen.lock()
                .unwrap()
                .insert(r.shard_id.to_string(), (Instant::now(), me));
            Ok::<(), std::io::Error>(())
        }
    };
    let mut worker = ShardWorker::new(
        session,
        store.clone(),
        aws.kinesis.clone(),
        handler,
        WorkerConfig::default(),
    );
    tokio::spawn(async move {
        let _ = worker.run_until(None, || false).await;
    })
}

/// Leases held now by each consumer (stored expiry in the future; one clock here).
/// Leases held by registered consumers (a consumer's session keeps them).
async fn holdings(store: &StateStore) -> BTreeMap<String, usize> {
    let group = store.load_group().await.unwrap();
    let mut out = BTreeMap::new();
    for s in group.shards.iter().filter(|s| !s.depleted) {
        let Some(owner) = s.owner.as_ref() else {
            continue;
        };
        if group.consumers.iter().any(|c| c.id() == owner) {
            *out.entry(owner.to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// Every shard held, by `consumers` consumers holding a share each (within one).
fn balanced(held: &BTreeMap<String, usize>, consumers: usize) -> bool {
    let (min, max) = (
        held.values().min().copied().unwrap_or(0),
        held.values().max().copied().unwrap_or(0),
    );
    held.len() == consumers && held.values().sum::<usize>() == SHARDS as usize && max - min <= 1
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let stream = unique_name("failover");
        aws.kinesis.create_stream().stream_name(&stream).shard_count(SHARDS).send().await.unwrap();
        let table = support::state_table(&aws, "failover").await;
        let config = StoreConfig::new(&unique_name("g"), &stream).unwrap().table(&table).unwrap();
        let store = StateStore::new(aws.dynamodb.clone(), config);

        // A record on every shard every 100 ms (explicit hash keys spread evenly).
        let producing = Arc::new(AtomicBool::new(true));
        let producer = {
            let (kinesis, stream, on) = (aws.kinesis.clone(), stream.clone(), producing.clone());
            tokio::spawn(async move {
                let step = u128::MAX / SHARDS as u128;
                while on.load(Ordering::Relaxed) {
                    let entries: Vec<_> = (0..SHARDS as u128)
                        .map(|i| {
                            PutRecordsRequestEntry::builder()
                                .partition_key("k")
                                .explicit_hash_key((i * step + step / 2).to_string())
                                .data(Blob::new("x"))
                                .build()
                                .unwrap()
                        })
                        .collect();
                    let _ = kinesis.put_records().stream_name(&stream).set_records(Some(entries)).send().await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let rebalancer = Rebalancer::new(store.clone(), aws.kinesis.clone(), RebalanceConfig::default());
        let reaper = Reaper::new(store.clone(), aws.kinesis.clone(), ReapConfig::default());
        let scheduled = tokio::spawn(async move {
            loop {
                let _ = rebalancer.tick().await;
                let _ = reaper.tick().await;
                tokio::time::sleep(TICK).await;
            }
        });

        let seen: Seen = Arc::default();
        let start = Instant::now();
        let mut workers = vec![spawn_worker(&store, &aws, "c0", &seen)];
        while !balanced(&holdings(&store).await, 1) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let first = start.elapsed();

        let joined = Instant::now();
        for i in 1..4 {
            workers.push(spawn_worker(&store, &aws, &format!("c{i}"), &seen));
        }
        while !balanced(&holdings(&store).await, 4) {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let scale_out = joined.elapsed();
        tokio::time::sleep(Duration::from_secs(5)).await;

        // Kill c3: its shards go unread until their leases move.
        let victim_shards: Vec<String> = {
            let seen = seen.lock().unwrap();
            seen.iter().filter(|(_, (_, who))| who == "c3").map(|(s, _)| s.clone()).collect()
        };
        workers.pop().unwrap().abort();
        let killed = Instant::now();
        let mut gaps: BTreeMap<String, Duration> = BTreeMap::new();
        while gaps.len() < victim_shards.len() && killed.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let seen = seen.lock().unwrap();
            for shard in &victim_shards {
                if let Some((at, who)) = seen.get(shard) {
                    if *at > killed && who != "c3" && !gaps.contains_key(shard) {
                        gaps.insert(shard.clone(), at.duration_since(killed));
                    }
                }
            }
        }
        let rebalanced_after_kill = {
            while !balanced(&holdings(&store).await, 3) && killed.elapsed() < Duration::from_secs(120) {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            killed.elapsed()
        };
        let worst = gaps.values().max().copied().unwrap_or_default();
        let median = {
            let mut g: Vec<_> = gaps.values().copied().collect();
            g.sort();
            g.get(g.len() / 2).copied().unwrap_or_default()
        };

        // Idle: production stops; after the group settles, one minute of requests.
        producing.store(false, Ordering::Relaxed);
        let _ = producer.await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let before = aws.dynamodb_requests.snapshot();
        tokio::time::sleep(Duration::from_secs(60)).await;
        let idle = aws.dynamodb_requests.since(&before);
        scheduled.abort();
        for w in workers {
            w.abort();
        }

        let term = RebalanceConfig::default().lease_term;
        println!("| phase | real time |");
        println!("| --- | ---: |");
        println!("| 1 consumer takes {SHARDS} shards | {:.1} s |", first.as_secs_f64());
        println!("| 1 -> 4 consumers, balanced 16 each | {:.1} s |", scale_out.as_secs_f64());
        println!(
            "| a consumer killed: its {} shards read again by others, median / worst | {:.1} s / {:.1} s ({:.2}x / {:.2}x the {} s lease term) |",
            gaps.len(),
            median.as_secs_f64(),
            worst.as_secs_f64(),
            median.as_secs_f64() / term.as_secs_f64(),
            worst.as_secs_f64() / term.as_secs_f64(),
            term.as_secs()
        );
        println!("| after the kill, balanced again 21/21/22 | {:.1} s |", rebalanced_after_kill.as_secs_f64());
        println!();
        println!("Idle group (3 consumers, {SHARDS} shards, the rebalancer and the reaper), DynamoDB requests in one minute:");
        println!();
        println!("| operation | requests/min |");
        println!("| --- | ---: |");
        for (op, c) in &idle {
            println!("| {op} | {} |", c.requests);
        }
        let writes = idle.get("UpdateItem").map_or(0, |c| c.requests);
        println!();
        println!(
            "Per consumer: {:.0} UpdateItem/min (a heartbeat every 3 s, whatever it holds).",
            writes as f64 / 3.0
        );
    });
}
