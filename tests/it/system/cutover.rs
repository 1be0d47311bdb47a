//! `cutover`: a consumer moved from an event source mapping (driven by the
//! emulator of Lambda's mapping) to the worker fleet and back, on the
//! in-process servers, losing nothing and repeating nothing.

use crate::esm_invoke;
use crate::support::common::{
    cli_target, create_stream, ctx, list_shards, scripted, stream_arn, Ctx,
};
use crate::support::consume::{eager, logging, produce, Log};
use crate::support::esm::kinesis_event_record;
use crate::support::lambda_esm::{self, EsmConfig, EsmRecord};
use crate::support::recorded::{recorded_on, records, Key};
use shardkeeper::lambda::KinesisProcessor;
use shardkeeper_cli::args::{CutoverFromEsmArgs, CutoverToEsmArgs, EsmConsumer};
use shardkeeper_history::check;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

/// Every record of the stream as the mapping would deliver it, with its
/// arrival time (ms), shard by shard in order.
async fn esm_records(ctx: &Ctx, stream: &str) -> Vec<(EsmRecord, i64)> {
    let arn = stream_arn(&ctx.aws, stream).await;
    let mut all = Vec::new();
    for shard in list_shards(&ctx.aws, stream).await {
        let id = shard.shard_id().to_owned();
        for r in crate::support::esm::read_shard(ctx, stream, &id).await {
            let arrival = r
                .approximate_arrival_timestamp()
                .and_then(|t| t.to_millis().ok())
                .unwrap_or(0);
            all.push((
                EsmRecord {
                    id: r.sequence_number().to_owned(),
                    shard: id.clone(),
                    sequence: r.sequence_number().to_owned(),
                    key: r.partition_key().unwrap_or_default().to_owned(),
                    event_record: kinesis_event_record(&arn, &id, &r),
                    units: Vec::new(),
                },
                arrival,
            ));
        }
    }
    all
}

/// (key, n) of each record the log holds, as a set, and how many entries.
fn logged(log: &Log) -> (BTreeSet<Key>, usize) {
    let log = log.lock().unwrap();
    let set = log
        .iter()
        .map(|(_, key, n)| (key.clone(), u64::from(*n)))
        .collect();
    (set, log.len())
}

/// A mapping (ParallelizationFactor 1, bisection on) delivers part of each
/// shard, then is disabled; `cutover from-esm` starts the fleet where the
/// mapping's consumer got to, and the fleet reads the rest and what comes
/// after. The fleet stops; `cutover to-esm` sets floors and the time to
/// create a new mapping at; the new mapping delivers everything from that
/// time, the fleet's last records included, and its processor skips what
/// the fleet processed. Every record is processed, and once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_moves_from_the_mapping_to_the_fleet_and_back_losing_and_repeating_nothing() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let esm_store = ctx.store(&stream);
    let fleet = ctx.store(&stream);
    let mapping = EsmConfig {
        batch_size: 4,
        parallelization: 1,
        bisect: true,
        max_retries: 5,
        kill_chance: 0.0,
        reform_chance: 0.0,
        duplicate_chance: 0.0,
        init_failure_chance: 0.0,
        redeliver_chance: 0.0,
        timeout: Duration::from_secs(60),
        seed: 3,
    };

    // The mapping delivers the first two thirds of each shard, then is disabled.
    produce(&ctx.aws.kinesis, &stream, 8, 0..6).await;
    let first = esm_records(&ctx, &stream).await;
    let mut delivered = Vec::new();
    for shard in BTreeSet::<String>::from_iter(first.iter().map(|(r, _)| r.shard.clone())) {
        let of: Vec<&EsmRecord> = first
            .iter()
            .map(|(r, _)| r)
            .filter(|r| r.shard == shard)
            .collect();
        delivered.extend(of[..of.len() * 2 / 3].iter().map(|r| (*r).clone()));
    }
    let esm_log: Log = Arc::default();
    let processor =
        KinesisProcessor::new(logging("esm", esm_log.clone())).with_store(esm_store.clone());
    lambda_esm::run(
        lambda_esm::warm(esm_invoke!(processor)),
        "orders",
        &delivered,
        &mapping,
    )
    .await;
    let (by_esm, _) = logged(&esm_log);
    assert_eq!(by_esm.len(), delivered.len(), "the mapping's part");

    let from = CutoverFromEsmArgs {
        target: cli_target(&fleet),
        esm: EsmConsumer {
            esm_group: esm_store.config().group.to_string(),
            consumer: "orders".to_owned(),
        },
        since: None,
        mapping: None,
        lambda_endpoint_url: None,
        force: false,
        change: scripted(),
    };
    let lambda = aws_sdk_lambda::Client::new(&ctx.aws.config);
    shardkeeper_cli::cutover::from_esm(&fleet, &ctx.aws.kinesis, &lambda, &from, |_| true)
        .await
        .unwrap();

    // The fleet reads the rest and what comes after.
    produce(&ctx.aws.kinesis, &stream, 8, 6..9).await;
    let mut g = recorded_on(&ctx, fleet.clone(), eager());
    let start = Instant::now();
    let so_far = records(8, 0..9);
    let rest: BTreeSet<Key> = so_far.difference(&by_esm).cloned().collect();
    g.run_until(&ctx, start, &rest).await;
    let by_fleet = g.processed_since(start);
    assert_eq!(
        by_fleet.iter().cloned().collect::<BTreeSet<_>>(),
        rest,
        "the fleet reads what the mapping did not, and nothing it did"
    );
    assert_eq!(by_fleet.len(), rest.len(), "each once");
    let v = check(&g.since(start, &rest));
    assert!(v.passed() && v.duplicates == 0, "{v:?}");

    // The fleet stops (checkpoints, releases); a new mapping takes over.
    for w in &mut g.workers {
        w.run_until(None, || true).await.unwrap();
    }
    let to = CutoverToEsmArgs {
        target: cli_target(&fleet),
        esm: EsmConsumer {
            esm_group: esm_store.config().group.to_string(),
            consumer: "orders".to_owned(),
        },
        change: scripted(),
    };
    let out = shardkeeper_cli::cutover::to_esm(&fleet, &ctx.aws.kinesis, &to, |_| true)
        .await
        .unwrap();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["starting_position"], "AT_TIMESTAMP", "{report}");
    let at = report["starting_timestamp_ms"].as_i64().unwrap();
    produce(&ctx.aws.kinesis, &stream, 8, 9..12).await;
    let from_time: Vec<EsmRecord> = esm_records(&ctx, &stream)
        .await
        .into_iter()
        .filter(|(_, arrival)| *arrival >= at)
        .map(|(r, _)| r)
        .collect();
    let esm2_log: Log = Arc::default();
    let processor =
        KinesisProcessor::new(logging("esm2", esm2_log.clone())).with_store(esm_store.clone());
    let run = lambda_esm::run(
        lambda_esm::warm(esm_invoke!(processor)),
        "orders",
        &from_time,
        &mapping,
    )
    .await;
    assert!(
        from_time.len() > records(8, 9..12).len(),
        "the new mapping delivers some of the fleet's records again"
    );
    let (by_esm2, entries) = logged(&esm2_log);
    assert_eq!(by_esm2, records(8, 9..12), "only what came after the fleet");
    assert_eq!(entries, by_esm2.len(), "each once");
    assert_eq!(
        run.acknowledged.len(),
        from_time.len(),
        "every delivered record done"
    );
    let all: BTreeSet<Key> = by_esm
        .iter()
        .chain(&by_fleet)
        .chain(&by_esm2)
        .cloned()
        .collect();
    assert_eq!(all, records(8, 0..12), "nothing lost");
}

/// Lambda's `GetEventSourceMapping` for one mapping, as the API reference
/// documents its answer
/// (<https://docs.aws.amazon.com/lambda/latest/api/API_GetEventSourceMapping.html>),
/// served at a local endpoint (there is no in-process Lambda control API),
/// read through the real SDK client.
async fn mapping_endpoint(mapping: serde_json::Value) -> String {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/2015-03-31/event-source-mappings/{uuid}",
        get(
            move |axum::extract::Path(uuid): axum::extract::Path<String>| {
                let mapping = mapping.clone();
                async move {
                    if mapping["UUID"] == uuid.as_str() {
                        (axum::http::StatusCode::OK, axum::Json(mapping))
                    } else {
                        (
                            axum::http::StatusCode::NOT_FOUND,
                            axum::Json(serde_json::json!({
                                "__type": "ResourceNotFoundException",
                                "Message": "The resource you requested does not exist.",
                            })),
                        )
                    }
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// With `--mapping`, `cutover from-esm` writes nothing unless Lambda shows
/// the mapping disabled, reading the group's stream, at a
/// ParallelizationFactor of 1; then it moves the positions.
#[tokio::test]
async fn cutover_from_esm_writes_nothing_unless_the_mapping_is_disabled_on_this_stream_at_factor_one(
) {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let fleet = ctx.store(&stream);
    let uuid = "14e0db71-5d35-4eb5-b481-8945cf9d10c2";
    let mapping = |state: &str, source: &str, factor: i64| {
        serde_json::json!({
            "UUID": uuid,
            "State": state,
            "EventSourceArn": source,
            "FunctionArn": "arn:aws:lambda:us-east-1:123456789012:function:orders",
            "ParallelizationFactor": factor,
            "BatchSize": 100,
            "StartingPosition": "TRIM_HORIZON",
            "LastModified": 1.7643e9,
        })
    };
    let args = |url: &str, uuid: &str| CutoverFromEsmArgs {
        target: cli_target(&fleet),
        esm: EsmConsumer {
            esm_group: "orders-esm".to_owned(),
            consumer: "orders".to_owned(),
        },
        since: None,
        mapping: Some(uuid.to_owned()),
        lambda_endpoint_url: Some(url.to_owned()),
        force: false,
        change: scripted(),
    };
    let other = arn.replace(&stream, "another-stream");
    for (answer, asked, says) in [
        (mapping("Enabled", &arn, 1), uuid, "is Enabled"),
        (mapping("Disabling", &arn, 1), uuid, "is Disabling"),
        (
            mapping("Disabled", &other, 1),
            uuid,
            "not the group's stream",
        ),
        (
            mapping("Disabled", &arn, 4),
            uuid,
            "ParallelizationFactor 4",
        ),
        (
            mapping("Disabled", &arn, 1),
            "no-such-mapping",
            "ResourceNotFoundException",
        ),
    ] {
        let url = mapping_endpoint(answer).await;
        let lambda = aws_sdk_lambda::Client::new(&crate::support::classes::config_at(&ctx, &url));
        let error = shardkeeper_cli::cutover::from_esm(
            &fleet,
            &ctx.aws.kinesis,
            &lambda,
            &args(&url, asked),
            |_| true,
        )
        .await
        .unwrap_err();
        assert!(
            matches!(
                &error,
                shardkeeper_cli::Error::BadArgument {
                    name: "--mapping",
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains(says), "{says}: {error}");
        assert!(
            fleet.load_group().await.unwrap().shards.is_empty(),
            "nothing written: {error}"
        );
    }
    let url = mapping_endpoint(mapping("Disabled", &arn, 1)).await;
    let lambda = aws_sdk_lambda::Client::new(&crate::support::classes::config_at(&ctx, &url));
    shardkeeper_cli::cutover::from_esm(
        &fleet,
        &ctx.aws.kinesis,
        &lambda,
        &args(&url, uuid),
        |_| true,
    )
    .await
    .unwrap();
    assert_eq!(fleet.load_group().await.unwrap().shards.len(), 2);
}
