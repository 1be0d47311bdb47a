//! Rebalancer benchmark: DynamoDB and Kinesis requests per tick and ticks to
//! converge for 1,024 shards over 16 consumers (1 consumer, then 16, then 4
//! killed), with simulated failover time, on the in-process servers with a
//! simulated clock; and, in the same run, the same phases planned with one
//! move per tick (KCL steals one lease per lease-taker run) for the ratio.
//!
//! Run: `cargo bench --bench rebalance` (prints Markdown tables).

#[allow(dead_code)]
mod support;

use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::Rebalancer;
use shardkeeper::group::{plan_rebalance, Action, Ages, RebalanceConfig};
use shardkeeper::state::{
    Checkpoint, ConsumerId, ConsumerInfo, GroupSnapshot, ManualClock, ShardId, StateStore,
    StoreConfig, TableOptions,
};
use shardkeeper_local::{test_clients, unique_name, AwsClients};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SHARDS: i32 = 1024;
const CONSUMERS: usize = 16;
const KILLED: usize = 4;
const LEASE_TERM: Duration = Duration::from_secs(10);
const SESSION_EVERY_S: u64 = 3;
const REBALANCE_EVERY_S: u64 = 5;

struct Phase {
    name: &'static str,
    ticks: u64,
    seconds: u64,
    ddb_per_tick: f64,
    kinesis_per_tick: f64,
    wall: Duration,
}

struct Sim {
    aws: AwsClients,
    clock: ManualClock,
    rebalancer: Rebalancer,
    sessions: Vec<ConsumerSession>,
    t: u64,
}

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

impl Sim {
    fn held(&self) -> Vec<usize> {
        self.sessions.iter().map(|s| s.leases().count()).collect()
    }

    fn balanced(&self) -> bool {
        let held = self.held();
        let total: usize = held.iter().sum();
        let (min, max) = (
            held.iter().min().copied().unwrap_or(0),
            held.iter().max().copied().unwrap_or(0),
        );
        total == SHARDS as usize && max - min <= 1
    }

    /// Runs simulated seconds until balanced: sessions tick every 3 s, the rebalancer every 5 s.
    async fn run(&mut self, name: &'static str) -> Phase {
        let started = Instant::now();
        let (mut ticks, mut ddb, mut kin) = (0u64, 0u64, 0u64);
        let t0 = self.t;
        while !self.balanced() {
            assert!(
                self.t - t0 < 600,
                "{name}: no balance after 10 simulated minutes: {:?}",
                self.held()
            );
            self.t += 1;
            self.clock.advance(Duration::from_secs(1));
            if self.t.is_multiple_of(SESSION_EVERY_S) {
                for s in &mut self.sessions {
                    s.tick(no_progress).await.unwrap();
                }
            }
            if self.t.is_multiple_of(REBALANCE_EVERY_S) {
                let (d0, k0) = (
                    self.aws.dynamodb_requests.snapshot(),
                    self.aws.kinesis_requests.snapshot(),
                );
                self.rebalancer.tick().await.unwrap();
                ddb += self.aws.dynamodb_requests.requests_since(&d0);
                kin += self.aws.kinesis_requests.requests_since(&k0);
                ticks += 1;
            }
        }
        Phase {
            name,
            ticks,
            seconds: self.t - t0,
            ddb_per_tick: ddb as f64 / ticks.max(1) as f64,
            kinesis_per_tick: kin as f64 / ticks.max(1) as f64,
            wall: started.elapsed(),
        }
    }

    fn join(&mut self, store: &StateStore, n: usize) {
        for _ in 0..n {
            let id = ConsumerId::new(format!("c{:02}", self.sessions.len())).unwrap();
            let info = ConsumerInfo::for_this_process(id, store.now());
            self.sessions
                .push(ConsumerSession::new(store.clone(), info, LEASE_TERM));
        }
    }
}

/// Pure planner simulation: ticks until balanced, claims honoured between
/// ticks; a lease that changed hands is young again.
fn planner_ticks(
    mut snap: GroupSnapshot,
    mut ages: Ages,
    now: i64,
    config: &RebalanceConfig,
) -> u64 {
    for tick in 1..100_000 {
        let plan = plan_rebalance(&snap, &ages, config);
        if plan.is_empty() {
            return tick - 1;
        }
        for action in plan {
            if let Action::Assign { shard, to, .. }
            | Action::Claim { shard, to, .. }
            | Action::ForceTake { shard, to, .. } = action
            {
                let s = snap
                    .shards
                    .iter_mut()
                    .find(|s| s.shard_id == shard)
                    .unwrap();
                s.owner = Some(to);
                s.expires = Some(now + 10_000);
                s.counter += 1;
                s.claim = None;
                ages.leases.remove(&s.shard_id);
            }
        }
    }
    u64::MAX
}

fn main() {
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("servers");
        let stream = unique_name("bench");
        aws.kinesis.create_stream().stream_name(&stream).shard_count(SHARDS).send().await.unwrap();
        let clock = ManualClock::new(1_800_000_000_000);
        let config = StoreConfig::new("bench", &stream).unwrap().table(&unique_name("bench")).unwrap();
        let store = StateStore::with_clock(aws.dynamodb.clone(), config, Arc::new(clock.clone()));
        store.table().ensure(&TableOptions::default()).await.unwrap();
        let rebalancer = Rebalancer::new(store.clone(), aws.kinesis.clone(), RebalanceConfig::default().lease_term(LEASE_TERM));
        let mut sim = Sim { aws: aws.clone(), clock: clock.clone(), rebalancer, sessions: Vec::new(), t: 0 };
        let mut phases = Vec::new();

        sim.join(&store, 1);
        phases.push(sim.run("1 consumer takes 1,024 shards").await);
        let before_join = store.load_group().await.unwrap();
        sim.join(&store, CONSUMERS - 1);
        phases.push(sim.run("15 consumers join (1 -> 16)").await);
        let before_kill = store.load_group().await.unwrap();
        sim.sessions.truncate(CONSUMERS - KILLED);
        phases.push(sim.run("4 consumers killed (16 -> 12)").await);

        // A steady-state tick: nothing to do.
        let (d0, k0) = (aws.dynamodb_requests.snapshot(), aws.kinesis_requests.snapshot());
        sim.rebalancer.tick().await.unwrap();
        let steady_ddb = aws.dynamodb_requests.since(&d0);
        let steady_kin = aws.kinesis_requests.requests_since(&k0);

        println!("Rebalancer on the in-process servers, {SHARDS} shards, defaults (tick {REBALANCE_EVERY_S} s, lease term {} s, heartbeat timeout 10 s, sessions tick every {SESSION_EVERY_S} s), simulated clock:\n", LEASE_TERM.as_secs());
        println!("| phase | rebalancer ticks to converge | simulated seconds to converge | DynamoDB requests per tick | Kinesis requests per tick | wall time |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: |");
        for p in &phases {
            println!("| {} | {} | {} | {:.0} | {:.1} | {:.1} s |", p.name, p.ticks, p.seconds, p.ddb_per_tick, p.kinesis_per_tick, p.wall.as_secs_f64());
        }
        println!("\nSteady-state tick (balanced, nothing to do): {} DynamoDB requests ({:?}), {} Kinesis requests.\n",
            steady_ddb.values().map(|c| c.requests).sum::<u64>(),
            steady_ddb.iter().map(|(k, v)| format!("{k} {}", v.requests)).collect::<Vec<_>>(),
            steady_kin);

        // Same starting states, planned with one move per tick (KCL-like) vs as many as needed.
        let now = store.now();
        let unlimited = RebalanceConfig::default();
        let one = RebalanceConfig::default().max_moves_per_tick(Some(1));
        let mut live_join = before_join.clone();
        for s in &mut live_join.shards {
            s.expires = Some(now + 10_000);
        }
        let mut joined = live_join.clone();
        joined.consumers = before_kill.consumers.clone();
        for c in &mut joined.consumers {
            c.heartbeat = now;
        }
        // After the kill: the dead consumers' leases have expired (KCL takes
        // expired leases in bulk too; only stealing live ones is one at a time).
        let dead = |id: &ConsumerId| id.as_str() >= &format!("c{:02}", CONSUMERS - KILLED)[..];
        let mut killed = before_kill.clone();
        for s in &mut killed.shards {
            let expired = s.owner.as_ref().is_some_and(dead);
            s.expires = Some(if expired { now - 1 } else { now + 10_000 });
        }
        for c in &mut killed.consumers {
            c.heartbeat = if dead(c.id()) { now - 60_000 } else { now };
        }
        // As the rebalancer observed it: the dead consumers silent for a minute.
        let silent = Duration::from_secs(60);
        let killed_ages = Ages {
            leases: killed.shards.iter().filter(|s| s.owner.as_ref().is_some_and(dead)).map(|s| (s.shard_id.clone(), silent)).collect(),
            heartbeats: killed.consumers.iter().filter(|c| dead(c.id())).map(|c| (c.id().clone(), silent)).collect(),
            beating: killed.consumers.iter().filter(|c| !dead(c.id())).map(|c| c.id().clone()).collect(),
            ..Ages::default()
        };
        // Watched long enough to have seen every consumer heartbeat.
        let joined_ages = Ages {
            beating: joined.consumers.iter().map(|c| c.id().clone()).collect(),
            ..Ages::default()
        };
        let mut rows: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        rows.insert("1 -> 16 consumers", (planner_ticks(joined.clone(), joined_ages.clone(), now, &unlimited), planner_ticks(joined, joined_ages, now, &one)));
        rows.insert("16 -> 12 consumers (4 killed, their leases expired)", (planner_ticks(killed.clone(), killed_ages.clone(), now, &unlimited), planner_ticks(killed, killed_ages, now, &one)));
        println!("Planner only, same states, ticks to converge (claims honoured between ticks):\n");
        println!("| phase | shardkeeper (all moves in one tick) | one move per tick (KCL-like) | ratio | time at 5 s ticks vs KCL's 20 s lease taker |");
        println!("| --- | ---: | ---: | ---: | --- |");
        for (name, (ours, kcl)) in rows {
            println!("| {name} | {ours} | {kcl} | {:.0}x | {} s vs {} s |", kcl as f64 / ours.max(1) as f64, ours * 5, kcl * 20);
        }
    });
}
