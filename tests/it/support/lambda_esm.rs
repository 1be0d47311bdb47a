//! An emulator of Lambda's Kinesis event source mapping: it drives a
//! processor the way Lambda does, from records read out of the Kinesis
//! server, and records what happened for the checker below. It follows the
//! documented contract, not our code:
//!
//! - Batches are contiguous runs of one shard's records, at most
//!   `batch_size` long. With a ParallelizationFactor above 1, "Lambda
//!   processes up to 10 batches in each shard simultaneously" and keeps
//!   order per partition key only ("records with the same partition key are
//!   processed in order", Lambda developer guide, "Polling and batching
//!   streams"): here each partition key hashes to one of `parallelization`
//!   lanes, and the lanes run concurrently.
//! - `ReportBatchItemFailures`: "Lambda retries the batch starting from the
//!   lowest sequence number reported"; "if the function returns an empty
//!   string or null itemIdentifier, or an identifier that is not in the
//!   batch, Lambda treats it as a failure of the entire batch" ("Configuring
//!   partial batch response").
//! - A function error (here also an invocation killed at its timeout, at a
//!   random point of the batch) retries the whole batch; with
//!   `BisectBatchOnFunctionError` the batch is split in two and each half
//!   retried ("splitting a batch does not count towards the retry quota").
//! - After `MaximumRetryAttempts` retries the batch's records go to the
//!   on-failure destination and the shard moves on.

use lambda_runtime::LambdaEvent;
use serde_json::value::RawValue;
use shardkeeper::processing::{BatchProcessor, Kinesis, RecordHandler};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
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
    /// Seed of every random choice.
    pub seed: u64,
}

/// One record as the emulator knows it.
#[derive(Debug, Clone)]
pub struct EsmRecord {
    /// Its sequence number.
    pub sequence: String,
    /// Its partition key.
    pub key: String,
    /// The record as the Kinesis server returned it.
    pub record: aws_sdk_kinesis::types::Record,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct EsmRun {
    /// Invocations made.
    pub invocations: u64,
    /// Invocations killed part-way.
    pub killed: u64,
    /// Records sent to the on-failure destination.
    pub to_destination: BTreeSet<String>,
    /// Records that were in a batch whose invocation was killed or failed
    /// (the only ones the contract lets run twice).
    pub in_failed_invocations: BTreeSet<String>,
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

enum Outcome {
    /// The function returned: the batch item failures.
    Returned(Vec<String>),
    /// A function error or a kill.
    Failed,
}

/// Emulates the event source mapping over `records` (one shard, in order)
/// until every record is done, sent to the destination, or the run gives up
/// (a bound on invocations, so a bug cannot hang the suite).
pub async fn run<H: RecordHandler>(
    processor: &BatchProcessor<H, Kinesis>,
    stream_arn: &str,
    shard: &str,
    records: &[EsmRecord],
    config: &EsmConfig,
) -> EsmRun {
    let count = config.parallelization.max(1);
    let mut lanes: Vec<Vec<EsmRecord>> = vec![Vec::new(); count];
    for r in records {
        lanes[lane_of(&r.key, count)].push(r.clone());
    }
    let result = Arc::new(Mutex::new(EsmRun::default()));
    let mut tasks = Vec::new();
    for (i, lane) in lanes.into_iter().enumerate() {
        let processor = processor.clone();
        let (arn, shard) = (stream_arn.to_owned(), shard.to_owned());
        let config = config.clone();
        let result = result.clone();
        tasks.push(tokio::spawn(async move {
            let seed = config.seed.wrapping_mul(31).wrapping_add(i as u64);
            run_lane(&processor, &arn, &shard, &lane, &config, seed, &result).await;
        }));
    }
    for task in tasks {
        task.await.expect("lane");
    }
    Arc::into_inner(result).unwrap().into_inner().unwrap()
}

fn lane_of(key: &str, lanes: usize) -> usize {
    let hash = key.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    });
    (hash % lanes as u64) as usize
}

async fn run_lane<H: RecordHandler>(
    processor: &BatchProcessor<H, Kinesis>,
    arn: &str,
    shard: &str,
    lane: &[EsmRecord],
    config: &EsmConfig,
    seed: u64,
    result: &Mutex<EsmRun>,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    // Windows still to deliver: (start, end) into `lane`; bisected halves
    // go first.
    let mut windows: VecDeque<(usize, usize)> = VecDeque::new();
    let mut next = 0;
    let mut retries = 0;
    let mut invocations = 0;
    loop {
        let (start, end) = match windows.pop_front() {
            Some(w) => w,
            None if next < lane.len() => {
                let w = (next, (next + config.batch_size).min(lane.len()));
                next = w.1;
                w
            }
            None => return,
        };
        invocations += 1;
        assert!(invocations < 10_000, "the lane never finished");
        let batch = &lane[start..end];
        let outcome = invoke(processor, arn, shard, batch, config, &mut rng, result).await;
        let failed_at = match outcome {
            Outcome::Returned(failures) if failures.is_empty() => {
                retries = 0;
                continue;
            }
            Outcome::Returned(failures) => {
                // The lowest reported sequence number, if every one is in the batch.
                let positions: Option<Vec<usize>> = failures
                    .iter()
                    .map(|id| batch.iter().position(|r| &r.sequence == id))
                    .collect();
                positions.and_then(|p| p.into_iter().min())
            }
            Outcome::Failed => None,
        };
        retries += 1;
        let retry = match failed_at {
            Some(i) => (start + i, end),
            None if config.bisect && end - start > 1 => {
                let mid = start + (end - start) / 2;
                retries -= 1; // a split does not count towards the retry quota
                windows.push_front((mid, end));
                (start, mid)
            }
            None => (start, end),
        };
        if retries > config.max_retries {
            let mut run = result.lock().unwrap();
            for r in &lane[retry.0..retry.1] {
                run.to_destination.insert(r.sequence.clone());
            }
            retries = 0;
            continue;
        }
        windows.push_front(retry);
    }
}

async fn invoke<H: RecordHandler>(
    processor: &BatchProcessor<H, Kinesis>,
    arn: &str,
    shard: &str,
    batch: &[EsmRecord],
    config: &EsmConfig,
    rng: &mut fastrand::Rng,
    result: &Mutex<EsmRun>,
) -> Outcome {
    let records: Vec<_> = batch.iter().map(|r| r.record.clone()).collect();
    let event = crate::support::esm::kinesis_event(arn, shard, &records);
    let payload = RawValue::from_string(event.to_string()).unwrap();
    let context = crate::support::common::lambda_context(Duration::from_secs(60));
    let killed_after = (rng.f64() < config.kill_chance).then(|| rng.usize(0..batch.len()));
    let invocation = Arc::new(Invocation {
        budget: AtomicI64::new(killed_after.map_or(-1, |k| k as i64)),
        killed: tokio::sync::Notify::new(),
    });
    let call = INVOCATION.scope(
        invocation.clone(),
        processor.handle(LambdaEvent::new(payload, context)),
    );
    let outcome = tokio::select! {
        response = call => match response {
            Ok(response) => Outcome::Returned(
                response
                    .batch_item_failures
                    .into_iter()
                    .map(|f| f.item_identifier.unwrap_or_default())
                    .collect(),
            ),
            Err(_) => Outcome::Failed,
        },
        _ = invocation.killed.notified() => Outcome::Failed,
    };
    let mut run = result.lock().unwrap();
    run.invocations += 1;
    if matches!(outcome, Outcome::Failed) {
        run.killed += u64::from(killed_after.is_some());
        run.in_failed_invocations
            .extend(batch.iter().map(|r| r.sequence.clone()));
    }
    outcome
}

/// What the handler completed: (partition key, sequence number), in the
/// order of completion.
pub type Completions = Arc<Mutex<Vec<(String, String)>>>;

/// Checks a run against the contract: no record skipped (each one completed
/// by the handler, parked, or sent to the destination), per-key order of
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
    for (key, seq) in completions {
        let n = times.entry(seq).or_default();
        *n += 1;
        if *n == 1 {
            firsts.entry(key).or_default().push(seq);
        }
    }
    for r in records {
        let done = times.contains_key(r.sequence.as_str())
            || parked.contains(&r.sequence)
            || run.to_destination.contains(&r.sequence);
        if !done {
            problems.push(format!("record {} (key {}) was skipped", r.sequence, r.key));
        }
        if times.get(r.sequence.as_str()).copied().unwrap_or(0) > 1
            && !run.in_failed_invocations.contains(&r.sequence)
        {
            problems.push(format!(
                "record {} ran twice without a failed invocation",
                r.sequence
            ));
        }
    }
    let order: BTreeMap<&str, usize> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.sequence.as_str(), i))
        .collect();
    for (key, seqs) in firsts {
        if seqs.windows(2).any(|w| order[w[0]] > order[w[1]]) {
            problems.push(format!("key {key} out of order: {seqs:?}"));
        }
    }
    problems
}
