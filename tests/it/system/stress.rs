//! The stress run: consumers, the rebalancer and the reaper run concurrently
//! on the in-process servers while a producer writes numbered records with
//! many keys; consumers are killed mid-batch and restarted, others leave and
//! join, shards are split and merged. Every lease change, checkpoint,
//! handler call and processed record goes to a history, and the history
//! checker must find no double ownership, no checkpoint regression, no lost
//! record, no per-key disorder, no unjustified duplicate, no child read
//! before its parents, and no two consumers running the handler on one
//! shard at once (nor one running it in another's holding).
//!
//! The conditions are hostile: every shard starts at LATEST (production
//! begins once each start is stored, and no record written after may be
//! skipped), every consumer's wall clock is off by up to
//! 30 s (the rebalancer's and reaper's are not), the handler turns slow for
//! stretches (10 ms a record: a batch outlasts the lease term), and now and
//! then a second process starts under a live consumer's id (the older one
//! must stop; the history names the two processes apart, so the checker
//! would see them hold a shard together). An operator moves the running
//! group back twice, a rewind and a forced reset to before production
//! began (checkpoints may go back across those moves, nothing else may
//! change: no handler calls of two consumers on one shard at once).
//!
//! It runs twice: on the shared servers, and on servers of its own behind
//! fault-injecting proxies (throttling, internal errors, dropped
//! connections, answers lost after the write was applied, latency) with the
//! DynamoDB server restarted on its file in the middle of the run; the
//! producer and the test's own calls go around the proxies.
//!
//! A third run, with slow ticks, has no chaos: half the consumers renew and
//! heartbeat slowly and handle batches close to their stop-by instant, the
//! others are quick to take what they are judged to have lost (see
//! `the_stress_run_with_slow_ticks_never_runs_two_consumers_on_one_shard`).
//!
//! The default is short, for CI. Longer runs:
//! `SHARDKEEPER_STRESS_SECONDS=120 SHARDKEEPER_STRESS_CONSUMERS=16
//! SHARDKEEPER_STRESS_SHARDS=256 cargo test --test it stress -- --nocapture`
//! (`SHARDKEEPER_STRESS_SEED` repeats a run's choices;
//! `SHARDKEEPER_STRESS_FAULTS` sets the fault rate of the second run,
//! `SHARDKEEPER_STRESS_RESTARTS` how often DynamoDB restarts in it, and
//! `SHARDKEEPER_STRESS_EFO` the size of an enhanced fan-out pool the
//! workers read through, 0 for polling).

use crate::support::common::{create_stream, ctx, list_shards};
use crate::support::ended::Ended;
use crate::support::faulty::Faulty;
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::consumer::WorkerEvent;
use shardkeeper::consumer::{EfoPool, ShardWorker, WorkerConfig};
use shardkeeper::functions::{Reaper, Rebalancer};
use shardkeeper::group::{ReapConfig, RebalanceConfig};
use shardkeeper::pipeline::InitialPosition;
use shardkeeper::processing::{stage_effect, HandlerError, RecordHandler, StreamRecord};
use shardkeeper::state::{
    ConsumerId, ConsumerInfo, ShardScope, SkewedClock, StateStore, StoreConfig, SystemClock,
};
use shardkeeper_history::{
    check, produce_numbered, recording_handler, recording_observer, NumberedLoad, SharedHistory,
    Verification,
};
use shardkeeper_local::{unique_name, AwsClients, FaultCounts, Faults, SlowRequests};
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

/// How far a consumer's wall clock may be off (either way).
const MAX_SKEW_MS: i64 = 30_000;

/// The lease term (and heartbeat timeout) of a run without faults.
const LEASE_TERM: Duration = Duration::from_secs(2);

/// The lease term of a run with faults: a heartbeat that meets throttles
/// and faults waits out the retry policy's backoff (up to 2 s a pause), so
/// 2 s would have consumers reaped over and over for missed heartbeats.
const FAULTY_LEASE_TERM: Duration = Duration::from_secs(4);

/// The run's size, from the environment or the CI defaults.
#[derive(Debug, Clone)]
struct Stress {
    seconds: u64,
    consumers: usize,
    shards: i32,
    keys: usize,
    seed: u64,
    /// The share of requests throttled in the run with faults (half as many
    /// answered 500, half as many dropped, twice as many delayed).
    fault_rate: f64,
    /// DynamoDB restarts in the run with faults, spread over it.
    restarts: u32,
    /// The enhanced fan-out pool the workers read through (0: they poll).
    efo: usize,
    /// Records of different keys a worker runs at once, and its shards
    /// stepped at once above 1 (`ProcessingOptions::concurrency`).
    concurrency: usize,
}

impl Stress {
    fn from_env() -> Self {
        let var = |name: &str, default: u64| -> u64 {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Stress {
            seconds: var("SHARDKEEPER_STRESS_SECONDS", 8),
            consumers: var("SHARDKEEPER_STRESS_CONSUMERS", 6) as usize,
            shards: var("SHARDKEEPER_STRESS_SHARDS", 16) as i32,
            keys: var("SHARDKEEPER_STRESS_KEYS", 200) as usize,
            seed: var("SHARDKEEPER_STRESS_SEED", fastrand::u64(..)),
            fault_rate: std::env::var("SHARDKEEPER_STRESS_FAULTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.05),
            restarts: var("SHARDKEEPER_STRESS_RESTARTS", 1) as u32,
            efo: var("SHARDKEEPER_STRESS_EFO", 0) as usize,
            concurrency: var("SHARDKEEPER_STRESS_CONCURRENCY", 1) as usize,
        }
    }

    fn faults(&self) -> Faults {
        let r = self.fault_rate;
        Faults {
            throttle: r,
            server_error: r / 2.0,
            drop: r / 2.0,
            lose_response: r / 2.0,
            delay: (2.0 * r).min(1.0),
            latency: Duration::ZERO..=Duration::from_millis(50),
            // Slow ticks: every renewal and heartbeat waits up to 150 ms
            // (a worker renews its leases one after another: with 16 of
            // them, up to 2.4 s of its 4 s term).
            slow: slow_ticks(Duration::ZERO..=Duration::from_millis(150)).slow,
        }
    }
}

/// How a run goes.
struct Course {
    /// The lease term, and the heartbeat and hand-off timeouts of the
    /// rebalancer and the reaper.
    lease_term: Duration,
    /// How long the producer writes.
    seconds: u64,
    /// The consumers' handler.
    handler: Handler,
    /// Every 250 ms a seeded draw may kill a consumer, have one leave and
    /// another join, split or merge shards, slow the handler down for a
    /// term, or start a second process under a live consumer's id.
    chaos: bool,
    /// DynamoDB restarts, spread over the run (with faults only).
    restarts: u32,
    /// An operator moves the group back mid-run: a rewind a third of the
    /// way in and a forced reset two thirds of the way in, each to a second
    /// before production began (a later time would skip the backlog of a
    /// lagging shard), while the consumers hold their leases and read.
    operator: bool,
    /// Records per PutRecords, and the pause after each.
    batch: usize,
    pace: Duration,
}

impl Course {
    /// The hostile run: chaos, per-record and batch handlers.
    fn chaos(cfg: &Stress, lease_term: Duration, restarts: u32) -> Self {
        Course {
            lease_term,
            seconds: cfg.seconds,
            handler: Handler::Mixed,
            chaos: true,
            restarts,
            operator: true,
            batch: 100,
            pace: Duration::from_millis(20),
        }
    }
}

/// The consumers' handler (recorded), and how they reach the state table.
#[derive(Debug, Clone)]
enum Handler {
    /// Every other consumer started handles one record at a time, the
    /// others in batches (`handle_batch`); either takes 10 ms a record
    /// while [`Spawner::slow`] is set.
    Mixed,
    /// Every other consumer started is sick: its batch handler takes a time
    /// drawn from the range for every call, whatever the batch's size, and
    /// it reaches the state table through the run's proxy (which slows its
    /// renewals and heartbeats). The others are healthy: they handle a
    /// batch at once and reach the state table directly.
    HalfSick(RangeInclusive<Duration>),
    /// Every consumer handles one record at a time and stages, as the
    /// record's effect, an `ADD` of one to its counter in this table
    /// (`<key>#<n>`), written with the checkpoint that covers the record.
    Effects(String),
}

/// Where a run goes: the clients of the system under test, the clients of
/// the producer and the test's own calls, the state table, and the proxies
/// and restartable server of a run with faults.
struct Setup<'a> {
    system: AwsClients,
    direct: AwsClients,
    table: String,
    faulty: Option<&'a mut Faulty>,
}

/// A running consumer process: its consumer id, its name in the history
/// (the id, or `<id>#<n>` for a later process under the same id), task and
/// stop flag.
struct Consumer {
    id: String,
    name: String,
    task: JoinHandle<Ended>,
    stop: Arc<AtomicBool>,
}

/// What every consumer process of a run shares.
struct Spawner<'a> {
    store: &'a StateStore,
    kinesis: &'a aws_sdk_kinesis::Client,
    history: &'a SharedHistory,
    lease_term: Duration,
    handler: Handler,
    /// The state table past any proxy (for healthy consumers).
    direct: &'a aws_sdk_dynamodb::Client,
    /// Processes started so far.
    started: std::cell::Cell<usize>,
    /// While set, the per-record handler takes 10 ms a record.
    slow: Arc<AtomicBool>,
    /// The enhanced fan-out pool the workers read through (0: they poll).
    efo: usize,
    /// The workers' `ProcessingOptions::concurrency`.
    concurrency: usize,
}

impl Spawner<'_> {
    /// Starts a process under consumer id `id`, recorded as `name`, on a
    /// wall clock `skew_ms` off.
    fn spawn(&self, id: &str, name: String, skew_ms: i64) -> Consumer {
        let clock = Arc::new(SkewedClock::new(Arc::new(SystemClock), skew_ms));
        let config = self.store.config().clone();
        let n = self.started.replace(self.started.get() + 1);
        match &self.handler {
            Handler::Mixed => {
                let store = StateStore::with_clock(self.store.client().clone(), config, clock);
                if n.is_multiple_of(2) {
                    let handler =
                        slow_or_not(self.history, &name, &self.slow, self.concurrency > 1);
                    spawn_consumer(id, name, &store, self, handler)
                } else {
                    let busy = Duration::ZERO..=Duration::ZERO;
                    let slow = Some(self.slow.clone());
                    let handler = recording_handler(self.history, &name, Batches { busy, slow });
                    spawn_consumer(id, name, &store, self, handler)
                }
            }
            Handler::Effects(table) => {
                let store = StateStore::with_clock(self.store.client().clone(), config, clock);
                let handler = recording_handler(self.history, &name, counting(table, &self.slow));
                spawn_consumer(id, name, &store, self, handler)
            }
            Handler::HalfSick(busy) => {
                let (client, busy) = match n % 2 {
                    0 => (self.store.client(), busy.clone()),
                    _ => (self.direct, Duration::ZERO..=Duration::ZERO),
                };
                let store = StateStore::with_clock(client.clone(), config, clock);
                let handler = recording_handler(self.history, &name, Batches { busy, slow: None });
                spawn_consumer(id, name, &store, self, handler)
            }
        }
    }
}

/// The run's per-record handler: every record is recorded, after 10 ms while
/// `slow` is set (a handler cut off at the lease's end records nothing);
/// with `jitter`, after 0 to 3 ms otherwise (records of several keys at
/// once then finish out of their order, as real calls do: only a key's
/// own order is kept).
fn slow_or_not(
    history: &SharedHistory,
    name: &str,
    slow: &Arc<AtomicBool>,
    jitter: bool,
) -> impl RecordHandler {
    let slow = slow.clone();
    recording_handler(history, name, move |_: StreamRecord| {
        let slow = slow.load(Ordering::Relaxed);
        let wait = if slow {
            Duration::from_millis(10)
        } else if jitter {
            Duration::from_micros(fastrand::u64(0..3_000))
        } else {
            Duration::ZERO
        };
        async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            Ok::<(), std::io::Error>(())
        }
    })
}

/// The effects run's handler: stages an `ADD` of one to the record's
/// counter in `table` (after 10 ms while `slow` is set).
fn counting(table: &str, slow: &Arc<AtomicBool>) -> impl RecordHandler {
    let (table, slow) = (table.to_owned(), slow.clone());
    move |record: StreamRecord| {
        let (table, slow) = (table.clone(), slow.load(Ordering::Relaxed));
        async move {
            if slow {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let n = std::str::from_utf8(&record.data).unwrap_or_default();
            let update = aws_sdk_dynamodb::types::Update::builder()
                .table_name(table)
                .key(
                    "pk",
                    aws_sdk_dynamodb::types::AttributeValue::S(format!(
                        "{}#{n}",
                        record.partition_key
                    )),
                )
                .update_expression("ADD #count :one")
                .expression_attribute_names("#count", "count")
                .expression_attribute_values(
                    ":one",
                    aws_sdk_dynamodb::types::AttributeValue::N("1".into()),
                )
                .build()?;
            stage_effect(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(update)
                    .build(),
            )?;
            Ok::<(), HandlerError>(())
        }
    }
}

/// A bulk handler that takes a time drawn from `busy` for every run of
/// records it is handed (and 10 ms a record while `slow` is set), then
/// succeeds for each.
struct Batches {
    busy: RangeInclusive<Duration>,
    slow: Option<Arc<AtomicBool>>,
}

impl RecordHandler for Batches {
    const BATCHED: bool = true;

    async fn handle(&self, _: StreamRecord) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn handle_batch(&self, records: Vec<StreamRecord>) -> Vec<Result<(), HandlerError>> {
        let (low, high) = (*self.busy.start(), *self.busy.end());
        let mut busy = low + (high - low).mul_f64(fastrand::f64());
        if self
            .slow
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
        {
            busy += Duration::from_millis(10) * records.len() as u32;
        }
        tokio::time::sleep(busy).await;
        records.iter().map(|_| Ok(())).collect()
    }
}

fn spawn_consumer<H: RecordHandler>(
    id: &str,
    name: String,
    store: &StateStore,
    with: &Spawner<'_>,
    handler: H,
) -> Consumer {
    let (history, lease_term) = (with.history, with.lease_term);
    let info = ConsumerInfo::for_this_process(ConsumerId::new(id).unwrap(), store.now());
    let session = ConsumerSession::new(store.clone(), info, lease_term);
    let config = WorkerConfig::default()
        .initial_position(InitialPosition::Latest)
        .renew_every(RENEW_EVERY)
        .min_poll_interval(Duration::from_millis(100))
        .idle_poll_interval(Duration::from_millis(200))
        .max_records(200)
        .processing(
            WorkerConfig::default()
                .processing
                .concurrency(with.concurrency),
        )
        .enhanced_fan_out(
            (with.efo > 0)
                .then(|| EfoPool::new("stress", with.efo).poll_interval(Duration::from_millis(20))),
        );
    let mut worker = ShardWorker::new(
        session,
        store.clone(),
        with.kinesis.clone(),
        handler,
        config,
    )
    .with_observer(recording_observer(history, &name));
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let me = name.clone();
    let task = tokio::spawn(async move {
        // A worker that fails (e.g. its table calls keep failing) stops like
        // a crashed process; the group takes its shards over.
        let run = worker
            .run_until(None, || flag.load(Ordering::Relaxed))
            .await;
        if let Err(e) = &run {
            tracing::warn!(consumer = %me, error = %e, "worker stopped");
        }
        Ended::of(&run)
    });
    Consumer {
        id: id.to_owned(),
        name,
        task,
        stop,
    }
}

/// Runs `tick` every `every` until `stop`, counting failed ticks.
fn ticking<F, Fut, T, E>(
    every: Duration,
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
    tick: F,
) -> JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = tick().await {
                tracing::debug!(error = %e, "tick failed");
                failed.fetch_add(1, Ordering::Relaxed);
            }
            tokio::time::sleep(every).await;
        }
    })
}

fn open(shard: &aws_sdk_kinesis::types::Shard) -> bool {
    shard
        .sequence_number_range()
        .is_some_and(|r| r.ending_sequence_number().is_none())
}

fn range(shard: &aws_sdk_kinesis::types::Shard) -> (u128, u128) {
    let r = shard.hash_key_range().unwrap();
    (
        r.starting_hash_key().parse().unwrap(),
        r.ending_hash_key().parse().unwrap(),
    )
}

/// Splits a random open shard in the middle; whether Kinesis accepted it.
async fn split_one(aws: &AwsClients, stream: &str, rng: &mut fastrand::Rng) -> bool {
    let shards: Vec<_> = list_shards(aws, stream)
        .await
        .into_iter()
        .filter(open)
        .collect();
    let Some(shard) = shards.get(rng.usize(..shards.len().max(1))) else {
        return false;
    };
    let (lo, hi) = range(shard);
    aws.kinesis
        .split_shard()
        .stream_name(stream)
        .shard_to_split(shard.shard_id())
        .new_starting_hash_key((lo + (hi - lo) / 2 + 1).to_string())
        .send()
        .await
        .is_ok()
}

/// Merges two adjacent open shards; whether Kinesis accepted it.
async fn merge_two(aws: &AwsClients, stream: &str, rng: &mut fastrand::Rng) -> bool {
    let mut shards: Vec<_> = list_shards(aws, stream)
        .await
        .into_iter()
        .filter(open)
        .collect();
    shards.sort_by_key(|s| range(s).0);
    let pairs: Vec<_> = shards
        .windows(2)
        .filter(|w| range(&w[0]).1 + 1 == range(&w[1]).0)
        .map(|w| (w[0].shard_id().to_owned(), w[1].shard_id().to_owned()))
        .collect();
    let Some((a, b)) = pairs.get(rng.usize(..pairs.len().max(1))) else {
        return false;
    };
    aws.kinesis
        .merge_shards()
        .stream_name(stream)
        .shard_to_merge(a)
        .adjacent_shard_to_merge(b)
        .send()
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stress_run_keeps_every_guarantee() {
    chaos_on_the_shared_servers(Stress::from_env()).await;
}

/// The chaos course on the shared servers.
async fn chaos_on_the_shared_servers(cfg: Stress) {
    let ctx = ctx().await;
    let setup = Setup {
        system: ctx.aws.clone(),
        direct: ctx.aws.clone(),
        table: ctx.table.clone(),
        faulty: None,
    };
    stress(&cfg, setup, Course::chaos(&cfg, LEASE_TERM, 0)).await;
}

/// The same with each worker running records of different keys at once
/// and stepping its shards at once (`concurrency(8)`): kills with calls in
/// flight, slow stretches, lease moves and the operator's moves break no
/// guarantee.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stress_run_at_concurrency_keeps_every_guarantee() {
    chaos_on_the_shared_servers(Stress {
        concurrency: 8,
        ..Stress::from_env()
    })
    .await;
}

/// Effects exactly once through lease moves: the chaos course (kills
/// mid-batch, consumers leaving and joining, splits and merges, slow
/// stretches that outlast the lease, a second process under a live id,
/// skewed clocks) with a handler whose effect is a counter per record,
/// written with the checkpoint in one transaction fenced by the lease:
/// every counter ends at 1. (No operator moves: a rewind runs records
/// again on purpose.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stress_run_writes_each_records_effect_once() {
    let cfg = Stress::from_env();
    let ctx = ctx().await;
    let table = crate::lambda::esm_contract::create_effects_table(&ctx).await;
    if !crate::lambda::esm_contract::transactions_are_isolated(&ctx, &table).await {
        // A lease holder's transaction and the take of its lease must not
        // both apply; without isolation the run shows nothing.
        return;
    }
    let setup = Setup {
        system: ctx.aws.clone(),
        direct: ctx.aws.clone(),
        table: ctx.table.clone(),
        faulty: None,
    };
    let course = Course {
        handler: Handler::Effects(table),
        operator: false,
        ..Course::chaos(&cfg, LEASE_TERM, 0)
    };
    stress(&cfg, setup, course).await;
}

/// Every counter of an effects table, by `<key>#<n>`.
async fn effect_counts(aws: &AwsClients, table: &str) -> std::collections::BTreeMap<String, u64> {
    crate::lambda::esm_contract::effect_counts_in(&aws.dynamodb, table).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stress_run_keeps_every_guarantee_through_faults_and_a_dynamodb_restart() {
    let cfg = Stress::from_env();
    let mut faulty = Faulty::start(cfg.seed).await;
    faulty.set_faults(&cfg.faults());
    let setup = Setup {
        system: faulty.ctx.aws.clone(),
        direct: faulty.direct.clone(),
        table: faulty.ctx.table.clone(),
        faulty: Some(&mut faulty),
    };
    let course = Course::chaos(&cfg, FAULTY_LEASE_TERM, cfg.restarts);
    let counts = stress(&cfg, setup, course).await;
    assert!(counts.injected() > 0, "faults were injected");
}

/// What the state table's proxy does in the run with slow ticks: every
/// lease renewal and heartbeat through it waits 0.3 to 1.2 s, nothing else
/// (the update expressions of `renew` in crates/state-store/src/lease.rs
/// and of the heartbeat in consumer.rs; a take sets its owner first and is
/// not slowed).
/// Renewals and heartbeats (the state table's `UpdateItem`s that set a
/// lease's expiry or a consumer's heartbeat) each wait a time drawn from
/// `latency`.
fn slow_ticks(latency: RangeInclusive<Duration>) -> Faults {
    Faults {
        slow: Some(SlowRequests {
            operation: "UpdateItem".into(),
            body_contains: vec![
                "SET #expires = :until".into(),
                "SET #heartbeat = :now".into(),
            ],
            latency,
        }),
        ..Faults::none()
    }
}

/// Slow ticks: half the consumers are sick (their renewals and heartbeats
/// slowed by the state table's proxy, their batch handler running close to
/// its stop-by instant), the other half healthy (the state table reached
/// directly, batches handled at once), and the heartbeat timeout of the
/// reaper and the rebalancer as short as the configuration allows (the
/// lease term plus the renewal interval). A sick consumer's heartbeat goes stale while it is inside a
/// batch under a lease it has just taken or renewed, and a healthy one is
/// quick to take what the sick one is judged to have lost. Two consumers
/// must still never run the handler on one shard at once. No chaos; the
/// producer writes 20 records every 100 ms for three times the run's
/// seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stress_run_with_slow_ticks_never_runs_two_consumers_on_one_shard() {
    let cfg = Stress::from_env();
    let mut faulty = Faulty::start(cfg.seed).await;
    faulty
        .dynamodb
        .set_faults(slow_ticks(
            Duration::from_millis(300)..=Duration::from_millis(1200),
        ))
        .unwrap();
    let setup = Setup {
        system: faulty.ctx.aws.clone(),
        direct: faulty.direct.clone(),
        table: faulty.ctx.table.clone(),
        faulty: Some(&mut faulty),
    };
    let ms = Duration::from_millis;
    let course = Course {
        lease_term: LEASE_TERM,
        seconds: 3 * cfg.seconds,
        // Processing stops the margin (at most a quarter of the term)
        // before the local expiry: 1.5 s after a heartbeat's send, which
        // the proxy holds 0.3 to 1.2 s. A batch takes 0.3 to 1.3 s: often
        // cut at its stop-by, often done. (One that never fits the window
        // left after a heartbeat never completes: its shard stays with its
        // consumer while that consumer heartbeats.)
        handler: Handler::HalfSick(ms(300)..=ms(1300)),
        chaos: false,
        restarts: 0,
        operator: false,
        batch: 20,
        pace: ms(100),
    };
    let counts = stress(&cfg, setup, course).await;
    assert!(counts.slowed > 0, "renewals and heartbeats were slowed");
}

/// An operator moves the running group back to `to` (ms; no shard's
/// position may lie before it, or records would be skipped): with
/// `rewind`, a rewind (run again until it is finished, as its report
/// asks); else a forced reset, which ends the live leases. The move's
/// window goes to `history`.
async fn move_back(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    history: &SharedHistory,
    to: i64,
    rewind: bool,
) {
    let began = Instant::now();
    crate::support::operator::move_back(store, kinesis, to, rewind).await;
    history
        .lock()
        .unwrap()
        .moved_back
        .push((began, Instant::now()));
}

/// One run; what the proxies did (nothing without them).
async fn stress(cfg: &Stress, setup: Setup<'_>, course: Course) -> FaultCounts {
    let Setup {
        system,
        direct,
        table,
        mut faulty,
    } = setup;
    println!(
        "stress run: {cfg:?}, {}",
        match (faulty.is_some(), course.chaos) {
            (_, false) => "slow ticks",
            (true, true) => "through faults",
            (false, true) => "no faults",
        }
    );
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let lease_term = course.lease_term;
    let stream = create_stream(&direct, cfg.shards).await;
    let store = StateStore::new(
        system.dynamodb.clone(),
        StoreConfig::new(&unique_name("stress"), &stream)
            .unwrap()
            .table(&table)
            .unwrap()
            .buckets(crate::support::common::test_buckets()),
    );
    let history = SharedHistory::default();
    let stop_all = Arc::new(AtomicBool::new(false));
    let failed_ticks = Arc::new(AtomicU64::new(0));

    let rebalancer = Arc::new(Rebalancer::new(
        store.clone(),
        system.kinesis.clone(),
        RebalanceConfig::default()
            .lease_term(lease_term)
            .heartbeat_timeout(heartbeat_timeout(lease_term))
            .max_moves_per_tick(None),
    ));
    let reaper = Arc::new(Reaper::new(
        store.clone(),
        system.kinesis.clone(),
        ReapConfig::default()
            .heartbeat_timeout(heartbeat_timeout(lease_term))
            .lease_term(lease_term),
    ));
    let rebalancing = ticking(
        Duration::from_millis(250),
        stop_all.clone(),
        failed_ticks.clone(),
        move || {
            let r = rebalancer.clone();
            async move { r.tick().await }
        },
    );
    let reaping = ticking(
        Duration::from_millis(500),
        stop_all.clone(),
        failed_ticks.clone(),
        move || {
            let r = reaper.clone();
            async move { r.tick().await }
        },
    );

    let spawner = Spawner {
        store: &store,
        kinesis: &system.kinesis,
        history: &history,
        lease_term,
        handler: course.handler.clone(),
        direct: &direct.dynamodb,
        started: Default::default(),
        slow: Arc::new(AtomicBool::new(false)),
        efo: cfg.efo,
        concurrency: cfg.concurrency,
    };
    let mut generation = 0;
    let mut next_id = || {
        generation += 1;
        format!("c{generation}")
    };
    let skew = |rng: &mut fastrand::Rng| rng.i64(-MAX_SKEW_MS..=MAX_SKEW_MS);
    let mut live: Vec<Consumer> = (0..cfg.consumers)
        .map(|_| {
            let id = next_id();
            spawner.spawn(&id, id.clone(), skew(&mut rng))
        })
        .collect();
    // Every shard starts at LATEST: production begins once each shard's
    // start is pinned and stored, and from then on not one record written
    // may be skipped (a start at LATEST never skips).
    let pinned = Instant::now();
    loop {
        let shards = store
            .shards()
            .list(&ShardScope::Group)
            .await
            .unwrap_or_default();
        if !shards.is_empty() && shards.iter().all(|s| s.checkpoint.is_some()) {
            break;
        }
        assert!(
            // A bound only so a broken run ends: 256 shards over 8
            // buckets through faults took 77 s.
            pinned.elapsed() < Duration::from_secs(300),
            "every shard's LATEST start stored"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    let production_began = {
        use shardkeeper::state::Clock;
        shardkeeper::state::SystemClock.now_millis()
    };
    let producer = {
        let load = NumberedLoad {
            stream: stream.clone(),
            records: None,
            keys: cfg.keys,
            batch: course.batch,
            pace: course.pace,
        };
        let (kinesis, history, stop) = (
            direct.kinesis.clone(),
            history.clone(),
            Arc::new(AtomicBool::new(false)),
        );
        let flag = stop.clone();
        (
            stop,
            tokio::spawn(async move { produce_numbered(&kinesis, &load, &history, &flag).await }),
        )
    };
    let mut left: Vec<Consumer> = Vec::new();
    let (mut kills, mut leaves, mut splits, mut merges) = (0, 0, 0, 0);
    let (mut restarts, mut crashes, mut doubles, mut superseded) = (0, 0, 0, 0);
    let mut operator_moves = 0u32;
    // The group is started on its stream, as every function's init does
    // (an operator's rewind refuses a group that has not started).
    let operator = StateStore::new(direct.dynamodb.clone(), store.config().clone());
    operator
        .start_on_stream(
            &direct.kinesis,
            shardkeeper::state::TableOptions::default().poll_interval(Duration::from_millis(50)),
        )
        .await
        .unwrap();
    let mut slow_until: Option<Instant> = None;
    let mut slow_phases = 0;
    let seconds = course.seconds;
    let restart_every = Duration::from_secs(seconds) / (course.restarts + 1);
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if slow_until.is_some_and(|t| Instant::now() >= t) {
            spawner.slow.store(false, Ordering::Relaxed);
            slow_until = None;
        }
        // A worker superseded by a newer process under its id is done; one
        // that ended otherwise failed for good: a supervisor starts another
        // in its place, and the run reports it.
        while let Some(i) = live.iter().position(|c| c.task.is_finished()) {
            let ended = live.swap_remove(i);
            let name = ended.name.clone();
            if ended.task.await.unwrap() == Ended::Superseded {
                superseded += 1;
                continue;
            }
            tracing::warn!(consumer = %name, "worker ended by itself");
            crashes += 1;
            let id = next_id();
            live.push(spawner.spawn(&id, id.clone(), skew(&mut rng)));
        }
        if let Some(faulty) = faulty.as_deref_mut() {
            if restarts < course.restarts && started.elapsed() >= restart_every * (restarts + 1) {
                // Down for longer than a lease term: every lease expires.
                faulty
                    .restart_dynamodb(lease_term + Duration::from_secs(1))
                    .await;
                restarts += 1;
                continue;
            }
        }
        if course.operator
            && operator_moves < 2
            && started.elapsed() >= Duration::from_secs(seconds) * (operator_moves + 1) / 3
        {
            let rewind = operator_moves == 0;
            move_back(
                &operator,
                &direct.kinesis,
                &history,
                production_began - 1000,
                rewind,
            )
            .await;
            operator_moves += 1;
            continue;
        }
        if !course.chaos {
            continue;
        }
        match rng.u32(..100) {
            0..8 if !live.is_empty() => {
                // Killed mid-batch: no release, no more heartbeats. A new
                // process takes its place.
                let victim = live.swap_remove(rng.usize(..live.len()));
                victim.task.abort();
                history
                    .lock()
                    .unwrap()
                    .killed
                    .push((victim.name, Instant::now()));
                kills += 1;
                let id = next_id();
                live.push(spawner.spawn(&id, id.clone(), skew(&mut rng)));
            }
            8..12 if live.len() > 1 => {
                // One leaves cleanly; another joins.
                let leaving = live.swap_remove(rng.usize(..live.len()));
                leaving.stop.store(true, Ordering::Relaxed);
                left.push(leaving);
                leaves += 1;
                let id = next_id();
                live.push(spawner.spawn(&id, id.clone(), skew(&mut rng)));
            }
            12..15 => splits += u32::from(split_one(&direct, &stream, &mut rng).await),
            15..17 => merges += u32::from(merge_two(&direct, &stream, &mut rng).await),
            // (At least once a run, a fifth of the way in.)
            n if slow_until.is_none()
                && ((17..20).contains(&n)
                    || (slow_phases == 0
                        && started.elapsed() >= Duration::from_secs(seconds) / 5)) =>
            {
                // The handler turns slow for a while: batches outlast the term.
                spawner.slow.store(true, Ordering::Relaxed);
                slow_until = Some(Instant::now() + lease_term);
                slow_phases += 1;
            }
            // (At least once a run, two fifths of the way in: before the
            // first DynamoDB restart of a run with faults.)
            n if !live.is_empty()
                && ((20..22).contains(&n)
                    || (doubles == 0
                        && started.elapsed() >= Duration::from_secs(seconds) * 2 / 5)) =>
            {
                // A second process starts under a live consumer's id (a
                // restart while the old one still runs): it takes the id
                // over, and the old one must stop without a checkpoint more.
                let twin = &live[rng.usize(..live.len())];
                doubles += 1;
                let id = twin.id.clone();
                let name = format!("{id}#{doubles}");
                live.push(spawner.spawn(&id, name, skew(&mut rng)));
            }
            _ => {}
        }
    }

    // A move a restart crowded out of the run comes now, while the group
    // drains what was produced.
    while course.operator && operator_moves < 2 {
        let rewind = operator_moves == 0;
        move_back(
            &operator,
            &direct.kinesis,
            &history,
            production_began - 1000,
            rewind,
        )
        .await;
        operator_moves += 1;
    }
    // Production stops; the group drains the stream at full speed.
    spawner.slow.store(false, Ordering::Relaxed);
    producer.0.store(true, Ordering::Relaxed);
    let produced = producer.1.await.unwrap();
    // Drained when every record is processed; given up (and the checker
    // reports what is lost) after a minute without progress.
    let mut seen = HashSet::new();
    let mut scanned = 0;
    let mut progress = Instant::now();
    while seen.len() < produced && progress.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let h = history.lock().unwrap();
        for p in &h.processed[scanned..] {
            if seen.insert((p.key.clone(), p.n)) {
                progress = Instant::now();
            }
        }
        scanned = h.processed.len();
    }
    // With effects, drained when every record's effect is written (a record
    // run by a consumer killed before its commit runs again).
    if let Handler::Effects(table) = &course.handler {
        let began = Instant::now();
        while effect_counts(&direct, table).await.len() < produced
            && began.elapsed() < Duration::from_secs(60)
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    if seen.len() < produced {
        // Stalled: where the group stands while its consumers still run.
        let direct_store = StateStore::new(direct.dynamodb.clone(), store.config().clone());
        let snapshot = direct_store.load_group().await.unwrap();
        let status = shardkeeper::group::GroupStatus::from_snapshot(&snapshot, lease_term);
        for row in status.shards.iter().filter(|r| r.state != "depleted") {
            println!("stalled shard: {row:?}");
        }
        for row in &status.consumers {
            println!("stalled consumer: {row:?}");
        }
        for c in &live {
            println!(
                "live process {} (id {}), finished: {}",
                c.name,
                c.id,
                c.task.is_finished()
            );
        }
    }
    for c in live.iter().chain(&left) {
        c.stop.store(true, Ordering::Relaxed);
    }
    for c in live.into_iter().chain(left) {
        if c.task.await.unwrap() == Ended::Superseded {
            superseded += 1;
        }
    }
    stop_all.store(true, Ordering::Relaxed);
    let _ = rebalancing.await;
    let _ = reaping.await;
    // Each record's effect written exactly once: one counter a record
    // produced, each at 1.
    if let Handler::Effects(table) = &course.handler {
        let counts = effect_counts(&direct, table).await;
        let twice: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
        assert!(
            twice.is_empty(),
            "effects written more than once: {twice:?}"
        );
        assert_eq!(
            counts.len(),
            produced,
            "a counter for every record produced"
        );
    }

    let (specs, _) = shardkeeper::consumer::list_stream_shards(
        &direct.kinesis,
        &store.config().stream,
        &store.config().retry,
    )
    .await
    .unwrap();
    // Every task has ended: the history is complete.
    let mut history = std::mem::take(&mut *history.lock().unwrap());
    history.parents = specs
        .iter()
        .map(|s| (s.shard_id.clone(), s.parents.clone()))
        .collect();
    let verdict = check(&history);
    let lease_changes = history
        .events
        .iter()
        .filter(|(_, e)| matches!(e, WorkerEvent::Gained { .. }))
        .count();
    let counts = faulty.as_deref().map(Faulty::counts).unwrap_or_default();
    let reads = system.kinesis_requests.snapshot();
    let sent = |operation: &str| reads.get(operation).map_or(0, |c| c.requests);
    let (polls, subscriptions) = (sent("GetRecords"), sent("SubscribeToShard"));
    if cfg.efo > 0 {
        assert!(subscriptions > 0, "the workers read through the pool");
    }
    println!(
        "stress run: {:.1}s, {} consumers ({} started in all), {} shards at the start, {} at the end, \
         reads: {polls} GetRecords, {subscriptions} SubscribeToShard, \
         {} records produced, {} processed ({} duplicates), {kills} kills, {leaves} leaves, \
         {splits} splits, {merges} merges, {lease_changes} lease changes, {} failed ticks, \
         {slow_phases} slow phases, {operator_moves} operator moves back, {doubles} second processes under a live id ({superseded} \
         older ones stopped), clocks off by up to {MAX_SKEW_MS} ms; \
         faults: {} requests, {} throttled, {} answered 500, {} dropped, {} lost answers, {} delayed, \
         {} slowed renewals and heartbeats, \
         {restarts} DynamoDB restarts, {crashes} workers ended by themselves; \
         checker: {} double ownership, {} regressions, {} lost, {} order violations, \
         {} unjustified duplicates, {} children before parents, {} past their lease's expiry, \
         {} handler calls of two consumers on one shard at once, \
         {} handler calls in another consumer's holding",
        started.elapsed().as_secs_f64(),
        cfg.consumers,
        generation,
        cfg.shards,
        specs.len(),
        verdict.produced,
        verdict.processed,
        verdict.duplicates,
        failed_ticks.load(Ordering::Relaxed),
        counts.requests(),
        counts.throttled,
        counts.errors_500,
        counts.dropped,
        counts.lost_responses,
        counts.delayed,
        counts.slowed,
        verdict.double_owned.len(),
        verdict.checkpoint_regressions.len(),
        verdict.lost,
        verdict.order_violations,
        verdict.unjustified_duplicates,
        verdict.children_before_parents.len(),
        verdict.past_lease_expiry,
        verdict.overlaps.len(),
        verdict.intrusions.len(),
    );
    if !verdict.passed() {
        explain_overlaps(&history, &verdict);
        explain(&history, &verdict, started);
        if verdict.unjustified_duplicates > 0 {
            explain_duplicates(&history, started);
        }
    }
    if verdict.lost > 0 {
        // Where the group stands on the shards it has not finished.
        let direct_store = StateStore::new(direct.dynamodb.clone(), store.config().clone());
        let snapshot = direct_store.load_group().await.unwrap();
        let status = shardkeeper::group::GroupStatus::from_snapshot(&snapshot, lease_term);
        for row in status.shards.iter().filter(|r| r.state != "depleted") {
            println!("unfinished: {row:?}");
        }
        for row in &status.consumers {
            println!("consumer: {row:?}");
        }
    }
    assert!(
        verdict.passed(),
        "seed {}: the history checker failed\n{}",
        cfg.seed,
        failures(&verdict)
    );
    assert_eq!(
        verdict.produced, produced,
        "the history holds every record written"
    );
    assert!(
        produced > 0 && lease_changes > cfg.consumers,
        "the run did something"
    );
    assert_eq!(
        crashes, 0,
        "seed {}: every worker rode the faults out",
        cfg.seed
    );
    if faulty.is_some() {
        assert_eq!(restarts, course.restarts, "DynamoDB restarted as asked");
    }
    counts
}

/// What the checker found, for a failed run's message: its counts, and the
/// first of its handler calls that overlapped or ran in another consumer's
/// holding (times since the history's first instant).
fn failures(verdict: &Verification) -> String {
    let v = verdict;
    let mut out = format!(
        "{} produced, {} processed ({} duplicates, {} unjustified), {} lost, \
         {} order violations, double ownership of {:?}, regressions on {:?}, \
         children before parents on {:?}, {} past their lease's expiry\n",
        v.produced,
        v.processed,
        v.duplicates,
        v.unjustified_duplicates,
        v.lost,
        v.order_violations,
        v.double_owned,
        v.checkpoint_regressions,
        v.children_before_parents,
        v.past_lease_expiry
    );
    out.push_str(&calls(v));
    out
}

/// The first of `verdict`'s handler calls that overlapped or ran in another
/// consumer's holding.
fn calls(verdict: &Verification) -> String {
    const SHOWN: usize = 10;
    let mut out = String::new();
    let (overlaps, intrusions) = (&verdict.overlaps, &verdict.intrusions);
    if !overlaps.is_empty() {
        out.push_str(&format!(
            "{} handler calls of two consumers on one shard at once:\n",
            overlaps.len()
        ));
        for o in overlaps.iter().take(SHOWN) {
            out.push_str(&format!("  {o}\n"));
        }
    }
    if !intrusions.is_empty() {
        out.push_str(&format!(
            "{} handler calls in another consumer's holding:\n",
            intrusions.len()
        ));
        for i in intrusions.iter().take(SHOWN) {
            out.push_str(&format!("  {i}\n"));
        }
    }
    out
}

/// Prints the first few records processed more than once, with the events
/// of their shard around them.
fn explain_duplicates(history: &shardkeeper_history::History, t0: Instant) {
    let ms = |t: Instant| t.saturating_duration_since(t0).as_millis();
    let mut seen: std::collections::HashMap<(&str, u64), Vec<&shardkeeper_history::Processed>> =
        std::collections::HashMap::new();
    for p in &history.processed {
        seen.entry((p.key.as_str(), p.n)).or_default().push(p);
    }
    let mut repeated: Vec<_> = seen.into_values().filter(|ps| ps.len() > 1).collect();
    repeated.sort_by_key(|ps| ps[0].at);
    for ps in repeated.iter().step_by((repeated.len() / 4).max(1)).take(4) {
        let shard = &ps[0].shard;
        println!("record {}#{} on {shard}:", ps[0].key, ps[0].n);
        for p in ps {
            println!(
                "  {:>6} ms processed by {} (seq {})",
                ms(p.at),
                p.consumer,
                p.sequence
            );
        }
        let (from, to) = (ps[0].at, ps[ps.len() - 1].at);
        for (who, e) in &history.events {
            let (s, what, at) = match e {
                WorkerEvent::Gained {
                    shard,
                    at,
                    position,
                } => (shard, format!("gained at {position:?}"), *at),
                WorkerEvent::Stopped { shard, why, at } => (shard, format!("{why:?}"), *at),
                WorkerEvent::Checkpointed {
                    shard,
                    checkpoint,
                    sent,
                } => (shard, format!("checkpointed {checkpoint}"), *sent),
                WorkerEvent::Processing { .. } => continue,
            };
            if s == shard
                && at + Duration::from_secs(3) >= from
                && at <= to + Duration::from_secs(1)
            {
                println!("  {:>6} ms {who} {what}", ms(at));
            }
        }
    }
}

/// Prints the shard's lease events and handler calls around the first few
/// overlaps, in ms since the history's first instant (as the overlaps are).
fn explain_overlaps(history: &shardkeeper_history::History, verdict: &Verification) {
    let Some(origin) = history.origin() else {
        return;
    };
    let ms = |t: Instant| t.saturating_duration_since(origin).as_secs_f64() * 1000.0;
    for o in verdict.overlaps.iter().take(3) {
        println!("around the overlap {o}:");
        let from = origin + o.first.start.saturating_sub(Duration::from_secs(3));
        let to = origin + o.first.end.max(o.second.end) + Duration::from_secs(1);
        let mut lines: Vec<(Instant, String)> = Vec::new();
        for (who, e) in &history.events {
            let (shard, what, at) = match e {
                WorkerEvent::Gained { shard, at, .. } => (shard, "gained".to_owned(), *at),
                WorkerEvent::Stopped { shard, why, at } => (shard, format!("{why:?}"), *at),
                WorkerEvent::Checkpointed { shard, sent, .. } => {
                    (shard, "checkpoint sent (accepted)".to_owned(), *sent)
                }
                WorkerEvent::Processing {
                    shard,
                    at,
                    lease_expiry,
                } => (
                    shard,
                    format!("batch starts, lease until {:.1} ms", ms(*lease_expiry)),
                    *at,
                ),
            };
            if *shard == o.shard && (from..=to).contains(&at) {
                lines.push((at, format!("{who} {what}")));
            }
        }
        for span in &history.spans {
            if span.shard == o.shard && span.start <= to && span.end >= from {
                let line = format!("{} call until {:.1} ms", span.consumer, ms(span.end));
                lines.push((span.start, line));
            }
        }
        lines.sort_by_key(|(at, _)| *at);
        for (at, line) in lines {
            println!("  {:>9.1} ms {line}", ms(at));
        }
    }
}

/// Prints what led to each child read before its parents ended.
fn explain(
    history: &shardkeeper_history::History,
    verdict: &shardkeeper_history::Verification,
    t0: Instant,
) {
    let ms = |t: Instant| t.saturating_duration_since(t0).as_millis();
    for child in &verdict.children_before_parents {
        let parents = history.parents.get(child).cloned().unwrap_or_default();
        println!("child {child}, parents {parents:?}");
        for (who, e) in &history.events {
            let (shard, what, at) = match e {
                WorkerEvent::Gained { shard, at, .. } => (shard, "gained".to_string(), *at),
                WorkerEvent::Stopped { shard, why, at } => (shard, format!("{why:?}"), *at),
                WorkerEvent::Checkpointed { .. } | WorkerEvent::Processing { .. } => continue,
            };
            if shard == child || parents.contains(shard) {
                println!("  {:>6} ms {who} {what} {shard}", ms(at));
            }
        }
        if let Some(p) = history.processed.iter().find(|p| &p.shard == child) {
            println!(
                "  {:>6} ms {} first record of {child}",
                ms(p.at),
                p.consumer
            );
        }
        for (who, at) in &history.killed {
            println!("  {:>6} ms {who} killed", ms(*at));
        }
    }
}

/// The shortest heartbeat timeout the configuration allows: the term plus
/// the workers' renewal interval (the reaper on a short timeout).
fn heartbeat_timeout(lease_term: Duration) -> Duration {
    lease_term + RENEW_EVERY
}

/// How often the workers renew and heartbeat.
const RENEW_EVERY: Duration = Duration::from_millis(500);
