//! An emulator of Lambda's stream event source mapping (Kinesis and
//! DynamoDB Streams): it drives a processor the way Lambda does, from
//! records the servers returned, and records what happened for the checker
//! below. It follows the documented contract, not our code:
//!
//! - Batches are runs of one shard's records in order, at most `batch_size`
//!   long. With a ParallelizationFactor above 1, "Lambda processes up to 10
//!   batches in each shard simultaneously" and keeps order per partition
//!   key only ("records with the same partition key are processed in
//!   order", Lambda developer guide, "Polling and batching streams"): here
//!   each partition key hashes to one of `parallelization` lanes, and the
//!   lanes of a round run concurrently. Shards run concurrently.
//! - The mapping can change between attempts (UpdateEventSourceMapping:
//!   BatchSize, ParallelizationFactor, FilterCriteria): with
//!   `reform_chance`, a round first draws a new batch size, a new lane
//!   count and lane hashing, and a new filter. A record a filter leaves out
//!   is discarded ("Lambda ... discards records that don't match",
//!   "Lambda event filtering"), never delivered again.
//! - `ReportBatchItemFailures`: "Lambda retries the batch starting from the
//!   lowest sequence number reported"; "if the function returns an empty
//!   string or null itemIdentifier, or an identifier that is not in the
//!   batch, Lambda treats it as a failure of the entire batch" ("Configuring
//!   partial batch response").
//! - A function error (here also an invocation killed at its timeout, at a
//!   random point of the batch) retries the whole batch; with
//!   `BisectBatchOnFunctionError` the batch is split in two and the first
//!   half retried first ("splitting a batch does not count towards the
//!   retry quota").
//! - After `MaximumRetryAttempts` retries the batch's records go to the
//!   on-failure destination and the shard moves on.
//! - Lambda delivers at least once ("Lambda ... can process records more
//!   than once", Lambda developer guide, event source mappings): with
//!   `duplicate_chance`, a batch also goes to a second invocation at the
//!   same time, whose answer the mapping does not act on. With
//!   `redeliver_chance`, a round first delivers again, from an older
//!   position, records the mapping had counted as done (the same
//!   at-least-once; at most twice a shard).
//! - Each invocation runs in an execution environment: a warm one if one
//!   is idle, else a new one whose init (the processor built again) fails
//!   at `init_failure_chance` ("if the function fails during
//!   initialization, Lambda ... retries", a function error for the
//!   batch). An invocation killed (at a record, or at its timeout) takes
//!   its environment with it; the next one starts cold.
//! - An invocation still running at the function's `timeout` is killed
//!   ("Lambda ... stops the invocation"), and its context's deadline is
//!   that timeout.

use lambda_runtime::Context;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How the emulated event source mapping is configured.
#[derive(Debug, Clone)]
pub struct EsmConfig {
    /// BatchSize.
    pub batch_size: usize,
    /// ParallelizationFactor, 1 to 10.
    pub parallelization: usize,
    /// BisectBatchOnFunctionError.
    pub bisect: bool,
    /// MaximumRetryAttempts.
    pub max_retries: u32,
    /// The chance that an invocation is killed (a timeout) part-way.
    pub kill_chance: f64,
    /// The chance that a round first re-forms the mapping (batch size,
    /// lanes and filter drawn again).
    pub reform_chance: f64,
    /// The chance that a batch is also delivered to a second invocation at
    /// the same time (Lambda delivers at least once; the second one's
    /// answer is not the one the mapping acts on).
    pub duplicate_chance: f64,
    /// The chance that a new execution environment's init fails.
    pub init_failure_chance: f64,
    /// The chance that a round first delivers again, from an older
    /// position, records counted as done (at most twice a shard).
    pub redeliver_chance: f64,
    /// The function's timeout.
    pub timeout: Duration,
    /// Seed of every random choice.
    pub seed: u64,
}

impl EsmConfig {
    /// A mapping drawn from `seed`: batch size 1 to 10, parallelization 1
    /// to 10, bisection on or off, 20 retries, kills and re-forms at the
    /// given chances, a twentieth of the cold starts failing, re-deliveries
    /// before 2 % of the rounds, and a 60 s timeout.
    pub fn drawn(seed: u64, kill_chance: f64, reform_chance: f64) -> EsmConfig {
        let mut rng = fastrand::Rng::with_seed(seed);
        EsmConfig {
            batch_size: rng.usize(1..=10),
            parallelization: rng.usize(1..=10),
            bisect: rng.bool(),
            max_retries: 20,
            kill_chance,
            reform_chance,
            // `SHARDKEEPER_ESM_DUPLICATES` sets it (default 0.1).
            duplicate_chance: std::env::var("SHARDKEEPER_ESM_DUPLICATES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.1),
            init_failure_chance: 0.05,
            redeliver_chance: 0.02,
            timeout: Duration::from_secs(60),
            seed,
        }
    }
}

/// One record as the emulator knows it.
#[derive(Debug, Clone)]
pub struct EsmRecord {
    /// What identifies it in the whole run (a Kinesis sequence number, a
    /// DynamoDB Streams event id): what the handler notes as completed.
    pub id: String,
    /// Its shard.
    pub shard: String,
    /// Its sequence number: the item identifier a failure reports.
    pub sequence: String,
    /// Its partition key (for DynamoDB Streams, its item's keys).
    pub key: String,
    /// The record as it appears in the event's `Records`.
    pub event_record: serde_json::Value,
    /// The user records of a KPL aggregate, (user partition key, id), in
    /// order: what the handler completes instead of the record (empty:
    /// the record itself, under `key` and `id`).
    pub units: Vec<(String, String)>,
}

impl EsmRecord {
    /// What the handler completes of this record: (key, id) pairs.
    fn handled(&self) -> Vec<(&str, &str)> {
        if self.units.is_empty() {
            vec![(self.key.as_str(), self.id.as_str())]
        } else {
            self.units
                .iter()
                .map(|(k, id)| (k.as_str(), id.as_str()))
                .collect()
        }
    }
}

/// What a run did.
#[derive(Debug, Default)]
pub struct EsmRun {
    /// Invocations made.
    pub invocations: u64,
    /// Invocations killed part-way.
    pub killed: u64,
    /// Rounds that re-formed the mapping.
    pub reforms: u64,
    /// Records discarded by a filter (never delivered again).
    pub filtered: BTreeSet<String>,
    /// Records sent to the on-failure destination.
    pub to_destination: BTreeSet<String>,
    /// Records Lambda counts as done: in a batch that returned, before the
    /// lowest failure it reported.
    pub acknowledged: BTreeSet<String>,
    /// Records that were in a batch whose invocation was killed or failed
    /// (with those delivered twice at once, the only ones the contract lets
    /// run twice).
    pub in_failed_invocations: BTreeSet<String>,
    /// Records at or after the lowest failure a returned batch reported
    /// (Lambda delivers them again, from that failure).
    pub past_reported_failures: BTreeSet<String>,
    /// Invocations that were a second, concurrent delivery of a batch.
    pub duplicates: u64,
    /// Invocations whose environment's init failed.
    pub init_failures: u64,
    /// Invocations killed at the function's timeout.
    pub timeouts: u64,
    /// Records delivered again from an older position (done, or still
    /// open then and now in batches that start elsewhere).
    pub redelivered: BTreeSet<String>,
    /// What each invocation that ran the handler completed, in the order
    /// the invocations started.
    pub logs: Vec<InvocationLog>,
}

/// What one invocation did, as far as [`completed`] saw.
#[derive(Debug, Clone)]
pub struct InvocationLog {
    /// Its number, in the order invocations started.
    pub serial: u64,
    /// It was killed (at a record or at its timeout).
    pub killed: bool,
    /// Its batch also went to a second invocation at the same time (or it
    /// is that second invocation).
    pub twinned: bool,
    /// The records it completed.
    pub completed: Vec<String>,
}

tokio::task_local! {
    static INVOCATION: Arc<Invocation>;
}

/// The invocation running now, as the handler sees it.
pub struct Invocation {
    /// Handler calls left before Lambda kills the invocation (negative: never).
    budget: AtomicI64,
    killed: tokio::sync::Notify,
    /// What it completed.
    completed: Mutex<Vec<String>>,
}

/// Notes that the handler completed record `id` of partition key `key`:
/// in `completions`, and in the log of the invocation running it.
pub fn completed(completions: &Completions, key: String, id: String) {
    let _ = INVOCATION.try_with(|inv| inv.completed.lock().unwrap().push(id.clone()));
    completions.lock().unwrap().push((key, id));
}

/// Called by a handler before it does anything: if the emulator decided
/// that the invocation dies here, it never returns (Lambda has killed it).
pub async fn kill_point() {
    let dies = INVOCATION
        .try_with(|inv| inv.budget.fetch_sub(1, Ordering::SeqCst) == 0)
        .unwrap_or(false);
    if dies {
        INVOCATION.with(|inv| inv.killed.notify_one());
        std::future::pending::<()>().await;
    }
}

/// What an invocation returned: the batch item failures' identifiers, or
/// `Err` for a function error.
pub type Returned = Result<Vec<String>, ()>;

/// Invokes the function with an event's text and a context.
pub type Invoke =
    Arc<dyn Fn(String, Context) -> Pin<Box<dyn Future<Output = Returned> + Send>> + Send + Sync>;

/// The init of an execution environment: the function as a cold start
/// builds it.
pub type Init = Arc<dyn Fn() -> Invoke + Send + Sync>;

/// An [`Init`] that gives the same function to every environment (one
/// built by the test, shared).
pub fn warm(invoke: Invoke) -> Init {
    Arc::new(move || invoke.clone())
}

/// An [`Invoke`] of a processor's `handle`, its response's item identifiers
/// read by `failures`.
#[macro_export]
macro_rules! esm_invoke {
    ($processor:expr) => {{
        let processor = $processor.clone();
        let invoke: $crate::support::lambda_esm::Invoke =
            std::sync::Arc::new(move |event: String, context: lambda_runtime::Context| {
                let processor = processor.clone();
                Box::pin(async move {
                    let payload = serde_json::value::RawValue::from_string(event).unwrap();
                    processor
                        .handle(lambda_runtime::LambdaEvent::new(payload, context))
                        .await
                        .map(|response| {
                            response
                                .batch_item_failures
                                .into_iter()
                                .map(|f| f.item_identifier.unwrap_or_default())
                                .collect()
                        })
                        .map_err(drop)
                })
            });
        invoke
    }};
}

enum Outcome {
    /// The function returned: the batch item failures.
    Returned(Vec<String>),
    /// A function error (or a failed init).
    Failed,
    /// Killed at a record, or at the timeout.
    Killed { timeout: bool },
}

/// The function's execution environments: those idle, and how to start one.
struct Environments {
    init: Init,
    idle: Mutex<Vec<Invoke>>,
    /// Invocations started, for their serial numbers.
    started: std::sync::atomic::AtomicU64,
}

impl Environments {
    /// An idle environment, or a new one (`None`: its init failed).
    fn take(&self, init_fails: bool) -> Option<Invoke> {
        if let Some(warm) = self.idle.lock().unwrap().pop() {
            return Some(warm);
        }
        (!init_fails).then(|| (self.init)())
    }

    fn give_back(&self, invoke: Invoke) {
        self.idle.lock().unwrap().push(invoke);
    }
}

/// Emulates the event source mapping of `function` over `records` (each
/// shard's in order) until every record is done, discarded, sent to the
/// destination, or the run gives up (a bound on invocations, so a bug
/// cannot hang the suite). Each execution environment runs what `init`
/// gives it.
pub async fn run(init: Init, function: &str, records: &[EsmRecord], config: &EsmConfig) -> EsmRun {
    let environments = Arc::new(Environments {
        init,
        idle: Mutex::new(Vec::new()),
        started: Default::default(),
    });
    let mut shards: BTreeMap<&str, Vec<EsmRecord>> = BTreeMap::new();
    for r in records {
        shards.entry(&r.shard).or_default().push(r.clone());
    }
    let result = Arc::new(Mutex::new(EsmRun::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (_, shard)) in shards.into_iter().enumerate() {
        let (environments, function, config, result) = (
            environments.clone(),
            function.to_owned(),
            config.clone(),
            result.clone(),
        );
        let seed = config.seed.wrapping_mul(31).wrapping_add(i as u64);
        tasks.spawn(async move {
            run_shard(&environments, &function, shard, &config, seed, &result).await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("shard");
    }
    let mut run = Arc::into_inner(result).unwrap().into_inner().unwrap();
    run.logs.sort_by_key(|l| l.serial);
    run
}

/// The mapping as it is now: batch size, lanes, and the filter.
struct Mapping {
    batch_size: usize,
    lanes: usize,
    salt: u64,
    /// Records whose id hashes to `r` modulo `m` are left out.
    filter: Option<(u64, u64)>,
}

fn hash(text: &str, salt: u64) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64 ^ salt, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

impl Mapping {
    fn lane_of(&self, key: &str) -> usize {
        (hash(key, self.salt) % self.lanes as u64) as usize
    }

    fn passes(&self, record: &EsmRecord) -> bool {
        self.filter
            .is_none_or(|(m, r)| hash(&record.id, 7) % m != r)
    }
}

async fn run_shard(
    environments: &Arc<Environments>,
    function: &str,
    records: Vec<EsmRecord>,
    config: &EsmConfig,
    seed: u64,
    result: &Arc<Mutex<EsmRun>>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut mapping = Mapping {
        batch_size: config.batch_size,
        lanes: config.parallelization.max(1),
        salt: 0,
        filter: None,
    };
    // Records not done yet (by position), retries of the batch starting at
    // a record, and the bisected length of a batch starting at a record.
    let mut open: Vec<bool> = vec![true; records.len()];
    let mut acknowledged: Vec<bool> = vec![false; records.len()];
    let mut redeliveries = 0;
    let mut retries: HashMap<usize, u32> = HashMap::new();
    let mut caps: HashMap<usize, usize> = HashMap::new();
    // Where failed batches start again (positions, lowest first).
    let mut retry_heads: BTreeSet<usize> = BTreeSet::new();
    let mut invocations = 0;
    while open.iter().any(|o| *o) {
        if rng.f64() < config.reform_chance {
            // Half of the re-forms take the factor down to 1 (every lane's
            // records in one), the change that merges most.
            mapping = Mapping {
                batch_size: rng.usize(1..=10),
                lanes: if rng.bool() { 1 } else { rng.usize(1..=10) },
                salt: rng.u64(..),
                filter: rng.bool().then(|| {
                    let m = rng.u64(3..=6);
                    (m, rng.u64(0..m))
                }),
            };
            result.lock().unwrap().reforms += 1;
        }
        if redeliveries < 2 && rng.f64() < config.redeliver_chance {
            // From an older position: every record done since it comes again.
            let done: Vec<usize> = (0..records.len()).filter(|&i| acknowledged[i]).collect();
            if !done.is_empty() {
                redeliveries += 1;
                let from = done[rng.usize(..done.len())];
                let mut run = result.lock().unwrap();
                // Everything from there comes again: records done, and
                // records still open, now in batches that start elsewhere.
                for i in from..records.len() {
                    if acknowledged[i] {
                        open[i] = true;
                        acknowledged[i] = false;
                    }
                    if open[i] {
                        run.redelivered.insert(records[i].id.clone());
                    }
                }
                // The shard starts again there: retries after it are moot.
                retries.retain(|&h, _| h < from);
                caps.retain(|&h, _| h < from);
                retry_heads.retain(|&h| h < from);
            }
        }
        // Each lane's batch: its open records in order, the ones the
        // filter leaves out discarded as they are passed. A lane that holds
        // the start of a failed batch retries from there, as Lambda retries
        // a batch from its first record, whatever the mapping holds before
        // it now (records of keys with open records before it wait, so each
        // key stays in order).
        let retry_from: Vec<Option<usize>> = (0..mapping.lanes)
            .map(|lane| {
                retry_heads
                    .iter()
                    .copied()
                    .find(|&h| open[h] && mapping.lane_of(&records[h].key) == lane)
            })
            .collect();
        let mut waiting: Vec<std::collections::HashSet<&str>> =
            vec![Default::default(); mapping.lanes];
        let mut batches: Vec<Vec<usize>> = vec![Vec::new(); mapping.lanes];
        let mut full = vec![false; mapping.lanes];
        let mut discarded = false;
        for (i, record) in records.iter().enumerate() {
            if !open[i] {
                continue;
            }
            let lane = mapping.lane_of(&record.key);
            if full[lane] {
                continue;
            }
            if let Some(head) = retry_from[lane] {
                if i < head {
                    waiting[lane].insert(&record.key);
                    continue;
                }
                if waiting[lane].contains(record.key.as_str()) {
                    continue;
                }
            }
            if !mapping.passes(record) {
                open[i] = false;
                discarded = true;
                result.lock().unwrap().filtered.insert(record.id.clone());
                continue;
            }
            let batch = &mut batches[lane];
            batch.push(i);
            let cap = caps.get(&batch[0]).copied().unwrap_or(mapping.batch_size);
            full[lane] = batch.len() >= cap.min(mapping.batch_size);
        }
        // A round that neither delivers nor discards anything would repeat
        // for ever.
        assert!(
            discarded || batches.iter().any(|b| !b.is_empty()) || !open.iter().any(|o| *o),
            "seed {seed}: records are open but the mapping formed no batch: open {:?}, retry heads {retry_heads:?}, lanes {}, keys {:?}",
            (0..records.len()).filter(|&i| open[i]).collect::<Vec<_>>(),
            mapping.lanes,
            records.iter().map(|r| (mapping.lane_of(&r.key), r.key.as_str())).collect::<Vec<_>>(),
        );
        let mut round = tokio::task::JoinSet::new();
        let mut echoes = tokio::task::JoinSet::new();
        for batch in batches.into_iter().filter(|b| !b.is_empty()) {
            invocations += 1;
            assert!(invocations < 20_000, "the shard never finished");
            let chosen: Vec<EsmRecord> = batch.iter().map(|&i| records[i].clone()).collect();
            let killed_after = (rng.f64() < config.kill_chance).then(|| rng.usize(0..batch.len()));
            let twinned = rng.f64() < config.duplicate_chance;
            if twinned {
                // The same batch to a second invocation at the same time:
                // its records may run twice; its answer is dropped.
                let mut run = result.lock().unwrap();
                run.duplicates += 1;
                run.in_failed_invocations
                    .extend(chosen.iter().map(|r| r.id.clone()));
                let (environments, function, chosen, result, config) = (
                    environments.clone(),
                    function.to_owned(),
                    chosen.clone(),
                    Arc::clone(result),
                    config.clone(),
                );
                let init_fails = rng.f64() < config.init_failure_chance;
                echoes.spawn(async move {
                    let call = Call {
                        killed_after: None,
                        init_fails,
                        twinned: true,
                    };
                    invoke_once(&environments, &function, &chosen, &config, call, &result).await
                });
            }
            let init_fails = rng.f64() < config.init_failure_chance;
            let (environments, function, result, config) = (
                environments.clone(),
                function.to_owned(),
                Arc::clone(result),
                config.clone(),
            );
            round.spawn(async move {
                let call = Call {
                    killed_after,
                    init_fails,
                    twinned,
                };
                let outcome =
                    invoke_once(&environments, &function, &chosen, &config, call, &result).await;
                (batch, chosen, outcome)
            });
        }
        while echoes.join_next().await.is_some() {}
        while let Some(done) = round.join_next().await {
            retry_heads.retain(|&h| open[h]);
            let (batch, chosen, outcome) = done.expect("invocation");
            let mut run = result.lock().unwrap();
            run.invocations += 1;
            let failed_at = match outcome {
                Outcome::Returned(failures) => {
                    // The lowest reported sequence number, if every one is in the batch.
                    let positions: Option<Vec<usize>> = failures
                        .iter()
                        .map(|id| chosen.iter().position(|r| &r.sequence == id))
                        .collect();
                    match positions {
                        Some(p) => {
                            let lowest = p.into_iter().min().unwrap_or(batch.len());
                            for &i in &batch[..lowest] {
                                open[i] = false;
                                acknowledged[i] = true;
                                run.acknowledged.insert(records[i].id.clone());
                            }
                            if lowest == batch.len() {
                                continue;
                            }
                            run.past_reported_failures
                                .extend(chosen[lowest..].iter().map(|r| r.id.clone()));
                            Some(lowest)
                        }
                        None => None,
                    }
                }
                Outcome::Failed | Outcome::Killed { .. } => {
                    run.in_failed_invocations
                        .extend(chosen.iter().map(|r| r.id.clone()));
                    None
                }
            };
            let start = batch[failed_at.unwrap_or(0)];
            retry_heads.insert(start);
            if failed_at.is_none() && config.bisect && batch.len() > 1 {
                // A split does not count towards the retry quota.
                caps.insert(start, batch.len() / 2);
                continue;
            }
            let tries = retries.entry(start).or_default();
            *tries += 1;
            if *tries > config.max_retries {
                for &i in &batch[failed_at.unwrap_or(0)..] {
                    open[i] = false;
                    run.to_destination.insert(records[i].id.clone());
                }
            }
        }
    }
}

/// How one invocation goes, as the mapping drew it.
struct Call {
    /// Killed before this many handler calls (`None`: not at a record).
    killed_after: Option<usize>,
    /// A cold start for it fails.
    init_fails: bool,
    /// Its batch went to two invocations at once.
    twinned: bool,
}

async fn invoke_once(
    environments: &Environments,
    function: &str,
    batch: &[EsmRecord],
    config: &EsmConfig,
    call: Call,
    result: &Mutex<EsmRun>,
) -> Outcome {
    let serial = environments.started.fetch_add(1, Ordering::SeqCst);
    let Some(invoke) = environments.take(call.init_fails) else {
        result.lock().unwrap().init_failures += 1;
        return Outcome::Failed;
    };
    let event = serde_json::json!({
        "Records": batch.iter().map(|r| r.event_record.clone()).collect::<Vec<_>>()
    });
    let context = function_context(function, config.timeout);
    let invocation = Arc::new(Invocation {
        budget: AtomicI64::new(call.killed_after.map_or(-1, |k| k as i64)),
        killed: tokio::sync::Notify::new(),
        completed: Mutex::new(Vec::new()),
    });
    let running = INVOCATION.scope(invocation.clone(), invoke(event.to_string(), context));
    let outcome = tokio::select! {
        response = running => match response {
            Ok(failures) => Outcome::Returned(failures),
            Err(()) => Outcome::Failed,
        },
        _ = invocation.killed.notified() => Outcome::Killed { timeout: false },
        _ = tokio::time::sleep(config.timeout) => Outcome::Killed { timeout: true },
    };
    let killed = matches!(outcome, Outcome::Killed { .. });
    if !killed {
        // A killed environment is gone; the others take the next invocations.
        environments.give_back(invoke);
    }
    let mut run = result.lock().unwrap();
    match outcome {
        Outcome::Killed { timeout: true } => {
            run.killed += 1;
            run.timeouts += 1;
        }
        Outcome::Killed { timeout: false } => run.killed += 1,
        _ => {}
    }
    let completed = std::mem::take(&mut *invocation.completed.lock().unwrap());
    run.logs.push(InvocationLog {
        serial,
        killed,
        twinned: call.twinned,
        completed,
    });
    outcome
}

/// The context Lambda gives an invocation of `function` with `deadline_in`
/// left: a name, or a name and the alias or version a mapping invokes
/// (`orders:blue`), which Lambda passes in the invoked ARN while the
/// environment's function name stays the name alone.
pub fn function_context(function: &str, deadline_in: Duration) -> Context {
    let mut context = crate::support::common::lambda_context(deadline_in);
    let mut config = (*context.env_config).clone();
    let name = function.split(':').next().unwrap_or(function);
    config.function_name = name.to_owned();
    context.env_config = Arc::new(config);
    context.invoked_function_arn =
        format!("arn:aws:lambda:us-east-1:123456789012:function:{function}");
    // Each invocation of a mapping, a retry too, has a request id of its own.
    context.request_id = format!("{:032x}", fastrand::u128(..));
    context
}

/// What the handler completed: (partition key, record id), in the order of
/// completion.
pub type Completions = Arc<Mutex<Vec<(String, String)>>>;

/// What a run must show beyond the contract every run keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Expect {
    /// Every record the handler fails can be parked (parking on, fewer
    /// attempts than the mapping's retries, the state table answering):
    /// none may reach the on-failure destination.
    pub parks_every_failure: bool,
    /// A killed invocation's completed records run again at most this
    /// many times in all (the work since its last commit: with progress
    /// committed every `n` records, `n`), unless delivered again.
    pub rerun_bound: Option<usize>,
    /// The state table may fail (slow, throttled, past the deadline): a
    /// batch then goes on without de-duplication, and any record may run
    /// twice. The rest of the contract still holds.
    pub at_least_once: bool,
    /// A record done past a reported failure (records of other keys run at
    /// once) may run again when Lambda delivers it again: the retry from
    /// the failure skips it (the progress under that batch's key says so),
    /// but a batch re-formed to start elsewhere does not know of it.
    pub reruns_past_reported_failures: bool,
}

/// Checks a run against the contract: no record skipped (each record Lambda
/// counts as done was completed by the handler or parked), per-key order of
/// first completions kept (of the records never parked), a record completed twice only if a batch
/// holding it failed or was killed or it was delivered again, and what
/// `expect` adds. Returns what is wrong, if anything.
pub fn check(
    records: &[EsmRecord],
    completions: &[(String, String)],
    parked: &BTreeSet<String>,
    run: &EsmRun,
    expect: &Expect,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut times: BTreeMap<&str, usize> = BTreeMap::new();
    let mut firsts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (key, id) in completions {
        let n = times.entry(id).or_default();
        *n += 1;
        if *n == 1 {
            firsts.entry(key).or_default().push(id);
        }
    }
    // Ids that ran twice legitimately: those of records in failed
    // invocations or delivered again.
    let excused = |r: &EsmRecord| {
        run.in_failed_invocations.contains(&r.id)
            || run.redelivered.contains(&r.id)
            || (expect.reruns_past_reported_failures && run.past_reported_failures.contains(&r.id))
    };
    for r in records {
        let units = r.handled();
        let done = units
            .iter()
            .all(|(_, id)| times.contains_key(id) || parked.contains(*id));
        if run.acknowledged.contains(&r.id) && !done {
            problems.push(format!(
                "record {} (shard {}, key {}) was skipped",
                r.id, r.shard, r.key
            ));
        }
        let accounted = run.acknowledged.contains(&r.id)
            || run.filtered.contains(&r.id)
            || run.to_destination.contains(&r.id);
        if !accounted {
            problems.push(format!("record {} was never finished", r.id));
        }
        for (_, id) in &units {
            if !expect.at_least_once && !excused(r) && times.get(id).copied().unwrap_or(0) > 1 {
                problems.push(format!("record {id} ran twice without a failed invocation"));
            }
        }
        if expect.parks_every_failure && run.to_destination.contains(&r.id) {
            problems.push(format!(
                "record {} went to the on-failure destination, though it could be parked",
                r.id
            ));
        }
    }
    let redelivered_units: BTreeSet<&str> = records
        .iter()
        .filter(|r| run.redelivered.contains(&r.id))
        .flat_map(|r| r.handled().into_iter().map(|(_, id)| id))
        .collect();
    if let Some(bound) = expect.rerun_bound {
        for (n, log) in run.logs.iter().enumerate() {
            if !log.killed || log.twinned {
                continue;
            }
            let later: BTreeSet<&str> = run.logs[n + 1..]
                .iter()
                .flat_map(|l| l.completed.iter().map(String::as_str))
                .collect();
            let again: Vec<&str> = log
                .completed
                .iter()
                .map(String::as_str)
                .filter(|id| later.contains(id) && !redelivered_units.contains(id))
                .collect();
            if again.len() > bound {
                problems.push(format!(
                    "invocation {} was killed and {} of its records ran again (at most {bound}): {again:?}",
                    log.serial,
                    again.len()
                ));
            }
        }
    }
    // Per-key order, for the keys whose records all share one outer key
    // (a KPL user key under two outer keys runs in two lanes at a factor
    // above 1: Lambda orders by the outer key only).
    let mut outer_of: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut order: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records {
        for (key, id) in r.handled() {
            outer_of.entry(key).or_default().insert(r.key.as_str());
            let n = order.len();
            order.insert(id, n);
        }
    }
    for (key, ids) in firsts {
        if outer_of.get(key).is_some_and(|o| o.len() > 1) {
            continue;
        }
        // A parked record left its key's order when it was parked; should
        // it run later (delivered again), that run is its replay.
        let ids: Vec<&str> = ids.into_iter().filter(|id| !parked.contains(*id)).collect();
        if ids.windows(2).any(|w| order[w[0]] > order[w[1]]) {
            problems.push(format!("key {key} out of order: {ids:?}"));
        }
    }
    problems
}
