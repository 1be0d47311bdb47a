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
//!   same time, whose answer the mapping does not act on.

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
    /// Seed of every random choice.
    pub seed: u64,
}

impl EsmConfig {
    /// A mapping drawn from `seed`: batch size 1 to 10, parallelization 1
    /// to 10, bisection on or off, 20 retries, kills and re-forms at the
    /// given chances.
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
    /// Invocations that were a second, concurrent delivery of a batch.
    pub duplicates: u64,
}

tokio::task_local! {
    static INVOCATION: Arc<Invocation>;
}

/// The invocation running now, as the handler sees it.
pub struct Invocation {
    /// Handler calls left before Lambda kills the invocation (negative: never).
    budget: AtomicI64,
    killed: tokio::sync::Notify,
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
    /// A function error or a kill.
    Failed,
}

/// Emulates the event source mapping of `function` over `records` (each
/// shard's in order) until every record is done, discarded, sent to the
/// destination, or the run gives up (a bound on invocations, so a bug
/// cannot hang the suite).
pub async fn run(
    invoke: Invoke,
    function: &str,
    records: &[EsmRecord],
    config: &EsmConfig,
) -> EsmRun {
    let mut shards: BTreeMap<&str, Vec<EsmRecord>> = BTreeMap::new();
    for r in records {
        shards.entry(&r.shard).or_default().push(r.clone());
    }
    let result = Arc::new(Mutex::new(EsmRun::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, (_, shard)) in shards.into_iter().enumerate() {
        let (invoke, function, config, result) = (
            invoke.clone(),
            function.to_owned(),
            config.clone(),
            result.clone(),
        );
        let seed = config.seed.wrapping_mul(31).wrapping_add(i as u64);
        tasks.spawn(
            async move { run_shard(invoke, &function, shard, &config, seed, &result).await },
        );
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("shard");
    }
    Arc::into_inner(result).unwrap().into_inner().unwrap()
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
    invoke: Invoke,
    function: &str,
    records: Vec<EsmRecord>,
    config: &EsmConfig,
    seed: u64,
    result: &Mutex<EsmRun>,
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
                result.lock().unwrap().filtered.insert(record.id.clone());
                continue;
            }
            let batch = &mut batches[lane];
            batch.push(i);
            let cap = caps.get(&batch[0]).copied().unwrap_or(mapping.batch_size);
            full[lane] = batch.len() >= cap.min(mapping.batch_size);
        }
        let mut round = tokio::task::JoinSet::new();
        let mut echoes = tokio::task::JoinSet::new();
        for batch in batches.into_iter().filter(|b| !b.is_empty()) {
            invocations += 1;
            assert!(invocations < 20_000, "the shard never finished");
            let chosen: Vec<EsmRecord> = batch.iter().map(|&i| records[i].clone()).collect();
            let killed_after = (rng.f64() < config.kill_chance).then(|| rng.usize(0..batch.len()));
            if rng.f64() < config.duplicate_chance {
                // The same batch to a second invocation at the same time:
                // its records may run twice; its answer is dropped.
                let mut run = result.lock().unwrap();
                run.duplicates += 1;
                run.in_failed_invocations
                    .extend(chosen.iter().map(|r| r.id.clone()));
                let (invoke, function, chosen) =
                    (invoke.clone(), function.to_owned(), chosen.clone());
                echoes.spawn(async move { invoke_once(&invoke, &function, &chosen, None).await });
            }
            let (invoke, function) = (invoke.clone(), function.to_owned());
            round.spawn(async move {
                let outcome = invoke_once(&invoke, &function, &chosen, killed_after).await;
                (batch, chosen, killed_after, outcome)
            });
        }
        while echoes.join_next().await.is_some() {}
        while let Some(done) = round.join_next().await {
            retry_heads.retain(|&h| open[h]);
            let (batch, chosen, killed_after, outcome) = done.expect("invocation");
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
                                run.acknowledged.insert(records[i].id.clone());
                            }
                            if lowest == batch.len() {
                                continue;
                            }
                            Some(lowest)
                        }
                        None => None,
                    }
                }
                Outcome::Failed => {
                    run.killed += u64::from(killed_after.is_some());
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

async fn invoke_once(
    invoke: &Invoke,
    function: &str,
    batch: &[EsmRecord],
    killed_after: Option<usize>,
) -> Outcome {
    let event = serde_json::json!({
        "Records": batch.iter().map(|r| r.event_record.clone()).collect::<Vec<_>>()
    });
    let context = function_context(function, Duration::from_secs(60));
    let invocation = Arc::new(Invocation {
        budget: AtomicI64::new(killed_after.map_or(-1, |k| k as i64)),
        killed: tokio::sync::Notify::new(),
    });
    let call = INVOCATION.scope(invocation.clone(), invoke(event.to_string(), context));
    tokio::select! {
        response = call => match response {
            Ok(failures) => Outcome::Returned(failures),
            Err(()) => Outcome::Failed,
        },
        _ = invocation.killed.notified() => Outcome::Failed,
    }
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

/// Checks a run against the contract: no record skipped (each record Lambda
/// counts as done was completed by the handler or parked), per-key order of
/// first completions kept, and a record completed twice only if a batch
/// holding it failed or was killed. Returns what is wrong, if anything.
pub fn check(
    records: &[EsmRecord],
    completions: &[(String, String)],
    parked: &BTreeSet<String>,
    run: &EsmRun,
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
    for r in records {
        let done = times.contains_key(r.id.as_str()) || parked.contains(&r.id);
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
        if times.get(r.id.as_str()).copied().unwrap_or(0) > 1
            && !run.in_failed_invocations.contains(&r.id)
        {
            problems.push(format!(
                "record {} ran twice without a failed invocation",
                r.id
            ));
        }
    }
    let order: BTreeMap<&str, usize> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id.as_str(), i))
        .collect();
    for (key, ids) in firsts {
        if ids.windows(2).any(|w| order[w[0]] > order[w[1]]) {
            problems.push(format!("key {key} out of order: {ids:?}"));
        }
    }
    problems
}
