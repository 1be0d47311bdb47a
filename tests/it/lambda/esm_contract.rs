//! Event-source-mapped processing driven as Lambda drives it (the emulator
//! in `support::lambda_esm`): random schedules of batch sizes,
//! parallelization factors 1 to 10, bisection, invocations killed part-way,
//! poison records, and mappings re-formed between attempts, for Kinesis and
//! for DynamoDB Streams over several shards, each checked against the
//! contract; and the scope of ESM progress (apart from leases, per
//! consumer, per stream, per DynamoDB Streams shard).

use crate::esm_invoke;
use crate::support::common::{create_stream, create_stream_table, ctx, stream_arn, Ctx};
use crate::support::esm::{
    dynamodb_event_record, kinesis_event_record, read_shard, read_table_stream,
};
use crate::support::lambda_esm::{
    self, function_context, Completions, EsmConfig, EsmRecord, Expect,
};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::primitives::Blob;
use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use serde_json::value::RawValue;
use shardkeeper::lambda::DynamoDbProcessor;
use shardkeeper::processing::{
    changes, json, stage_effect, Change, Parking, ProcessingOptions, RecordContext, RecordHandler,
    StreamRecord,
};
use shardkeeper::state::{
    Checkpoint, ConsumerId, ParkedRecord, ShardId, ShardScope, ShardSpec, StateStore,
};
use shardkeeper::KinesisProcessor;
use shardkeeper_local::{test_endpoints, AwsClients, AwsService, Endpoints, FaultProxy, Faults};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Deserialize)]
pub(crate) struct Message {
    pub(crate) n: u32,
    pub(crate) poison: bool,
}

/// A stream of one shard holding `count` records over `keys` partition
/// keys; every `poison_every`-th record (if any) always fails.
async fn records(
    ctx: &Ctx,
    count: u32,
    keys: u32,
    poison_every: Option<u32>,
) -> (String, String, Vec<EsmRecord>) {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut shard = String::new();
    for n in 0..count {
        let poison = poison_every.is_some_and(|p| n % p == p - 1);
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(format!("k{}", n % keys))
            .data(Blob::new(format!("{{\"n\":{n},\"poison\":{poison}}}")))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    let records = read_shard(ctx, &stream, &shard)
        .await
        .into_iter()
        .map(|r| EsmRecord {
            id: r.sequence_number().to_owned(),
            shard: shard.clone(),
            sequence: r.sequence_number().to_owned(),
            key: r.partition_key().unwrap_or_default().to_owned(),
            event_record: kinesis_event_record(&arn, &shard, &r),
            units: Vec::new(),
        })
        .collect();
    (arn, shard, records)
}

/// A handler that may be killed before each record (as the emulator says:
/// the process dies there), fails poison records (half of them with an
/// error, half with a panic, as an `unwrap` on a payload would), and notes
/// every completion (by sequence number).
fn handler(completions: Completions) -> impl RecordHandler {
    handler_noting(completions, |record| record.sequence_number.to_string())
}

/// The same, noting each completion by `id_of` the record.
fn handler_noting(
    completions: Completions,
    id_of: fn(&StreamRecord) -> String,
) -> impl RecordHandler {
    json(move |message: Message, record: StreamRecord| {
        let completions = completions.clone();
        async move {
            lambda_esm::kill_point().await;
            tokio::task::yield_now().await;
            if message.poison {
                assert!(
                    message.n.is_multiple_of(2),
                    "poison record {} panics",
                    message.n
                );
                return Err(format!("poison record {}", message.n));
            }
            lambda_esm::completed(
                &completions,
                record.partition_key.to_string(),
                id_of(&record),
            );
            Ok(())
        }
    })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The seeds of a property run: a short run for CI by default;
/// `SHARDKEEPER_ESM_SCHEDULES` (and `SHARDKEEPER_ESM_SEED`, the first seed)
/// set a longer one (docs/RELIABILITY.md).
fn seeds() -> std::ops::Range<u64> {
    let first = env_u64("SHARDKEEPER_ESM_SEED", 1);
    first..first + env_u64("SHARDKEEPER_ESM_SCHEDULES", 10)
}

/// The processing options of a property run: parking after two attempts,
/// checkpoints after every few records or by time only, and the first
/// record of each delivery marked or not.
fn property_options(seed: u64) -> ProcessingOptions {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x5eed);
    ProcessingOptions::default()
        .max_attempts(2)
        .parking(Parking::StateTable {
            ttl: Duration::from_secs(3600),
        })
        .checkpoint_records(rng.bool().then(|| rng.u64(1..=4)))
        .mark_first_record(rng.bool())
}

/// A state table that answers slowly: a quarter of the requests wait 50
/// to 600 ms, a few are throttled, and some answers are lost after the write
/// was applied (the SDK sends it again).
fn slow_table() -> Faults {
    Faults {
        throttle: 0.02,
        lose_response: 0.03,
        delay: 0.25,
        latency: Duration::from_millis(50)..=Duration::from_millis(600),
        ..Faults::none()
    }
}

/// One property run: for each seed, a mapping drawn (re-formed between
/// attempts in half of the runs: a batch then may start at the same
/// record as one before it and hold other records) drives the processor
/// that `processor` makes for `function`, and the run is checked against
/// the contract; `parked_id` names a parked record as `records` do.
///
/// Every fifth seed, the state table answers slowly (see [`slow_table`])
/// and the function's timeout is 1 to 3 s, so state calls race the
/// deadline and invocations are killed at their timeout. Every third
/// seed, two mappings of the function through two aliases run at once on
/// one state table.
pub(crate) async fn property_run(
    ctx: &Ctx,
    records: &[EsmRecord],
    function: &str,
    processor: impl Fn(Completions, StateStore, ProcessingOptions) -> lambda_esm::Invoke
        + Send
        + Sync
        + Clone
        + 'static,
    parked_id: impl Fn(ParkedRecord) -> String,
    concurrency: usize,
    effects: Option<Effects<'_>>,
) {
    let endpoints = test_endpoints().unwrap();
    for seed in seeds() {
        if let Some(effects) = effects {
            clear_effects(ctx, effects.table).await;
            if let Some(idempotency) = effects.idempotency {
                clear_table(ctx, idempotency).await;
            }
        }
        // Effects are written once by the deliveries of Lambda's retries
        // that start at a record whose batch's progress is stored: the same
        // batch, its twin, the retry from the lowest failure. The second
        // half of a bisected batch, a batch re-formed, or one delivered
        // again from an older position runs records done under another
        // batch's progress, as position de-duplication does
        // (docs/PROCESSING.md, "Effects").
        let reform = if seed % 2 == 0 && effects.is_none() {
            0.3
        } else {
            0.0
        };
        let mut config = EsmConfig::drawn(seed, 0.3, reform);
        if effects.is_some() {
            config.redeliver_chance = 0.0;
            config.bisect = false;
            // No twins: a twin that parks a record its twin reported failed
            // commits past it under the batch's key, which Lambda's retry
            // from that record does not read (its effects would be written
            // again; docs/PROCESSING.md, "Effects"). Two deliveries of one
            // batch are checked in `state::effects`.
            config.duplicate_chance = 0.0;
        }
        let options = property_options(seed).concurrency(concurrency);
        let slow = seed % 5 == 4;
        let (store, _proxy) = if slow {
            let proxy = FaultProxy::start_seeded(
                AwsService::DynamoDb,
                endpoints.dynamodb.as_deref().unwrap(),
                slow_table(),
                seed,
            )
            .await
            .unwrap();
            let aws = AwsClients::connect(&Endpoints {
                dynamodb: Some(proxy.url().to_owned()),
                ..endpoints.clone()
            })
            .await;
            config.timeout = Duration::from_millis(1000 + seed % 2000);
            let slow_ctx = Ctx {
                aws,
                table: ctx.table.clone(),
                clock: ctx.clock.clone(),
            };
            (slow_ctx.store("esm-schedules"), Some(proxy))
        } else {
            (ctx.store("esm-schedules"), None)
        };
        let expect = Expect {
            parks_every_failure: !slow,
            at_least_once: slow,
            // (An idempotent handler's call whose completion another
            // lane's refused is reported failed, with the records after it,
            // and runs again: its effects were not applied.)
            reruns_past_reported_failures: (concurrency > 1 && reform > 0.0)
                || effects.is_some_and(|e| e.idempotency.is_some()),
            // (With records of several keys at once, what a kill makes run
            // again also holds the records done past the watermark since
            // the last commit: the bound is the contract's "never twice
            // without a failed invocation", checked in every run.)
            rerun_bound: options
                .checkpoint_records
                .filter(|_| !slow && reform == 0.0 && !config.bisect && concurrency == 1)
                .map(|n| n as usize),
        };
        let functions: Vec<String> = if seed % 3 == 0 {
            vec![format!("{function}:blue"), format!("{function}:green")]
        } else {
            vec![function.to_owned()]
        };
        let mut runs: Vec<_> = functions
            .iter()
            .map(|function| {
                let completions: Completions = Arc::default();
                let init: lambda_esm::Init = {
                    let (processor, completions, store, options) = (
                        processor.clone(),
                        completions.clone(),
                        store.clone(),
                        options.clone(),
                    );
                    Arc::new(move || processor(completions.clone(), store.clone(), options.clone()))
                };
                let config = &config;
                async move {
                    let run = lambda_esm::run(init, function, records, config).await;
                    (function, completions, run)
                }
            })
            .collect();
        // One mapping, or two at once.
        let second = (runs.len() == 2).then(|| runs.pop().unwrap());
        let first = runs.pop().unwrap();
        let done = match second {
            Some(second) => {
                let (a, b) = tokio::join!(first, second);
                vec![a, b]
            }
            None => vec![first.await],
        };
        for (function, completions, run) in done {
            eprintln!(
                "seed {seed} {function}: {} invocations, {} killed, {} timeouts, {} init failures, {} redelivered",
                run.invocations, run.killed, run.timeouts, run.init_failures, run.redelivered.len()
            );
            let parked: BTreeSet<String> = store
                .record_state()
                .list_parked()
                .await
                .unwrap()
                .into_iter()
                .filter(|p| p.key.consumer.as_deref() == Some(function.as_str()))
                .map(&parked_id)
                .collect();
            let mut problems = lambda_esm::check(
                records,
                &completions.lock().unwrap(),
                &parked,
                &run,
                &expect,
            );
            if let Some(effects) = effects {
                problems.extend(if effects.idempotency.is_some() {
                    payload_effects_not_once(ctx, effects.table, function, records, &parked, &run)
                        .await
                } else {
                    effects_not_once(ctx, effects.table, function, records, &parked, &run).await
                });
            }
            assert!(
                problems.is_empty(),
                "seed {seed} ({function}{}): {config:?}, {:?} checkpoint records, concurrency {concurrency}, \
                 {} re-forms, {} init failures, {} timeouts, {} re-delivered: {problems:#?}",
                if slow { ", slow table" } else { "" },
                options.checkpoint_records,
                run.reforms,
                run.init_failures,
                run.timeouts,
                run.redelivered.len(),
            );
        }
    }
}

/// The property run over Kinesis: every schedule keeps the contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_skips_a_record_or_breaks_key_order() {
    kinesis_property_run(1).await;
}

/// The same with records of different keys at once (`concurrency(4)`):
/// failures at any record, kills with calls in flight, bisection and
/// parallelization factors above 1 never skip a record, break a key's
/// order, or run a record twice without a failed invocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_at_concurrency_skips_a_record_or_breaks_key_order() {
    kinesis_property_run(4).await;
}

async fn kinesis_property_run(concurrency: usize) {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 48, 6, Some(13)).await;
    let processor = |completions, store, options| {
        let processor = KinesisProcessor::new(handler(completions))
            .with_store(store)
            .with_options(options);
        esm_invoke!(processor)
    };
    let parked_id = |p: ParkedRecord| p.key.sequence.to_string();
    property_run(
        &ctx,
        &records,
        "orders",
        processor,
        parked_id,
        concurrency,
        None,
    )
    .await;
}

/// Effects exactly once: the Kinesis property run with a handler that
/// adds one, as its effect, to a counter of its record (per function), in
/// a table of its own. After kills (also between staging and returning),
/// bisection, parallelization factors up to 10, re-formed batches, two
/// mappings at once, and a state table that loses answers after applying
/// the write, each counter of a record the function did not park is 1, and
/// of one it parked 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_applies_an_effect_twice_or_loses_one() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 48, 6, Some(13)).await;
    let table = create_effects_table(&ctx).await;
    let processor = {
        let table = table.clone();
        move |completions, store, options| {
            let handler = effect_handler(completions, table.clone(), |r: &StreamRecord| {
                r.sequence_number.to_string()
            });
            let processor = KinesisProcessor::new(handler)
                .with_store(store)
                .with_options(options);
            esm_invoke!(processor)
        }
    };
    let parked_id = |p: ParkedRecord| p.key.sequence.to_string();
    let effects = Effects {
        table: &table,
        idempotency: None,
    };
    property_run(
        &ctx,
        &records,
        "orders",
        processor,
        parked_id,
        1,
        Some(effects),
    )
    .await;
}

/// The effects table of a property run, and the idempotency table when
/// its handler is idempotent by content (its effects are counted by
/// payload, not by record).
#[derive(Clone, Copy)]
pub(crate) struct Effects<'a> {
    pub(crate) table: &'a str,
    pub(crate) idempotency: Option<&'a str>,
}

/// Whether the DynamoDB server isolates transactions as DynamoDB documents
/// ("TransactWriteItems ... isolated from other transactions", DynamoDB
/// developer guide, "Isolation levels": serializable): of eight at once,
/// each creating one new item on condition that it does not exist, exactly
/// one applies. moto's server does not isolate them (two transactions on
/// one item, each on condition that the other had not written, both apply
/// at times, too rarely for this probe to see): runs on it set
/// `SHARDKEEPER_TEST_DYNAMODB_ISOLATION=0` (README), and what needs the
/// isolation (the worker's effects through lease moves) is left out.
pub(crate) async fn transactions_are_isolated(ctx: &Ctx, table: &str) -> bool {
    let said = std::env::var("SHARDKEEPER_TEST_DYNAMODB_ISOLATION").unwrap_or_default();
    if said == "0" || said.eq_ignore_ascii_case("false") {
        eprintln!(
            "SHARDKEEPER_TEST_DYNAMODB_ISOLATION=0: what needs isolated transactions is left out of this run"
        );
        return false;
    }
    let create = |key: String| {
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(table)
            .item("pk", AttributeValue::S(key))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .unwrap();
        ctx.aws
            .dynamodb
            .transact_write_items()
            .transact_items(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .put(put)
                    .build(),
            )
            .send()
    };
    for round in 0..32 {
        let key = format!("isolation-probe-{round}");
        let applied = futures_util::future::join_all((0..8).map(|_| create(key.clone())))
            .await
            .into_iter()
            .filter(Result::is_ok)
            .count();
        delete_counter(ctx, table, key).await;
        if applied > 1 {
            eprintln!(
                "the DynamoDB server applied two conflicting transactions at once: \
                 what needs their isolation is left out of this run"
            );
            return false;
        }
    }
    true
}

/// A table for effects: a counter per record (of each function).
pub(crate) async fn create_effects_table(ctx: &Ctx) -> String {
    let name = shardkeeper_local::unique_name("effects");
    shardkeeper_local::create_keyed_table(&ctx.aws.dynamodb, &name, "pk", false)
        .await
        .unwrap();
    name
}

/// The handler of [`handler`], staging as its effect an `ADD` of one to the
/// counter `<function>#<id of the record>` in `table` before it returns
/// (and a kill may come after the staging).
fn effect_handler(
    completions: Completions,
    table: String,
    id_of: fn(&StreamRecord) -> String,
) -> impl RecordHandler {
    json(move |message: Message, record: StreamRecord| {
        let (completions, table) = (completions.clone(), table.clone());
        async move {
            lambda_esm::kill_point().await;
            tokio::task::yield_now().await;
            if message.poison {
                return Err(format!("poison record {}", message.n));
            }
            let function = function_of_call();
            let update = aws_sdk_dynamodb::types::Update::builder()
                .table_name(&table)
                .key(
                    "pk",
                    AttributeValue::S(format!("{function}#{}", id_of(&record))),
                )
                .update_expression("ADD #count :one")
                .expression_attribute_names("#count", "count")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .build()
                .unwrap();
            stage_effect(
                aws_sdk_dynamodb::types::TransactWriteItem::builder()
                    .update(update)
                    .build(),
            )
            .map_err(|e| e.to_string())?;
            lambda_esm::kill_point().await;
            lambda_esm::completed(
                &completions,
                record.partition_key.to_string(),
                id_of(&record),
            );
            Ok(())
        }
    })
}

/// The function (with its alias) the handler's invocation is of.
pub(crate) fn function_of_call() -> String {
    let context = RecordContext::current().expect("in an invocation");
    let arn = &*context.function_arn;
    arn.rsplit_once(":function:")
        .map_or(arn, |(_, f)| f)
        .to_owned()
}

/// Every counter of `table`, by `<function>#<record id>`.
async fn effect_counts(ctx: &Ctx, table: &str) -> std::collections::BTreeMap<String, u64> {
    effect_counts_in(&ctx.aws.dynamodb, table).await
}

/// Every counter of an effects table, by its key.
pub(crate) async fn effect_counts_in(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    let mut pages = dynamodb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.unwrap();
        let key = item["pk"].as_s().unwrap().clone();
        let count = item["count"].as_n().unwrap().parse().unwrap();
        counts.insert(key, count);
    }
    counts
}

/// Deletes every counter of `table` (before a seed's run).
async fn clear_effects(ctx: &Ctx, table: &str) {
    for key in effect_counts(ctx, table).await.into_keys() {
        delete_counter(ctx, table, key).await;
    }
}

/// Deletes every item of `table`, keyed by `pk` alone.
async fn clear_table(ctx: &Ctx, table: &str) {
    let mut pages = ctx
        .aws
        .dynamodb
        .scan()
        .table_name(table)
        .consistent_read(true)
        .into_paginator()
        .items()
        .send();
    let mut keys = Vec::new();
    while let Some(item) = pages.next().await {
        keys.push(item.unwrap()["pk"].as_s().unwrap().clone());
    }
    for key in keys {
        delete_counter(ctx, table, key).await;
    }
}

/// Deletes the counter `key` of `table`.
async fn delete_counter(ctx: &Ctx, table: &str, key: String) {
    ctx.aws
        .dynamodb
        .delete_item()
        .table_name(table)
        .key("pk", AttributeValue::S(key))
        .send()
        .await
        .unwrap();
}

/// The records of `function` whose counter in `table` is not what the run
/// makes it: 1 for a record Lambda counted done that was not parked, 0 for
/// one the mapping's filter dropped, at most 1 for one sent to the
/// on-failure destination (its effect may have been written before its
/// batch failed for good) or parked (a twin delivery may have completed it
/// while this one counted a death in it up to the limit: parking is not
/// fenced by the progress). An effect applied twice, or lost.
async fn effects_not_once(
    ctx: &Ctx,
    table: &str,
    function: &str,
    records: &[EsmRecord],
    parked: &BTreeSet<String>,
    run: &lambda_esm::EsmRun,
) -> Vec<String> {
    let counts = effect_counts(ctx, table).await;
    records
        .iter()
        .filter_map(|r| {
            let got = counts
                .get(&format!("{function}#{}", r.id))
                .copied()
                .unwrap_or(0);
            let right = if run.filtered.contains(&r.id) {
                got == 0
            } else if parked.contains(&r.id) || run.to_destination.contains(&r.id) {
                got <= 1
            } else {
                got == 1
            };
            let was = if parked.contains(&r.id) {
                ", parked"
            } else if run.filtered.contains(&r.id) {
                ", filtered"
            } else if run.to_destination.contains(&r.id) {
                ", sent to the destination"
            } else {
                ""
            };
            (!right).then(|| format!("record {}{was}: effect applied {got} times", r.id))
        })
        .collect()
}

/// The payloads of `function` whose counter in `table` (by payload,
/// `<function>#p<n>`) is not what the run makes it: 1 when a record of the
/// payload was counted done and not parked (its producer duplicates are
/// repeats), at most 1 when every record of it was parked or sent to the
/// destination, 0 when every one was filtered.
async fn payload_effects_not_once(
    ctx: &Ctx,
    table: &str,
    function: &str,
    records: &[EsmRecord],
    parked: &BTreeSet<String>,
    run: &lambda_esm::EsmRun,
) -> Vec<String> {
    let counts = effect_counts(ctx, table).await;
    let mut by_payload: std::collections::BTreeMap<u32, Vec<&EsmRecord>> = Default::default();
    for r in records {
        by_payload.entry(payload_n(r)).or_default().push(r);
    }
    by_payload
        .into_iter()
        .filter_map(|(n, copies)| {
            let got = counts
                .get(&format!("{function}#p{n}"))
                .copied()
                .unwrap_or(0);
            let done = copies.iter().any(|r| {
                !run.filtered.contains(&r.id)
                    && !parked.contains(&r.id)
                    && !run.to_destination.contains(&r.id)
            });
            let right = if done {
                got == 1
            } else if copies.iter().all(|r| run.filtered.contains(&r.id)) {
                got == 0
            } else {
                got <= 1
            };
            (!right).then(|| {
                format!(
                    "payload {n} ({} copies): effect applied {got} times",
                    copies.len()
                )
            })
        })
        .collect()
}

/// The `n` of a record's payload.
fn payload_n(record: &EsmRecord) -> u32 {
    let data = record.event_record["kinesis"]["data"].as_str().unwrap();
    let bytes = base64_simd::STANDARD.decode_to_vec(data).unwrap();
    serde_json::from_slice::<Message>(&bytes).unwrap().n
}

#[derive(Debug, Deserialize)]
struct Item {
    id: String,
    n: u32,
    poison: bool,
}

/// The event id of a DynamoDB Streams record as the handler receives it.
fn event_id(record: &StreamRecord) -> String {
    let value: serde_json::Value = serde_json::from_slice(&record.data).unwrap();
    value["eventID"].as_str().unwrap().to_owned()
}

/// A table whose stream holds `count` changes of `keys` items (every
/// `poison_every`-th one poison), spread over `shards` shards whose
/// sequence numbers overlap. A table has many stream shards, and AWS
/// orders sequence numbers only within one ("sequence numbers ... are
/// unique within a shard", DynamoDB developer guide, "DynamoDB Streams");
/// the embedded server's stream has one shard, so the records it returned
/// are dealt to `shards` shards by item (each item's changes stay in one
/// shard, in order) and renumbered per shard from the same first number.
async fn table_records(
    ctx: &Ctx,
    count: u32,
    keys: u32,
    shards: u32,
    poison_every: u32,
) -> Vec<EsmRecord> {
    let (table, arn) = create_stream_table(&ctx.aws).await;
    for n in 0..count {
        ctx.aws
            .dynamodb
            .put_item()
            .table_name(&table)
            .item("id", AttributeValue::S(format!("k{}", n % keys)))
            .item("n", AttributeValue::N(n.to_string()))
            .item(
                "poison",
                AttributeValue::Bool(n % poison_every == poison_every - 1),
            )
            .send()
            .await
            .unwrap();
    }
    let mut next = vec![0u64; shards as usize];
    read_table_stream(ctx, &arn)
        .await
        .iter()
        .map(|r| {
            let mut event_record = dynamodb_event_record(&arn, r);
            let key = event_record["dynamodb"]["Keys"]["id"]["S"]
                .as_str()
                .unwrap()
                .to_owned();
            let shard = key[1..].parse::<usize>().unwrap() % shards as usize;
            next[shard] += 1;
            let sequence = format!("{}", 100_000_000_000_000_000_000u128 + next[shard] as u128);
            event_record["dynamodb"]["SequenceNumber"] = sequence.clone().into();
            EsmRecord {
                id: r.event_id().unwrap().to_owned(),
                shard: format!("shard-{shard}"),
                sequence,
                key,
                event_record,
                units: Vec::new(),
            }
        })
        .collect()
}

/// A typed changes handler that may be killed before each record, fails
/// poison changes, and notes every completion by event id.
fn change_handler(completions: Completions) -> impl RecordHandler {
    changes(move |change: Change<Item>, record: StreamRecord| {
        let completions = completions.clone();
        async move {
            lambda_esm::kill_point().await;
            tokio::task::yield_now().await;
            let item = match change {
                Change::Insert { new } | Change::Modify { new, .. } => new,
                Change::Remove { .. } => return Err("no removes here".to_owned()),
            };
            if item.poison {
                assert!(item.n.is_multiple_of(2), "poison change {} panics", item.n);
                return Err(format!("poison change {} of {}", item.n, item.id));
            }
            lambda_esm::completed(&completions, item.id.clone(), event_id(&record));
            Ok(())
        }
    })
}

/// The property run over DynamoDB Streams: three shards whose batches
/// start at the same sequence numbers, every schedule keeping the contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_skips_a_dynamodb_change_on_any_shard() {
    dynamodb_property_run(1).await;
}

/// The same with the changes of different items at once (`concurrency(4)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_at_concurrency_skips_a_dynamodb_change() {
    dynamodb_property_run(4).await;
}

async fn dynamodb_property_run(concurrency: usize) {
    let ctx = ctx().await;
    let records = table_records(&ctx, 45, 6, 3, 11).await;
    let processor = |completions, store, options| {
        let processor = DynamoDbProcessor::new(change_handler(completions))
            .with_store(store)
            .with_options(options);
        esm_invoke!(processor)
    };
    let parked_id = |p: ParkedRecord| p.key.event_id.expect("parked by event id");
    property_run(
        &ctx,
        &records,
        "projector",
        processor,
        parked_id,
        concurrency,
        None,
    )
    .await;
}

/// A stream of one shard holding `count` KPL aggregates of one to three
/// user records each (every `poison_every`-th user record poison). An
/// aggregate's outer key is `o0` or `o1`; its user records' keys are `u0`
/// (under `o0` only), `u1` and `u2` (under `o1` only) and `mixed` (under
/// both), as a KPL producer aggregates the records of many keys bound for
/// one shard under one of them.
async fn aggregates(ctx: &Ctx, count: u32, poison_every: u32) -> Vec<EsmRecord> {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut rng = fastrand::Rng::with_seed(11);
    let mut n = 0;
    let mut shard = String::new();
    for _ in 0..count {
        let outer = if rng.bool() { "o0" } else { "o1" };
        let keys: &[&str] = if outer == "o0" {
            &["u0", "mixed"]
        } else {
            &["u1", "u2", "mixed"]
        };
        let users: Vec<(String, Vec<u8>)> = (0..rng.usize(1..=3))
            .map(|_| {
                n += 1;
                let poison = n % poison_every == 0;
                let key = keys[rng.usize(..keys.len())].to_owned();
                (
                    key,
                    format!("{{\"n\":{n},\"poison\":{poison}}}").into_bytes(),
                )
            })
            .collect();
        let parts: Vec<(&str, Option<&str>, &[u8])> = users
            .iter()
            .map(|(k, d)| (k.as_str(), None, d.as_slice()))
            .collect();
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(outer)
            .data(Blob::new(shardkeeper::kpl::aggregate(&parts)))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    read_shard(ctx, &stream, &shard)
        .await
        .into_iter()
        .map(|r| {
            let sequence = r.sequence_number().to_owned();
            let users = shardkeeper::kpl::deaggregate(r.data().as_ref())
                .unwrap()
                .expect("an aggregate");
            EsmRecord {
                id: sequence.clone(),
                shard: shard.clone(),
                sequence: sequence.clone(),
                key: r.partition_key().unwrap_or_default().to_owned(),
                event_record: kinesis_event_record(&arn, &shard, &r),
                units: users
                    .iter()
                    .enumerate()
                    .map(|(i, u)| (u.partition_key.to_owned(), format!("{sequence}/{i}")))
                    .collect(),
            }
        })
        .collect()
}

/// The property run over KPL aggregates: Lambda lanes an aggregate by its
/// outer key, and shardkeeper runs its user records in order, each
/// counted, parked and skipped on its own. Every schedule keeps the
/// contract for every user record; per-key order is checked for the user
/// keys that stay under one outer key (`mixed` may run in two lanes at
/// once: README, "Limits and guarantees").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_skips_a_user_record_of_a_kpl_aggregate() {
    kpl_property_run(1).await;
}

/// The same with user records of different user keys at once
/// (`concurrency(4)`): an aggregate's user records run by their own keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_at_concurrency_skips_a_user_record_of_a_kpl_aggregate() {
    kpl_property_run(4).await;
}

async fn kpl_property_run(concurrency: usize) {
    let ctx = ctx().await;
    let records = aggregates(&ctx, 24, 9).await;
    let processor = |completions, store, options| {
        let handler = handler_noting(completions, |r| {
            format!("{}/{}", r.sequence_number, r.sub_sequence)
        });
        let processor = KinesisProcessor::new(handler)
            .with_store(store)
            .with_options(options);
        esm_invoke!(processor)
    };
    let parked_id = |p: ParkedRecord| format!("{}/{}", p.key.sequence, p.key.sub_sequence);
    property_run(
        &ctx,
        &records,
        "orders-kpl",
        processor,
        parked_id,
        concurrency,
        None,
    )
    .await;
}

/// With a parallelization factor above 1, a batch of one lane completes
/// while an earlier record of another lane is still failing: the failing
/// record is retried and completed, never skipped. (A per-shard checkpoint
/// skips it: the later batch's progress covers its sequence number.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_lane_is_never_skipped_at_parallelization_above_one() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 12, 4, None).await;
    let completions: Completions = Arc::default();
    let fail_once: Arc<Mutex<BTreeSet<String>>> =
        Arc::new(Mutex::new([records[0].sequence.clone()].into()));
    let handler = {
        let completions = completions.clone();
        json(move |_: Message, record: StreamRecord| {
            let (completions, fail_once) = (completions.clone(), fail_once.clone());
            async move {
                if fail_once.lock().unwrap().remove(&*record.sequence_number) {
                    return Err("not yet".to_owned());
                }
                completions.lock().unwrap().push((
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                ));
                Ok(())
            }
        })
    };
    let store = ctx.store("esm-lanes");
    let processor = KinesisProcessor::new(handler).with_store(store);
    let config = EsmConfig {
        batch_size: 3,
        parallelization: 4,
        bisect: false,
        max_retries: 5,
        kill_chance: 0.0,
        reform_chance: 0.0,
        duplicate_chance: 0.0,
        init_failure_chance: 0.0,
        redeliver_chance: 0.0,
        timeout: Duration::from_secs(60),
        seed: 7,
    };
    let run = lambda_esm::run(
        lambda_esm::warm(esm_invoke!(processor)),
        "orders",
        &records,
        &config,
    )
    .await;
    let problems = lambda_esm::check(
        &records,
        &completions.lock().unwrap(),
        &BTreeSet::new(),
        &run,
        &Expect::default(),
    );
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        completions
            .lock()
            .unwrap()
            .iter()
            .any(|(_, seq)| *seq == records[0].sequence),
        "the record that failed first is completed"
    );
}

/// Invokes `processor` as Lambda invokes `function` with `records`, and
/// returns the batch item failures.
async fn invoke_as<H: RecordHandler>(
    processor: &KinesisProcessor<H>,
    function: &str,
    records: &[EsmRecord],
) -> Vec<String> {
    let event = serde_json::json!({
        "Records": records.iter().map(|r| r.event_record.clone()).collect::<Vec<_>>()
    });
    let payload = RawValue::from_string(event.to_string()).unwrap();
    let context = function_context(function, Duration::from_secs(60));
    match processor.handle(LambdaEvent::new(payload, context)).await {
        Ok(response) => response
            .batch_item_failures
            .into_iter()
            .map(|f| f.item_identifier.unwrap_or_default())
            .collect(),
        // The first record failed: a function error, the batch retried
        // from it.
        Err(shardkeeper::Error::BatchFailed {
            item_identifier, ..
        }) => vec![item_identifier],
        Err(e) => panic!("{e}"),
    }
}

/// Two functions, each with its own event source mapping on one stream,
/// given the same group ("process the same data with multiple Lambda
/// functions", Lambda developer guide): each runs every record, and one's
/// failures never count towards the other's parking.
#[tokio::test]
async fn two_functions_on_one_stream_each_run_every_record() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 20, 4, None).await;
    let store = ctx.store("esm-two-functions");
    let options = ProcessingOptions::default()
        .max_attempts(2)
        .parking(Parking::StateTable {
            ttl: Duration::from_secs(3600),
        });
    let archive: Completions = Arc::default();
    let archiver = KinesisProcessor::new(handler(archive.clone()))
        .with_store(store.clone())
        .with_options(options.clone());
    assert!(invoke_as(&archiver, "archiver", &records).await.is_empty());
    assert_eq!(archive.lock().unwrap().len(), 20);

    // The second function fails the first record once, then runs the batch.
    let notify: Completions = Arc::default();
    let failed_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let notifier = {
        let (notify, failed_once) = (notify.clone(), failed_once.clone());
        KinesisProcessor::new(json(move |_: Message, record: StreamRecord| {
            let (notify, failed_once) = (notify.clone(), failed_once.clone());
            async move {
                if !failed_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    return Err("the mail server is down".to_owned());
                }
                notify.lock().unwrap().push((
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                ));
                Ok(())
            }
        }))
        .with_store(store.clone())
        .with_options(options)
    };
    let failures = invoke_as(&notifier, "notifier", &records).await;
    assert_eq!(failures, vec![records[0].sequence.clone()]);
    assert!(invoke_as(&notifier, "notifier", &records).await.is_empty());
    assert_eq!(notify.lock().unwrap().len(), 20, "every record, not 0");
    assert!(store.record_state().list_parked().await.unwrap().is_empty());

    // A retry of each function's batch is still de-duplicated for it.
    assert!(invoke_as(&archiver, "archiver", &records).await.is_empty());
    assert_eq!(archive.lock().unwrap().len(), 20);
}

/// Two mappings of one function through two aliases (`orders:blue` and
/// `orders:green`, a blue/green deployment on one stream) keep apart: each
/// runs every record (before, keyed by the function's name alone, green's
/// batch matched blue's stored progress and skipped every record). An
/// unqualified invocation and one of `$LATEST` are the same function.
#[tokio::test]
async fn two_aliases_of_one_function_keep_their_progress_apart() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-aliases");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone())).with_store(store.clone());
    assert!(invoke_as(&processor, "orders:blue", &records)
        .await
        .is_empty());
    assert!(invoke_as(&processor, "orders:green", &records)
        .await
        .is_empty());
    assert_eq!(
        completions.lock().unwrap().len(),
        12,
        "each alias runs every record"
    );
    assert!(invoke_as(&processor, "orders:blue", &records)
        .await
        .is_empty());
    assert_eq!(
        completions.lock().unwrap().len(),
        12,
        "a retry is de-duplicated"
    );
    assert!(invoke_as(&processor, "orders", &records).await.is_empty());
    assert!(invoke_as(&processor, "orders:$LATEST", &records)
        .await
        .is_empty());
    assert_eq!(completions.lock().unwrap().len(), 18);
}

/// The consumer is configurable: two mappings of one function on one
/// stream, given two names, keep apart; the same name shares progress.
#[tokio::test]
async fn a_configured_consumer_keeps_two_mappings_of_one_function_apart() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-configured");
    let completions: Completions = Arc::default();
    let named = |name: &str| {
        KinesisProcessor::new(handler(completions.clone()))
            .with_store(store.clone())
            .with_options(ProcessingOptions::default().consumer(Some(name.to_owned())))
    };
    let (live, replay) = (named("live"), named("replay"));
    invoke_as(&live, "orders", &records).await;
    invoke_as(&replay, "orders", &records).await;
    assert_eq!(completions.lock().unwrap().len(), 12);
    invoke_as(&named("live"), "another-function", &records).await;
    assert_eq!(completions.lock().unwrap().len(), 12);
    // A name that cannot key the table is refused, loudly.
    let bad = named("live#2");
    let event = serde_json::json!({ "Records": [records[0].event_record.clone()] });
    let error = bad.process(&event.to_string(), None).await.unwrap_err();
    assert!(error.to_string().contains("consumer"), "{error}");
}

/// A batch re-formed from the same first record with other records (the
/// parallelization factor lowered from 2 to 1 while a lane was being
/// retried) skips only what a batch holding it completed: the records of
/// the other lane between them run.
#[tokio::test]
async fn a_re_formed_batch_skips_only_records_a_batch_holding_them_did() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-re-formed");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone()))
        .with_store(store)
        .with_options(ProcessingOptions::default().checkpoint_records(Some(1)));
    // Lane of key k0: records 0, 2, 4; its invocation completed them and
    // was killed before it returned (so Lambda sends them again).
    let lane: Vec<EsmRecord> = records.iter().step_by(2).cloned().collect();
    invoke_as(&processor, "orders", &lane).await;
    assert_eq!(completions.lock().unwrap().len(), 3);
    // Lambda's own retry of the same batch is de-duplicated.
    assert!(invoke_as(&processor, "orders", &lane).await.is_empty());
    assert_eq!(completions.lock().unwrap().len(), 3);
    // The mapping now has one lane: the batch starts at record 0 again,
    // with the other lane's records between; none of them is skipped.
    assert!(invoke_as(&processor, "orders", &records).await.is_empty());
    let ran: BTreeSet<String> = completions
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    for r in &records {
        assert!(
            ran.contains(&r.sequence),
            "record {} was skipped",
            r.sequence
        );
    }
    // What runs again is what the old batch held past the prefix the two
    // share (record 0): records 2 and 4.
    let times = |seq: &str| {
        let completions = completions.lock().unwrap();
        completions.iter().filter(|(_, s)| s == seq).count()
    };
    let counts: Vec<usize> = records.iter().map(|r| times(&r.sequence)).collect();
    assert_eq!(counts, vec![1, 1, 2, 1, 2, 1]);
}

/// The event of `records` as one batch.
fn kinesis_lane_event(records: &[EsmRecord]) -> String {
    serde_json::json!({
        "Records": records.iter().map(|r| r.event_record.clone()).collect::<Vec<_>>()
    })
    .to_string()
}

/// Two DynamoDB Streams shards whose batches start at the same sequence
/// number hold other records: the second batch runs whole.
#[tokio::test]
async fn dynamodb_batches_of_two_shards_from_one_sequence_number_are_other_records() {
    let ctx = ctx().await;
    let records = table_records(&ctx, 8, 2, 2, 1_000).await;
    let (a, b): (Vec<_>, Vec<_>) = records.into_iter().partition(|r| r.shard == "shard-0");
    assert_eq!(a[0].sequence, b[0].sequence, "the shards' numbers overlap");
    let completions: Completions = Arc::default();
    let processor = DynamoDbProcessor::new(change_handler(completions.clone()))
        .with_store(ctx.store("esm-table-shards"));
    for shard in [&a, &b] {
        let report = processor
            .process(&kinesis_lane_event(shard), None)
            .await
            .unwrap();
        assert_eq!(
            (report.processed, report.duplicates_skipped),
            (shard.len() as u64, 0)
        );
    }
    assert_eq!(completions.lock().unwrap().len(), 8);
    // Each shard's own retry is de-duplicated.
    let report = processor
        .process(&kinesis_lane_event(&b), None)
        .await
        .unwrap();
    assert_eq!((report.processed, report.duplicates_skipped), (0, 4));
}

/// An event without a stream ARN cannot be told from another stream's:
/// the batch runs without de-duplication (said in its report), and a retry
/// runs it again rather than skipping it.
#[tokio::test]
async fn an_event_without_a_stream_arn_runs_without_de_duplication() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 3, 1, None).await;
    let mut event: serde_json::Value = serde_json::from_str(&kinesis_lane_event(&records)).unwrap();
    for r in event["Records"].as_array_mut().unwrap() {
        r.as_object_mut().unwrap().remove("eventSourceARN");
    }
    let completions: Completions = Arc::default();
    let processor =
        KinesisProcessor::new(handler(completions.clone())).with_store(ctx.store("esm-no-arn"));
    for _ in 0..2 {
        let report = processor.process(&event.to_string(), None).await.unwrap();
        assert_eq!(report.processed, 3);
        assert!(report.deduplication_off);
    }
    assert_eq!(completions.lock().unwrap().len(), 6);
}

/// ESM checkpoints live in their own sort-key family: a shard worker's lease
/// and checkpoint on the same group and stream neither hide records from
/// the processor nor are touched by it, and the shard stays leasable.
#[tokio::test]
async fn esm_checkpoints_never_read_or_write_a_lease() {
    let ctx = ctx().await;
    let (_, shard, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-and-leases");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone())).with_store(store.clone());
    processor
        .process(&kinesis_lane_event(&records[..2]), None)
        .await
        .unwrap();

    // A consumer of the same group leases the shard and checkpoints far ahead.
    let id = ShardId::new(&shard).unwrap();
    store
        .shards()
        .ensure(&ShardScope::Group, &ShardSpec::new(&shard).unwrap())
        .await
        .unwrap();
    let me = ConsumerId::new("worker").unwrap();
    let lease = store
        .leases()
        .acquire(&id, &me, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the shard is leasable");
    store
        .checkpoints()
        .save(
            &lease,
            &Checkpoint::after(&records[5].sequence).unwrap(),
            None,
        )
        .await
        .unwrap();

    // The mapping's next batch is handled whole.
    let report = processor
        .process(&kinesis_lane_event(&records[2..]), None)
        .await
        .unwrap();
    assert_eq!((report.processed, report.duplicates_skipped), (4, 0));
    let state = store.shards().get(&ShardScope::Group, &id).await.unwrap();
    assert_eq!(state.owner, Some(me));
    assert_eq!(state.checkpoint.unwrap().to_string(), records[5].sequence);
    assert_eq!(completions.lock().unwrap().len(), 6);
}

/// One function mapped to two streams: the same shard id and sequence
/// numbers under another stream ARN are other records.
#[tokio::test]
async fn two_streams_never_share_checkpoints() {
    let ctx = ctx().await;
    let (arn, _, records) = records(&ctx, 4, 2, None).await;
    let store = ctx.store("esm-two-streams");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone())).with_store(store);
    let raw: Vec<_> = records.iter().map(|r| r.event_record.clone()).collect();
    let other = format!("{arn}-other");
    for stream in [&arn, &other] {
        let event: Vec<_> = raw
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r["eventSourceARN"] = stream.clone().into();
                r
            })
            .collect();
        let report = processor
            .process(&serde_json::json!({ "Records": event }).to_string(), None)
            .await
            .unwrap();
        assert_eq!(
            (report.processed, report.duplicates_skipped),
            (4, 0),
            "{stream}"
        );
    }
    // A retry of the first stream's batch is still de-duplicated.
    let report = processor
        .process(&kinesis_lane_event(&records), None)
        .await
        .unwrap();
    assert_eq!((report.processed, report.duplicates_skipped), (0, 4));
}

/// A handler that notes every completion and dies (never returns, as a
/// timeout kills an invocation) as it starts its `dies_at`-th call
/// (0-based), after notifying `killed`.
fn dying(
    completions: Completions,
    dies_at: u32,
    killed: Arc<tokio::sync::Notify>,
) -> impl RecordHandler {
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    json(move |_: Message, record: StreamRecord| {
        let (completions, calls, killed) = (completions.clone(), calls.clone(), killed.clone());
        async move {
            if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == dies_at {
                killed.notify_one();
                std::future::pending::<()>().await;
            }
            completions.lock().unwrap().push((
                record.partition_key.to_string(),
                record.sequence_number.to_string(),
            ));
            Ok::<(), std::io::Error>(())
        }
    })
}

/// Progress is committed during the batch: an invocation killed part-way
/// (Lambda's timeout) leaves what it completed checkpointed, and the retry
/// of the same batch repeats at most the work since the last checkpoint
/// (here, with a checkpoint after every record, nothing).
#[tokio::test]
async fn a_killed_invocation_keeps_what_it_checkpointed() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 8, 2, None).await;
    let event = kinesis_lane_event(&records);
    let completions: Completions = Arc::default();
    let killed = Arc::new(tokio::sync::Notify::new());
    // The first invocation dies as it starts its sixth record.
    let handler = dying(completions.clone(), 5, killed.clone());
    let options = ProcessingOptions::default().checkpoint_records(Some(1));
    let processor = KinesisProcessor::new(handler)
        .with_store(ctx.store("esm-killed"))
        .with_options(options);
    tokio::select! {
        _ = processor.process(&event, None) => panic!("the invocation was to be killed"),
        _ = killed.notified() => {}
    }
    // Lambda retries the whole batch.
    let report = processor.process(&event, None).await.unwrap();
    assert_eq!((report.duplicates_skipped, report.processed), (5, 3));
    let seen: Vec<String> = completions
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    let all: Vec<String> = records.iter().map(|r| r.sequence.clone()).collect();
    assert_eq!(seen, all, "each record once, in order");
}

/// A state table that cannot be read or written (an outage: every request
/// answered with an internal error) degrades the batch to at-least-once
/// instead of failing it: each record runs, only the handler's own failure
/// is reported (not parked: its attempts cannot be counted), and the
/// report and metrics say so. Failing the batch would count against the
/// mapping's MaximumRetryAttempts and send it to the on-failure
/// destination, which keeps only metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_table_outage_degrades_to_at_least_once_and_fails_nothing_else() {
    let f = crate::support::faulty::Faulty::start(fastrand::u64(..)).await;
    let (_, _, records) = records(&f.ctx, 6, 2, Some(4)).await;
    let completions: Completions = Arc::default();
    let processor =
        KinesisProcessor::new(handler(completions.clone()))
            .with_store(f.ctx.store("esm-outage"))
            .with_options(ProcessingOptions::default().max_attempts(1).parking(
                Parking::StateTable {
                    ttl: Duration::from_secs(3600),
                },
            ));
    f.dynamodb
        .set_faults(crate::support::faulty::every_request_fails())
        .unwrap();
    let clean: Vec<EsmRecord> = records[..3].to_vec();
    let report = processor
        .process(&kinesis_lane_event(&clean), None)
        .await
        .unwrap();
    assert_eq!(report.processed, 3);
    assert!(report.failures.is_empty(), "{report:?}");
    assert!(report.deduplication_off && report.state_errors >= 1);
    // A poison record fails alone, and is not parked.
    let report = processor
        .process(&kinesis_lane_event(&records), None)
        .await
        .unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert_eq!(report.failures[0].item_identifier, records[3].sequence);
    assert_eq!(report.parked, 0);
    // Back up: de-duplication and parking resume.
    f.dynamodb
        .set_faults(shardkeeper_local::Faults::none())
        .unwrap();
    let report = processor
        .process(&kinesis_lane_event(&records), None)
        .await
        .unwrap();
    assert!(!report.deduplication_off);
    assert_eq!((report.parked, report.processed), (1, 5));
    let report = processor
        .process(&kinesis_lane_event(&records), None)
        .await
        .unwrap();
    assert_eq!((report.duplicates_skipped, report.processed), (6, 0));
}

/// An invocation killed part-way with `BisectBatchOnFunctionError`: Lambda
/// retries the first half of the batch first ("splits the batch in two"),
/// and the half skips what the whole batch completed before it died; the
/// second half, a batch of its own, runs what was not done.
#[tokio::test]
async fn a_bisected_half_skips_what_the_whole_batch_completed() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 10, 3, None).await;
    let completions: Completions = Arc::default();
    let killed = Arc::new(tokio::sync::Notify::new());
    // The whole batch dies as it starts its eighth record (seven completed
    // and checkpointed).
    let handler = dying(completions.clone(), 7, killed.clone());
    let processor = KinesisProcessor::new(handler)
        .with_store(ctx.store("esm-bisected"))
        .with_options(ProcessingOptions::default().checkpoint_records(Some(1)));
    let whole = kinesis_lane_event(&records);
    tokio::select! {
        _ = processor.process(&whole, None) => panic!("to be killed"),
        _ = killed.notified() => {}
    }
    let first = processor
        .process(&kinesis_lane_event(&records[..5]), None)
        .await
        .unwrap();
    assert_eq!((first.duplicates_skipped, first.processed), (5, 0));
    let second = processor
        .process(&kinesis_lane_event(&records[5..]), None)
        .await
        .unwrap();
    assert_eq!(
        second.processed, 5,
        "a batch of its own: nothing known done"
    );
    assert_eq!(
        completions.lock().unwrap().len(),
        12,
        "records 5 and 6 twice"
    );
}

/// How deliveries of one batch go when the handler kills the process in
/// the record `killer` (its invocation never returns; here the test drops
/// it when the handler reaches the record, as the process's end does):
/// how many died before one answered (at most `deliveries`), what was
/// completed, and what was parked.
async fn deaths(
    store: &StateStore,
    records: &[EsmRecord],
    killer: &str,
    options: ProcessingOptions,
    deliveries: usize,
) -> (usize, Vec<String>, Vec<ParkedRecord>) {
    let completions: Completions = Arc::default();
    let dying = Arc::new(tokio::sync::Notify::new());
    let processor = {
        let (completions, dying, killer) = (completions.clone(), dying.clone(), killer.to_owned());
        KinesisProcessor::new(move |record: StreamRecord| {
            let (completions, dying) = (completions.clone(), dying.clone());
            let kills = *record.sequence_number == *killer;
            async move {
                if kills {
                    dying.notify_one();
                    std::future::pending::<()>().await;
                }
                completions.lock().unwrap().push((
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                ));
                Ok::<(), std::io::Error>(())
            }
        })
        .with_store(store.clone())
        .with_options(options)
    };
    let event = serde_json::json!({
        "Records": records.iter().map(|r| r.event_record.clone()).collect::<Vec<_>>()
    })
    .to_string();
    let mut died = 0;
    for _ in 0..deliveries {
        let payload = RawValue::from_string(event.clone()).unwrap();
        let context = function_context("orders", Duration::from_secs(60));
        let answer = tokio::select! {
            answer = processor.handle(LambdaEvent::new(payload, context)) => Some(answer.unwrap()),
            _ = dying.notified() => None,
        };
        match answer {
            None => died += 1,
            Some(answer) => {
                assert!(answer.batch_item_failures.is_empty());
                break;
            }
        }
    }
    let done = completions
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    (
        died,
        done,
        store.record_state().list_parked().await.unwrap(),
    )
}

fn parking_after(attempts: u32) -> ProcessingOptions {
    ProcessingOptions::default()
        .max_attempts(attempts)
        .parking(Parking::StateTable {
            ttl: Duration::from_secs(3600),
        })
}

/// A record whose handler kills the process (out of memory, an abort), after
/// its delivery wrote progress: the next delivery sees the dying one never
/// ended, and marks each record before it starts; each death in the marked
/// record counts a failed attempt (once per delivery), and at `max_attempts`
/// the record is parked (`RecordError::ProcessDied`) and the batch goes on.
/// Before, each delivery died in it again and nothing was counted: the shard
/// was stuck until the record expired.
#[tokio::test]
async fn a_record_that_kills_the_process_is_counted_and_parked() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-process-death");
    let killer = records[3].sequence.clone();
    let options = parking_after(2).checkpoint_records(Some(1));
    let (died, done, parked) = deaths(&store, &records, &killer, options, 5).await;
    // The first death (unguarded), then two in the marked record.
    assert_eq!(died, 3);
    let expected: Vec<String> = records
        .iter()
        .map(|r| r.sequence.clone())
        .filter(|s| *s != killer)
        .collect();
    assert_eq!(done, expected, "each other record once, in order");
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].key.sequence.as_str(), killer);
    assert!(parked[0].error.contains("died"), "{}", parked[0].error);
    assert_eq!(parked[0].attempts, 2);
}

/// A record that kills the process first thing in every delivery (a
/// poison record at the head of the batch) leaves no trace unless the
/// delivery marks its first record before it starts
/// (`ProcessingOptions::mark_first_record`): with the mark it is counted and
/// parked; without, every delivery dies in it uncounted (what README says).
#[tokio::test]
async fn a_record_that_kills_the_process_at_the_head_is_found_only_with_the_first_mark() {
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 4, 2, None).await;
    let killer = records[0].sequence.clone();

    let unmarked = ctx.store("esm-head-death-unmarked");
    let (died, done, parked) = deaths(&unmarked, &records, &killer, parking_after(2), 4).await;
    assert_eq!((died, done.len(), parked.len()), (4, 0, 0));

    let marked = ctx.store("esm-head-death-marked");
    let options = parking_after(2).mark_first_record(true);
    let (died, done, parked) = deaths(&marked, &records, &killer, options, 5).await;
    assert_eq!(
        died, 2,
        "the first death is found, then one more in the marked record"
    );
    assert_eq!(done.len(), 3);
    assert_eq!(parked.len(), 1, "{parked:?}");
    assert_eq!(parked[0].key.sequence.as_str(), killer);
}

/// `ReportAllFailures`: after a failure the batch goes on, and its
/// checkpoint stays before the failure. What it did past the failure (run,
/// or parked) is remembered by record, under the key of the batch Lambda
/// sends next (from the lowest failure), so the retry runs neither again:
/// before, every record after the first failure ran again at each retry,
/// and a record parked there was parked again (another envelope each time).
#[tokio::test]
async fn report_all_failures_does_not_run_again_what_it_did_past_a_failure() {
    use shardkeeper::processing::FailureMode;
    let ctx = ctx().await;
    let (_, _, records) = records(&ctx, 5, 5, None).await;
    let store = ctx.store("esm-report-all");
    let (flaky, poison) = (records[1].sequence.clone(), records[3].sequence.clone());
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let processor = {
        let calls = calls.clone();
        KinesisProcessor::new(move |record: StreamRecord| {
            let calls = calls.clone();
            let (flaky, poison) = (flaky.clone(), poison.clone());
            async move {
                let sequence = record.sequence_number.to_string();
                let first = {
                    let mut calls = calls.lock().unwrap();
                    let first = !calls.contains(&sequence);
                    calls.push(sequence.clone());
                    first
                };
                if (sequence == flaky && first) || sequence == poison {
                    return Err(std::io::Error::other("not now"));
                }
                Ok(())
            }
        })
        .with_store(store.clone())
        .with_options(
            ProcessingOptions::default()
                .mode(FailureMode::ReportAllFailures)
                .max_attempts(2)
                .parking(Parking::StateTable {
                    ttl: Duration::from_secs(3600),
                }),
        )
    };
    // Records 1 (once) and 3 (always) fail: both reported; 2 and 4 run
    // past the failure.
    let failures = invoke_as(&processor, "orders", &records).await;
    assert_eq!(
        failures,
        vec![records[1].sequence.clone(), records[3].sequence.clone()]
    );
    // Lambda's retry, from the lowest failure: 1 runs, 3 fails its second
    // attempt and is parked, 2 and 4 are not run again.
    let failures = invoke_as(&processor, "orders", &records[1..]).await;
    assert!(failures.is_empty(), "{failures:?}");
    // A third delivery of the same (a duplicate): nothing runs.
    let failures = invoke_as(&processor, "orders", &records[1..]).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = calls.lock().unwrap().clone();
    let times = |i: usize| calls.iter().filter(|c| **c == records[i].sequence).count();
    assert_eq!(
        (0..5).map(times).collect::<Vec<_>>(),
        vec![1, 2, 1, 2, 1],
        "only the failed records run again"
    );
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1, "parked once: {parked:?}");
}

/// At `concurrency` above 1 a failure stops its own key only: the other
/// keys' records after it run and are remembered with the batch's
/// progress, and Lambda's retry from the reported failure (as Lambda
/// retries: "from the record with the lowest sequence number" reported,
/// Lambda developer guide, "Reporting batch item failures") runs only the
/// failed key's records.
#[tokio::test]
async fn at_concurrency_the_retry_runs_only_the_failed_keys_records() {
    let ctx = ctx().await;
    // 12 records over 4 keys (k0, k1, k2, k3, k0, ...): record 1 (k1)
    // fails once; record 0 (k0) is slow, so every other key runs ahead of
    // the watermark.
    let (_, _, records) = records(&ctx, 12, 4, None).await;
    let store = ctx.store("esm-concurrency");
    let (slow, flaky) = (records[0].sequence.clone(), records[1].sequence.clone());
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let processor = {
        let calls = calls.clone();
        KinesisProcessor::new(move |record: StreamRecord| {
            let calls = calls.clone();
            let (slow, flaky) = (slow.clone(), flaky.clone());
            async move {
                let sequence = record.sequence_number.to_string();
                if sequence == slow {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                let first = {
                    let mut calls = calls.lock().unwrap();
                    let first = !calls.contains(&sequence);
                    calls.push(sequence.clone());
                    first
                };
                if sequence == flaky && first {
                    return Err(std::io::Error::other("not now"));
                }
                Ok(())
            }
        })
        .with_store(store.clone())
        .with_options(ProcessingOptions::default().concurrency(4))
    };
    let failures = invoke_as(&processor, "orders", &records).await;
    assert_eq!(failures, vec![records[1].sequence.clone()]);
    // k1's records after the failure (5 and 9) did not run.
    let ran: BTreeSet<String> = calls.lock().unwrap().iter().cloned().collect();
    for i in [5, 9] {
        assert!(
            !ran.contains(&records[i].sequence),
            "record {i} ran past its key's failure"
        );
    }
    // Lambda's retry from record 1: only k1's records run.
    let failures = invoke_as(&processor, "orders", &records[1..]).await;
    assert!(failures.is_empty(), "{failures:?}");
    let calls = calls.lock().unwrap().clone();
    let times = |i: usize| calls.iter().filter(|c| **c == records[i].sequence).count();
    assert_eq!(
        (0..12).map(times).collect::<Vec<_>>(),
        vec![1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1],
        "only the failed key's records run in the retry"
    );
}
