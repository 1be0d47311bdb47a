//! A stream that another account shares, read by its ARN.
//!
//! Kinesis looks a stream name up in the caller's own account, so a shared
//! stream is reached by its ARN only (Kinesis Data Streams developer guide,
//! "Share access using resource-based policies"). The consumer's side here
//! talks to Kinesis through a proxy that answers as Kinesis answers such a
//! caller: by name, `ResourceNotFoundException`; by ARN, the stream.

use crate::support::common::{create_stream, ctx, rebalancer, stream_arn};
use crate::support::consume::{check, eager, produce, tick_and_step, worker_with, Log};
use shardkeeper::config::ScheduledConfig;
use shardkeeper::consumer::{EfoPool, WorkerConfig};
use shardkeeper::functions::start_store;
use shardkeeper_local::{test_endpoints, unique_name, AwsClients, AwsService, FaultProxy, Faults};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const KEYS: u32 = 8;
const PER_KEY: u32 = 5;

/// Starts the group `group` on `stream` (a name or ARN) the way a
/// scheduled function does at init (DescribeStreamSummary, the table, the
/// stream item), through `aws`.
async fn start_group(
    aws: &AwsClients,
    table: &str,
    group: &str,
    stream: &str,
) -> shardkeeper::state::StateStore {
    let vars: HashMap<&str, &str> = [
        ("SHARDKEEPER_TABLE", table),
        ("SHARDKEEPER_GROUP", group),
        ("SHARDKEEPER_STREAM", stream),
    ]
    .into();
    let config = ScheduledConfig::from_lookup(|k| vars.get(k).map(|v| v.to_string())).unwrap();
    start_store(&config, aws.dynamodb.clone(), &aws.kinesis)
        .await
        .unwrap()
}

/// Steps the rebalancer and one worker of `config` until every record was
/// handled (or a bound of steps, so a broken run ends).
async fn consume_all(
    aws: &AwsClients,
    store: &shardkeeper::state::StateStore,
    config: WorkerConfig,
) -> Log {
    let log: Log = Arc::default();
    let rebalancer = rebalancer(aws, store);
    let mut workers = vec![worker_with(store, &aws.kinesis, "w0", log.clone(), config)];
    for _ in 0..1_000 {
        tick_and_step(&rebalancer, &mut workers).await;
        if log.lock().unwrap().len() >= (KEYS * PER_KEY) as usize {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_another_account_shares_is_read_whole_by_its_arn() {
    let ctx = ctx().await;
    let mut endpoints = test_endpoints().unwrap();
    let Some(kinesis_endpoint) = endpoints.kinesis.clone() else {
        eprintln!("skipped: the proxy needs a local Kinesis endpoint");
        return;
    };
    // The owner's account: the stream and its records.
    let stream = create_stream(&ctx.aws, 2).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, KEYS, 0..PER_KEY).await;

    // The consumer's account.
    let proxy = FaultProxy::start(AwsService::Kinesis, &kinesis_endpoint, Faults::none())
        .await
        .unwrap();
    proxy.share_from_other_account(&arn).unwrap();
    endpoints.kinesis = Some(proxy.url().to_owned());
    let theirs = AwsClients::connect(&endpoints).await;

    // By name, the stream is not there for them: the start says so, typed.
    let err = shardkeeper::state::kinesis_stream_summary(
        &theirs.kinesis,
        &shardkeeper::state::StreamAddress::parse(&stream).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, shardkeeper::state::StateError::NotFound { .. }),
        "{err}"
    );
    assert_eq!(proxy.shared_stream_counts().by_name, 1);

    // By ARN: a group polling, and a group reading with enhanced fan-out.
    let polling = start_group(&theirs, &ctx.table, &unique_name("poll"), &arn).await;
    let recorded = polling
        .stream_item()
        .state()
        .await
        .unwrap()
        .unwrap()
        .stream_arn;
    assert_eq!(recorded.as_deref(), Some(arn.as_str()));
    check(
        &consume_all(&theirs, &polling, eager()).await,
        KEYS,
        PER_KEY,
    );

    let fanning_out = start_group(&theirs, &ctx.table, &unique_name("efo"), &arn).await;
    let efo = eager().enhanced_fan_out(Some(
        EfoPool::new(&unique_name("x"), 1).poll_interval(Duration::from_millis(20)),
    ));
    check(
        &consume_all(&theirs, &fanning_out, efo).await,
        KEYS,
        PER_KEY,
    );

    let seen = proxy.shared_stream_counts();
    assert_eq!(
        seen.by_name, 1,
        "only the call above named the stream: {seen:?}"
    );
    assert!(seen.by_arn > 10, "{seen:?}");
}
