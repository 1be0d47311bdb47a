//! One simulated run of a whole group: shard workers (with their sessions
//! and pulses; some run for ever, some are invocations with a deadline that
//! drain before it), the rebalancer, the reaper, a producer and an
//! operator, all the project's real code on one current-thread runtime with
//! paused time, reaching DynamoDB and Kinesis through the simulated
//! network. The seed decides every choice; the history checker and the
//! run's own checks (liveness, moves that stick) judge it.

use super::clock::{SimClock, TimeLine};
use super::dynamo::Dynamo;
use super::kinesis::Kinesis;
use super::net::{Net, Rates, SimHttp};
use super::trace::Trace;
use crate::support::ended::Ended;
use shardkeeper::consumer::{ConsumerSession, ShardWorker, WorkerConfig};
use shardkeeper::functions::{Reaper, Rebalancer};
use shardkeeper::group::{ReapConfig, RebalanceConfig};
use shardkeeper::pipeline::InitialPosition;
use shardkeeper::processing::StreamRecord;
use shardkeeper::state::{
    instant_now, Buckets, ConsumerId, ConsumerInfo, StateStore, StoreConfig, TableOptions,
};
use shardkeeper_history::{
    check, produce_numbered, recording_handler, recording_observer, NumberedLoad, SharedHistory,
    Verification,
};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// A run's shape; the seed draws the rest.
#[derive(Debug, Clone)]
pub struct Shape {
    pub seed: u64,
    pub consumers: usize,
    pub shards: u32,
    /// Simulated time before the calm (faults, chaos and production stop).
    pub busy: Duration,
    pub keys: usize,
    /// Operator moves at random moments (a forced reset, a rewind).
    pub operator: bool,
    /// A siege rather than the weather: chaos several times as often
    /// (operator moves about every 30 s, kills every 25 s, resharding,
    /// brownouts of DynamoDB), answers lost and stale reads in every run,
    /// skewed clocks, and the rebalancer every 2 s; its last 90 s are a
    /// lull (chaos, lost answers and stale reads go on; no call fails, so
    /// no session's tick fails and makes it read every shard again, which
    /// would rescue a lease stranded just before: a stranding in the lull
    /// lasts, as in a quiet week on AWS). The weather draws each
    /// fault's rate from none to hostile, so most of its seeds are calm;
    /// the races a siege makes likely (a move just after a give, a full
    /// pickup just after one, a snapshot across a rewind's first writes, a
    /// lease running out while its holder reads on) come once in hundreds
    /// of the weather's seeds (docs/RELIABILITY.md, the mutants' table).
    pub siege: bool,
}

impl Shape {
    /// The CI shape: 3 consumers, 16 shards, 10 minutes of simulated time
    /// (7 busy, then the drain); even seeds are sieges.
    pub fn ci(seed: u64) -> Self {
        Shape {
            seed,
            consumers: 3,
            shards: 16,
            busy: Duration::from_secs(420),
            keys: 48,
            operator: true,
            siege: seed.is_multiple_of(2),
        }
    }
}

/// What the chaos may do in one second of a run.
#[derive(Debug, Clone, Copy)]
enum Chaos {
    /// A process killed at whatever await it is at.
    Kill,
    /// A process leaves cleanly; another joins.
    Leave,
    /// A second process under a live id.
    Twin,
    /// A wall clock steps.
    Step,
    Split,
    Merge,
    /// An operator moves the group back: to before production, or (in a
    /// siege, five times in six) to a moment of the last minute.
    Move,
    /// DynamoDB refuses every request for 5 to 15 s.
    Brownout,
}

impl Chaos {
    /// How often each comes, per mille a second.
    fn odds(siege: bool) -> [(Chaos, u32); 8] {
        use Chaos::*;
        if siege {
            [
                (Kill, 40),
                (Leave, 12),
                (Twin, 8),
                (Step, 20),
                (Split, 15),
                (Merge, 10),
                (Move, 33),
                (Brownout, 10),
            ]
        } else {
            [
                (Kill, 12),
                (Leave, 4),
                (Twin, 3),
                (Step, 6),
                (Split, 3),
                (Merge, 2),
                (Move, 4),
                (Brownout, 0),
            ]
        }
    }

    /// This second's chaos, if any.
    fn draw(rng: &mut fastrand::Rng, siege: bool) -> Option<Chaos> {
        let roll = rng.u32(..1000);
        let mut edge = 0;
        Chaos::odds(siege).into_iter().find_map(|(c, n)| {
            edge += n;
            (roll < edge).then_some(c)
        })
    }
}

/// The lease term of the simulated group (KCL's failover time).
const TERM: Duration = Duration::from_secs(10);

/// What a run found.
#[derive(Debug)]
pub struct Outcome {
    pub verdict: Verification,
    /// Problems the history checker does not look for: a stall, a move
    /// undone.
    pub failures: Vec<String>,
    pub trace: Trace,
    pub summary: String,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.verdict.passed() && self.failures.is_empty()
    }
}

/// A running consumer process.
struct Process {
    id: String,
    name: String,
    clock: SimClock,
    task: JoinHandle<Ended>,
    stop: Arc<AtomicBool>,
}

/// What every process of a run shares.
struct World {
    line: TimeLine,
    config: StoreConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    kinesis: aws_sdk_kinesis::Client,
    history: SharedHistory,
    /// The longest a handler call waits, in µs.
    handler_wait: u64,
}

impl World {
    fn store(&self, clock: SimClock) -> StateStore {
        StateStore::with_clock(self.dynamodb.clone(), self.config.clone(), Arc::new(clock))
    }

    /// Starts a process under `id`, named `name` in the history, with a
    /// wall clock `skew` ms off, running until `deadline` (an invocation)
    /// or for ever.
    fn spawn(&self, id: &str, name: String, skew: i64, deadline: Option<Duration>) -> Process {
        let clock = SimClock::new(self.line, skew);
        let store = self.store(clock.clone());
        let info = ConsumerInfo::for_this_process(ConsumerId::new(id).unwrap(), store.now());
        let session = ConsumerSession::new(store.clone(), info, TERM);
        let config = WorkerConfig::default()
            .initial_position(InitialPosition::TrimHorizon)
            .renew_every(TERM / 3)
            // Half as often as the defaults (0.2 s and 1 s): reads are
            // two thirds of a run's requests, and the lease protocol's
            // races are in the state store's requests.
            .min_poll_interval(Duration::from_millis(400))
            .idle_poll_interval(Duration::from_millis(2_000))
            .max_records(500);
        // A handler that waits as real ones do: 0 to 2 ms a record (20 in
        // a siege).
        let wait = self.handler_wait;
        let handler = recording_handler(&self.history, &name, move |_: StreamRecord| async move {
            tokio::time::sleep(Duration::from_micros(fastrand::u64(0..wait))).await;
            Ok::<(), std::io::Error>(())
        });
        let deadline = deadline.map(|d| instant_now() + d);
        let mut worker = ShardWorker::new(session, store, self.kinesis.clone(), handler, config)
            .with_observer(recording_observer(&self.history, &name));
        if let Some(d) = deadline {
            // The fleet's rule: drain for the last 15 s.
            worker = worker.drain_at(d - Duration::from_secs(15));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // In the run's log (SHARDKEEPER_SIM_LOG), beside the toolkit's.
        tracing::info!(target: "shardkeeper::sim", process = %name, consumer = %id, "process started");
        let task = tokio::spawn(async move {
            Ended::of(
                &worker
                    .run_until(deadline, || flag.load(Ordering::Relaxed))
                    .await,
            )
        });
        Process {
            id: id.to_owned(),
            name,
            clock,
            task,
            stop,
        }
    }
}

/// SDK clients on the net; with `faults` false, clients that meet none.
fn clients(
    net: &Arc<Net>,
    line: TimeLine,
    faults: bool,
) -> (aws_sdk_dynamodb::Client, aws_sdk_kinesis::Client) {
    let http = SimHttp {
        net: net.clone(),
        faults,
    };
    let creds = aws_sdk_dynamodb::config::Credentials::new("sim", "sim", None, None, "sim");
    let ddb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(creds.clone())
        .endpoint_url("http://dynamodb.sim")
        .http_client(http.clone())
        .time_source(line)
        .build();
    let kin = aws_sdk_kinesis::Config::builder()
        .behavior_version(aws_sdk_kinesis::config::BehaviorVersion::latest())
        .region(aws_sdk_kinesis::config::Region::new("us-east-1"))
        .credentials_provider(creds)
        .endpoint_url("http://kinesis.sim")
        .http_client(http.clone())
        .time_source(line)
        .build();
    (
        aws_sdk_dynamodb::Client::from_conf(ddb),
        aws_sdk_kinesis::Client::from_conf(kin),
    )
}

/// Runs `tick` every `every` until `stop`.
fn ticking<F, Fut, T, E>(every: Duration, stop: Arc<AtomicBool>, tick: F) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send,
{
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let _ = tick().await;
            tokio::time::sleep(every).await;
        }
    })
}

/// One run. Must be called on a current-thread runtime with paused time.
pub async fn run(shape: &Shape) -> Outcome {
    fastrand::seed(shape.seed);
    let mut rng = fastrand::Rng::with_seed(shape.seed);
    let line = TimeLine::start();
    let rates = if shape.siege {
        Rates::siege(&mut rng)
    } else {
        Rates::drawn(&mut rng)
    };
    let skewed = rng.bool() || shape.siege;
    let net = Net::new(
        shape.seed,
        rates,
        Dynamo::new(line),
        Arc::new(Kinesis::new(line)),
    );
    let (dynamodb, kinesis) = clients(&net, line, true);
    let (_, producer_kinesis) = clients(&net, line, false);
    net.kinesis.create_stream("orders", shape.shards);
    let config = StoreConfig::new("sim", "orders")
        .unwrap()
        .table("state")
        .unwrap()
        .buckets(Buckets::new(2).unwrap());
    let world = World {
        line,
        config,
        dynamodb,
        kinesis,
        history: SharedHistory::default(),
        // A siege's handlers are slower: a call running across a lease's
        // end is likelier.
        handler_wait: if shape.siege { 20_000 } else { 2_000 },
    };
    let operator = world.store(SimClock::new(line, 0));
    // The table and the group's start, before the faults begin.
    net.faulty.store(false, Ordering::Relaxed);
    operator
        .start_on_stream(
            &world.kinesis,
            TableOptions::default().poll_interval(Duration::from_millis(50)),
        )
        .await
        .expect("the group starts");
    net.faulty.store(true, Ordering::Relaxed);
    let production_began = line.now_millis();

    let stop_all = Arc::new(AtomicBool::new(false));
    let heartbeat_timeout = TERM + TERM / 3;
    let rebalancer = Arc::new(Rebalancer::new(
        world.store(SimClock::new(line, 0)),
        world.kinesis.clone(),
        RebalanceConfig::default()
            .lease_term(TERM)
            .heartbeat_timeout(heartbeat_timeout),
    ));
    let reaper = Arc::new(Reaper::new(
        world.store(SimClock::new(line, 0)),
        world.kinesis.clone(),
        ReapConfig::default()
            .heartbeat_timeout(heartbeat_timeout)
            .lease_term(TERM),
    ));
    let every = Duration::from_secs(if shape.siege { 2 } else { 5 });
    let rebalancing = ticking(every, stop_all.clone(), move || {
        let r = rebalancer.clone();
        async move { r.tick().await }
    });
    let reaping = ticking(Duration::from_secs(5), stop_all.clone(), move || {
        let r = reaper.clone();
        async move { r.tick().await }
    });
    let producing = Arc::new(AtomicBool::new(false));
    let producer = {
        let load = NumberedLoad {
            stream: "orders".into(),
            records: None,
            keys: shape.keys,
            batch: 8,
            pace: Duration::from_millis(500),
        };
        let (kinesis, history, flag) = (producer_kinesis, world.history.clone(), producing.clone());
        tokio::spawn(async move { produce_numbered(&kinesis, &load, &history, &flag).await })
    };

    let mut generation = 0;
    let mut next_id = move || {
        generation += 1;
        format!("c{generation}")
    };
    let max_skew = if skewed { 30_000 } else { 0 };
    let lifetime = |rng: &mut fastrand::Rng| {
        // Half the processes are invocations of 2 to 5 minutes.
        rng.bool().then(|| Duration::from_secs(rng.u64(120..300)))
    };
    let mut live: Vec<Process> = (0..shape.consumers)
        .map(|_| {
            let id = next_id();
            let life = lifetime(&mut rng);
            world.spawn(&id, id.clone(), rng.i64(-max_skew..=max_skew), life)
        })
        .collect();
    let mut left: Vec<Process> = Vec::new();
    let mut waiting_restarts: Vec<(Instant, String)> = Vec::new();
    let mut stats = BTreeMap::<&str, u32>::new();
    let mut moves: Vec<Move> = Vec::new();
    let started = instant_now();
    let calm_at = started + shape.busy;
    let (mut twins, mut restarts) = (0, 0);
    while instant_now() < calm_at {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if shape.siege && instant_now() + Duration::from_secs(90) >= calm_at {
            net.lull.store(true, Ordering::Relaxed);
        }
        // Processes that ended by themselves: an invocation at its
        // deadline, one superseded, one failed. The fleet (or a
        // supervisor) starts another.
        while let Some(i) = live.iter().position(|p| p.task.is_finished()) {
            let ended = live.swap_remove(i);
            let how = ended.task.await.unwrap_or(Ended::Failed);
            *stats
                .entry(match how {
                    Ended::Stopped => "ended",
                    Ended::Superseded => "superseded",
                    Ended::Failed => "failed",
                })
                .or_default() += 1;
            if how != Ended::Superseded {
                let id = next_id();
                let life = lifetime(&mut rng);
                live.push(world.spawn(&id, id.clone(), rng.i64(-max_skew..=max_skew), life));
            }
        }
        while let Some(i) = waiting_restarts
            .iter()
            .position(|(at, _)| *at <= instant_now())
        {
            let (_, id) = waiting_restarts.swap_remove(i);
            let life = lifetime(&mut rng);
            // A process of its own in the history: `<id>~<n>`.
            restarts += 1;
            let name = format!("{id}~{restarts}");
            live.push(world.spawn(&id, name, rng.i64(-max_skew..=max_skew), life));
        }
        match Chaos::draw(&mut rng, shape.siege) {
            // Killed at whatever await it is at: no release, no more
            // heartbeats. Restarted under its id after a while, or a new
            // process with a new id takes its place.
            Some(Chaos::Kill) if !live.is_empty() => {
                let victim = live.swap_remove(rng.usize(..live.len()));
                victim.task.abort();
                world
                    .history
                    .lock()
                    .unwrap()
                    .killed
                    .push((victim.name.clone(), instant_now()));
                *stats.entry("kills").or_default() += 1;
                let id = if rng.bool() { victim.id } else { next_id() };
                let back = instant_now() + Duration::from_millis(rng.u64(0..30_000));
                waiting_restarts.push((back, id));
            }
            Some(Chaos::Leave) if live.len() > 1 => {
                let leaving = live.swap_remove(rng.usize(..live.len()));
                leaving.stop.store(true, Ordering::Relaxed);
                left.push(leaving);
                *stats.entry("leaves").or_default() += 1;
                let id = next_id();
                let life = lifetime(&mut rng);
                live.push(world.spawn(&id, id.clone(), rng.i64(-max_skew..=max_skew), life));
            }
            // The older must stop.
            Some(Chaos::Twin) if !live.is_empty() => {
                let id = live[rng.usize(..live.len())].id.clone();
                twins += 1;
                *stats.entry("twins").or_default() += 1;
                let life = lifetime(&mut rng);
                live.push(world.spawn(
                    &id,
                    format!("{id}#{twins}"),
                    rng.i64(-max_skew..=max_skew),
                    life,
                ));
            }
            Some(Chaos::Step) if skewed && !live.is_empty() => {
                let p = &live[rng.usize(..live.len())];
                p.clock.step(rng.i64(-20_000..=20_000));
                *stats.entry("clock steps").or_default() += 1;
            }
            Some(Chaos::Split) => {
                net.kinesis.split("orders", rng.usize(..64));
                *stats.entry("splits").or_default() += 1;
            }
            Some(Chaos::Merge) => {
                net.kinesis.merge("orders", rng.usize(..64));
                *stats.entry("merges").or_default() += 1;
            }
            // A forced reset or a rewind (not in a brownout: the
            // operator's commands would fail for its whole length).
            Some(Chaos::Move) if shape.operator && !net.browned_out() => {
                let began = instant_now();
                let rewind = rng.bool();
                let to = if shape.siege && rng.u32(..6) > 0 {
                    let wanted = line.now_millis() - rng.i64(5_000..60_000);
                    let h = world.history.lock().unwrap();
                    wanted.min(latest_back(&h, &mut moves, &net.kinesis.arrivals("orders")) - 1_000)
                } else {
                    production_began - 1_000
                };
                let left_alone =
                    crate::support::operator::move_back(&operator, &world.kinesis, to, rewind)
                        .await;
                let ended = instant_now();
                world
                    .history
                    .lock()
                    .unwrap()
                    .moved_back
                    .push((began, ended));
                moves.push(Move {
                    began,
                    ended,
                    rewind,
                    to,
                    left_alone,
                    read_again: false,
                });
                *stats
                    .entry(if rewind { "rewinds" } else { "resets" })
                    .or_default() += 1;
            }
            Some(Chaos::Brownout) if !net.lull.load(Ordering::Relaxed) => {
                net.brownout(instant_now() + Duration::from_millis(rng.u64(5_000..15_000)));
                *stats.entry("brownouts").or_default() += 1;
            }
            _ => {}
        }
    }

    // The calm: faults, chaos and production stop; every process is back.
    net.faulty.store(false, Ordering::Relaxed);
    producing.store(true, Ordering::Relaxed);
    let produced = producer.await.unwrap_or(0);
    let arrivals = net.kinesis.arrivals("orders");
    for (_, id) in waiting_restarts.drain(..) {
        restarts += 1;
        live.push(world.spawn(&id, format!("{id}~{restarts}"), 0, None));
    }
    // Drained when every record is processed, and every record processed
    // before a move back processed again after it; a stall is three terms
    // without a record processed for the first time, or again after a
    // move, since the calm.
    let calm = instant_now();
    let mut failures = Vec::new();
    let mut seen = BTreeSet::new();
    let mut scanned = 0;
    let mut progress = instant_now();
    let (mut done_after_moves, mut due_after_moves) = (0usize, 0usize);
    let mut moved_left = usize::MAX;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // Invocations that end are replaced, as the fleet does.
        while let Some(i) = live.iter().position(|p| p.task.is_finished()) {
            let ended = live.swap_remove(i);
            if ended.task.await.unwrap_or(Ended::Failed) != Ended::Superseded {
                let id = next_id();
                live.push(world.spawn(&id, id.clone(), 0, None));
            }
        }
        {
            let h = world.history.lock().unwrap();
            for p in &h.processed[scanned..] {
                if seen.insert((p.key.clone(), p.n)) {
                    progress = instant_now();
                }
            }
            scanned = h.processed.len();
        }
        if seen.len() >= produced {
            // And every move back read again (a move just before the calm
            // is still being read).
            let left: usize = {
                let h = world.history.lock().unwrap();
                unread_moves(&h, &mut moves, &arrivals)
                    .iter()
                    .map(|(_, left)| left.missing)
                    .sum()
            };
            if left == 0 {
                break;
            }
            if left < moved_left {
                moved_left = left;
                progress = instant_now();
            }
        }
        if instant_now().duration_since(progress) > 3 * TERM {
            failures.push(format!(
                "stall: {} of {produced} records processed, {}; nothing new for three terms, {:?} after the calm",
                seen.len(),
                if moved_left == usize::MAX {
                    "the moves back not yet counted".to_owned()
                } else {
                    format!("{moved_left} not yet again after a move back")
                },
                instant_now().duration_since(calm)
            ));
            failures.extend(super::operator::stalled(&operator, heartbeat_timeout).await);
            break;
        }
    }
    // Every move back stuck (see `not_moved`).
    {
        let h = world.history.lock().unwrap();
        let all: Vec<&Move> = moves.iter().collect();
        for (m, left) in moves.iter().zip(not_moved(&h, &all, &arrivals)) {
            let Move {
                began,
                ended,
                rewind,
                ..
            } = m;
            due_after_moves += left.due;
            done_after_moves += left.due - left.missing;
            if left.missing > 0 {
                failures.push(format!(
                    "a move back ({}, {} ms to {} ms) was undone: {} of the {} records processed before it were not processed again after it, by shard: {:?}",
                    if *rewind { "rewind" } else { "forced reset" },
                    began.duration_since(started).as_millis(),
                    ended.duration_since(started).as_millis(),
                    left.missing,
                    left.due,
                    left.by_shard,
                ));
            }
        }
    }
    if failures.iter().any(|f| f.starts_with("a move back")) {
        failures.extend(super::operator::stalled(&operator, heartbeat_timeout).await);
        failures.push(format!("lineage: {:?}", net.kinesis.parents("orders")));
    }
    for p in live.iter().chain(&left) {
        p.stop.store(true, Ordering::Relaxed);
    }
    for p in live.into_iter().chain(left) {
        let _ = p.task.await;
    }
    stop_all.store(true, Ordering::Relaxed);
    let _ = rebalancing.await;
    let _ = reaping.await;
    let mut history = std::mem::take(&mut *world.history.lock().unwrap());
    history.parents = net
        .kinesis
        .parents("orders")
        .into_iter()
        .map(|(k, v)| {
            (
                shardkeeper::state::ShardId::new(&k).unwrap(),
                v.iter()
                    .map(|p| shardkeeper::state::ShardId::new(p).unwrap())
                    .collect(),
            )
        })
        .collect();
    let verdict = check(&history);
    for child in &verdict.children_before_parents {
        failures.extend(explain_child(&history, child, started));
    }
    // `SHARDKEEPER_SIM_SHARD=<shard>`: every worker event of that shard,
    // for a failure's story.
    if let Ok(shard) = std::env::var("SHARDKEEPER_SIM_SHARD") {
        failures.extend(explain_shard(&history, &shard, started));
    }
    if verdict.unjustified_duplicates > 0 && std::env::var("SHARDKEEPER_SIM_EXPLAIN").is_ok() {
        failures.extend(explain_repeats(&history, started));
        for m in &moves {
            failures.push(format!(
                "move from {} ms to {} ms",
                m.began.duration_since(started).as_millis(),
                m.ended.duration_since(started).as_millis()
            ));
        }
    }
    let mut trace = net.trace.lock().unwrap().clone();
    trace.note(&format!(
        "{} {} {} {:?}",
        history.processed.len(),
        history.spans.len(),
        history.events.len(),
        stats
    ));
    let c = &net.counts;
    let summary = format!(
        "seed {}: {produced} records produced, {} processed, {:.0} s simulated ({:.0} s to drain), \
         {} requests ({} throttled, {} failed, {} hung, {} answers lost, {} stale reads), \
         clocks skewed: {skewed}{}, {:?}, moves re-ran {done_after_moves}/{due_after_moves}, \
         closest to a lease's end: {}",
        shape.seed,
        history.processed.len(),
        instant_now().duration_since(started).as_secs_f64(),
        instant_now().duration_since(calm).as_secs_f64(),
        c.requests.load(Ordering::Relaxed),
        c.throttled.load(Ordering::Relaxed),
        c.failed.load(Ordering::Relaxed),
        c.hung.load(Ordering::Relaxed),
        c.lost.load(Ordering::Relaxed),
        c.stale.load(Ordering::Relaxed),
        if shape.siege { ", a siege" } else { "" },
        stats,
        closest_to_expiry(&history).map_or("-".into(), |ms| format!("{ms} ms")),
    );
    Outcome {
        verdict,
        failures,
        trace,
        summary,
    }
}

/// How close a record's processing came to the end of the lease its batch
/// started under (the expiry the worker reported, on its own clock), in
/// ms; negative past it. Shows the worker's margin at work: with it, never
/// under the margin.
fn closest_to_expiry(h: &shardkeeper_history::History) -> Option<i64> {
    h.processed
        .iter()
        .zip(shardkeeper_history::lease_expiries(h))
        .filter_map(|(p, expiry)| {
            let expiry = expiry?;
            Some(if expiry >= p.at {
                expiry.duration_since(p.at).as_millis() as i64
            } else {
                -(p.at.duration_since(expiry).as_millis() as i64)
            })
        })
        .min()
}

/// An operator's move back.
struct Move {
    /// When the command began and returned.
    began: Instant,
    ended: Instant,
    /// A rewind, or a forced reset.
    rewind: bool,
    /// The time moved to (the simulation's epoch milliseconds).
    to: shardkeeper::state::EpochMillis,
    /// The shards a reset left alone: depleted just after it
    /// (docs/OPERATIONS.md).
    left_alone: BTreeSet<String>,
    /// Every record it covers was processed again (see `not_moved`).
    read_again: bool,
}

/// The latest time a move may go to and still be a move back: no later
/// than the arrival of the first record never processed (a move forward
/// skips records, as the operator asked), nor than the target of a move
/// not yet read again (it would skip what that move had still to read).
fn latest_back(
    h: &shardkeeper_history::History,
    moves: &mut [Move],
    arrivals: &HashMap<String, shardkeeper::state::EpochMillis>,
) -> shardkeeper::state::EpochMillis {
    let processed: HashSet<&str> = h.processed.iter().map(|p| p.sequence.as_str()).collect();
    let unread = arrivals
        .iter()
        .filter(|(seq, _)| !processed.contains(seq.as_str()))
        .map(|(_, at)| *at);
    let unmoved = unread_moves(h, moves, arrivals)
        .into_iter()
        .map(|(to, _)| to);
    unread.chain(unmoved).min().unwrap_or(i64::MAX)
}

/// The moves not read again yet, each with its target and what it left,
/// noting those read again (a move read again stays so: what was processed
/// before it is fixed, what after it only grows).
fn unread_moves(
    h: &shardkeeper_history::History,
    moves: &mut [Move],
    arrivals: &HashMap<String, shardkeeper::state::EpochMillis>,
) -> Vec<(shardkeeper::state::EpochMillis, NotMoved)> {
    let mut open: Vec<&mut Move> = moves.iter_mut().filter(|m| !m.read_again).collect();
    let left = {
        let shared: Vec<&Move> = open.iter().map(|m| &**m).collect();
        not_moved(h, &shared, arrivals)
    };
    let mut out = Vec::new();
    for (m, left) in open.iter_mut().zip(left) {
        if left.missing == 0 {
            m.read_again = true;
        } else {
            out.push((m.to, left));
        }
    }
    out
}

/// What a move back left to read again.
struct NotMoved {
    /// Records processed before the move began (but those of depleted
    /// shards a reset left alone).
    due: usize,
    /// Of those, how many no holder processed again.
    missing: usize,
    /// The missing ones, by the shard they were read from before.
    by_shard: BTreeMap<String, usize>,
}

/// For each move back: a move to a time sticks when every record that
/// arrived a second or more after that time (`arrivals`: by sequence
/// number) and was processed before the move began is processed again by a
/// holder that took its shard after it began. (The move ends every lease, one shard at
/// a time, so each shard's next holder gains it after the move began; the
/// holder at the start may run its last batch again, which does not count.
/// Processing before the whole move returned counts: a move whose calls
/// hang for seconds has long moved its first shards.) Hash maps: it runs
/// at every move and every second of the drain, and only counts, so their
/// order decides nothing.
fn not_moved(
    h: &shardkeeper_history::History,
    moves: &[&Move],
    arrivals: &HashMap<String, shardkeeper::state::EpochMillis>,
) -> Vec<NotMoved> {
    use shardkeeper::consumer::WorkerEvent;
    moves
        .iter()
        .map(|m| {
            let Move {
                began,
                to,
                left_alone,
                ..
            } = m;
            // Each shard's first new holder since the move began.
            let mut taken = HashMap::<&str, Instant>::new();
            for (_, e) in &h.events {
                if let WorkerEvent::Gained { shard, at, .. } = e {
                    if at >= began {
                        let t = taken.entry(shard.as_str()).or_insert(*at);
                        *t = (*t).min(*at);
                    }
                }
            }
            let before: HashMap<(&str, u64), &str> = h
                .processed
                .iter()
                .filter(|p| {
                    p.at <= *began
                        && !left_alone.contains(p.shard.as_str())
                        && arrivals
                            .get(p.sequence.as_str())
                            .is_some_and(|a| *a >= to + 1_000)
                })
                .map(|p| ((p.key.as_str(), p.n), p.shard.as_str()))
                .collect();
            let after: HashSet<(&str, u64)> = h
                .processed
                .iter()
                .filter(|p| taken.get(p.shard.as_str()).is_some_and(|t| p.at >= *t))
                .map(|p| (p.key.as_str(), p.n))
                .collect();
            let mut by_shard = BTreeMap::<String, usize>::new();
            for (record, shard) in &before {
                if !after.contains(record) {
                    *by_shard.entry((*shard).to_owned()).or_default() += 1;
                }
            }
            NotMoved {
                due: before.len(),
                missing: by_shard.values().sum(),
                by_shard,
            }
        })
        .collect()
}

/// For a failed run: the first repeats of records within one consumer's
/// run on a shard, with that consumer's events on the shard around them.
pub fn explain_repeats(history: &shardkeeper_history::History, origin: Instant) -> Vec<String> {
    use shardkeeper::consumer::WorkerEvent;
    let ms = |t: Instant| t.saturating_duration_since(origin).as_millis();
    let mut first: BTreeMap<(String, u64), &shardkeeper_history::Processed> = BTreeMap::new();
    let mut out = Vec::new();
    for p in &history.processed {
        let k = (p.key.clone(), p.n);
        match first.get(&k) {
            Some(before) if before.consumer == p.consumer && before.shard == p.shard => {
                out.push(format!(
                    "repeat {}#{} on {} by {}: first at {} ms (seq {}), again at {} ms",
                    p.key,
                    p.n,
                    p.shard,
                    p.consumer,
                    ms(before.at),
                    before.sequence,
                    ms(p.at)
                ));
                for (c, e) in &history.events {
                    if c != &p.consumer {
                        continue;
                    }
                    let (shard, at) = match e {
                        WorkerEvent::Gained { shard, at, .. }
                        | WorkerEvent::Processing { shard, at, .. }
                        | WorkerEvent::Stopped { shard, at, .. } => (shard, *at),
                        WorkerEvent::Checkpointed { shard, sent, .. } => (shard, *sent),
                    };
                    if shard == &p.shard
                        && at + Duration::from_secs(30) >= before.at
                        && at <= p.at
                        && !matches!(e, WorkerEvent::Processing { .. })
                    {
                        out.push(format!("    {} ms: {e:?}", ms(at)));
                    }
                }
                if out.len() > 40 {
                    break;
                }
            }
            Some(_) => {}
            None => {
                first.insert(k, p);
            }
        }
    }
    out
}

/// Every worker event of `shard` (but each batch's `Processing`), and the
/// run's kills, in order.
fn explain_shard(
    history: &shardkeeper_history::History,
    shard: &str,
    origin: Instant,
) -> Vec<String> {
    use shardkeeper::consumer::WorkerEvent;
    let ms = |t: Instant| t.saturating_duration_since(origin).as_millis();
    let mut lines: Vec<(u128, String)> = history
        .events
        .iter()
        .filter_map(|(c, e)| {
            let (s, at) = match e {
                WorkerEvent::Gained { shard, at, .. }
                | WorkerEvent::Processing { shard, at, .. }
                | WorkerEvent::Stopped { shard, at, .. } => (shard, *at),
                WorkerEvent::Checkpointed { shard, sent, .. } => (shard, *sent),
            };
            (s.as_str() == shard && !matches!(e, WorkerEvent::Processing { .. }))
                .then(|| (ms(at), format!("{} ms: {c}: {e:?}", ms(at))))
        })
        .chain(
            history
                .killed
                .iter()
                .map(|(c, at)| (ms(*at), format!("{} ms: {c} killed", ms(*at)))),
        )
        .collect();
    lines.sort_by_key(|(t, _)| *t);
    lines.into_iter().map(|(_, l)| l).collect()
}

/// For a child read before its parents ended: when it was first read, and
/// its parents' ends, losses and the run's kills.
fn explain_child(
    history: &shardkeeper_history::History,
    child: &shardkeeper::state::ShardId,
    origin: Instant,
) -> Vec<String> {
    use shardkeeper::consumer::WorkerEvent;
    let ms = |t: Instant| t.saturating_duration_since(origin).as_millis();
    let parents = history.parents.get(child).cloned().unwrap_or_default();
    let mut out = vec![format!("child {child} of {parents:?}")];
    if let Some(p) = history.processed.iter().find(|p| &p.shard == child) {
        out.push(format!(
            "    first read at {} ms by {}",
            ms(p.at),
            p.consumer
        ));
    }
    for (c, e) in &history.events {
        match e {
            WorkerEvent::Stopped { shard, why, at }
                if parents.contains(shard) || shard == child =>
            {
                out.push(format!("    {} ms: {c} stopped {shard}: {why:?}", ms(*at)))
            }
            WorkerEvent::Gained {
                shard,
                at,
                position,
            } if parents.contains(shard) || shard == child => out.push(format!(
                "    {} ms: {c} gained {shard} at {position:?}",
                ms(*at)
            )),
            _ => {}
        }
    }
    for (c, at) in &history.killed {
        out.push(format!("    {} ms: {c} killed", ms(*at)));
    }
    for (b, e) in &history.moved_back {
        out.push(format!("    {} ms to {} ms: moved back", ms(*b), ms(*e)));
    }
    out
}
