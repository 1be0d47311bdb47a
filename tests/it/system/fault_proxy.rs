//! The fault proxy through the real AWS SDK clients, in front of the
//! in-process DynamoDB and Kinesis servers.

use crate::support::common::{active_efo_consumer, create_id_table, create_stream, stream_arn};
use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::get_item::{GetItemError, GetItemOutput};
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use aws_sdk_kinesis::operation::put_record::{PutRecordError, PutRecordOutput};
use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{ShardIteratorType, StartingPosition, SubscribeToShardEventStream};
use aws_smithy_types::retry::{ErrorKind, RetryConfig};
use shardkeeper_local::{
    shared_servers, unique_name, AwsClients, AwsService, Endpoints, FaultProxy, Faults,
    RequestCounter, SlowRequests,
};
use std::time::{Duration, Instant};

/// A proxy in front of each shared server, and clients pointed at them.
struct Proxied {
    dynamodb: FaultProxy,
    kinesis: FaultProxy,
    aws: AwsClients,
}

async fn proxied(faults: Faults) -> Proxied {
    let servers = shared_servers().expect("local servers");
    let dynamodb = FaultProxy::start(
        AwsService::DynamoDb,
        &servers.dynamodb_endpoint(),
        faults.clone(),
    )
    .await
    .expect("DynamoDB proxy");
    let kinesis = FaultProxy::start(AwsService::Kinesis, &servers.kinesis_endpoint(), faults)
        .await
        .expect("Kinesis proxy");
    let aws = AwsClients::connect(&Endpoints {
        dynamodb: Some(dynamodb.url().to_owned()),
        kinesis: Some(kinesis.url().to_owned()),
        dummy_credentials: true,
    })
    .await;
    Proxied {
        dynamodb,
        kinesis,
        aws,
    }
}

/// Clients straight to the shared servers, past any proxy.
async fn direct() -> AwsClients {
    AwsClients::connect(&Endpoints::local(shared_servers().expect("local servers"))).await
}

/// The SDK's standard retries with `attempts` and millisecond backoff.
fn retries(attempts: u32) -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(attempts)
        .with_initial_backoff(Duration::from_millis(1))
        .with_max_backoff(Duration::from_millis(20))
}

fn dynamodb_client(
    config: &SdkConfig,
    url: &str,
    retry: RetryConfig,
    counter: &RequestCounter,
) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(config)
            .endpoint_url(url)
            .retry_config(retry)
            .interceptor(counter.clone())
            .build(),
    )
}

fn kinesis_client(config: &SdkConfig, url: &str, retry: RetryConfig) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(config)
            .endpoint_url(url)
            .retry_config(retry)
            .build(),
    )
}

impl Proxied {
    fn clients(&self, retry: RetryConfig) -> (aws_sdk_dynamodb::Client, aws_sdk_kinesis::Client) {
        let config = &self.aws.config;
        (
            dynamodb_client(
                config,
                self.dynamodb.url(),
                retry.clone(),
                &RequestCounter::new(),
            ),
            kinesis_client(config, self.kinesis.url(), retry),
        )
    }
}

fn item(id: &str, n: usize) -> std::collections::HashMap<String, AttributeValue> {
    [
        ("id".to_owned(), AttributeValue::S(id.to_owned())),
        ("n".to_owned(), AttributeValue::N(n.to_string())),
    ]
    .into()
}

/// A new table keyed by `id`.
async fn table(aws: &AwsClients) -> String {
    let name = unique_name("fp");
    create_id_table(aws, &name, false).await;
    name
}

/// The (sequence number, data) of a shard's records from its start.
async fn records(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    shard: &str,
) -> Vec<(String, Vec<u8>)> {
    let iterator = kinesis
        .get_shard_iterator()
        .stream_name(stream)
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .expect("shard iterator");
    let out = kinesis
        .get_records()
        .shard_iterator(iterator.shard_iterator().expect("an iterator"))
        .send()
        .await
        .expect("get records");
    out.records()
        .iter()
        .map(|r| (r.sequence_number().to_owned(), r.data().as_ref().to_vec()))
        .collect()
}

/// GetItem of the item with key `a`.
async fn get_item(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<GetItemOutput, SdkError<GetItemError>> {
    ddb.get_item()
        .table_name(table)
        .key("id", AttributeValue::S("a".into()))
        .consistent_read(true)
        .send()
        .await
}

async fn put_record(
    kinesis: &aws_sdk_kinesis::Client,
    stream: &str,
    data: &'static str,
) -> Result<PutRecordOutput, SdkError<PutRecordError>> {
    kinesis
        .put_record()
        .stream_name(stream)
        .partition_key("k")
        .data(Blob::new(data))
        .send()
        .await
}

/// The HTTP status of the answer an SDK error came from.
fn status<E>(err: &SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>) -> Option<u16> {
    err.raw_response().map(|r| r.status().as_u16())
}

#[tokio::test]
async fn throttled_requests_fail_with_the_services_throttling_codes() {
    let p = proxied(Faults {
        throttle: 1.0,
        ..Faults::none()
    })
    .await;
    let (ddb, kinesis) = p.clients(RetryConfig::disabled());

    let err = ddb
        .put_item()
        .table_name("any")
        .set_item(Some(item("a", 1)))
        .send()
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));
    assert_eq!(status(&err), Some(400));
    assert!(err
        .into_service_error()
        .is_provisioned_throughput_exceeded_exception());
    let err = get_item(&ddb, "any").await.unwrap_err();
    assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));

    let err = put_record(&kinesis, "any", "x").await.unwrap_err();
    assert_eq!(err.code(), Some("ProvisionedThroughputExceededException"));
    assert!(err
        .into_service_error()
        .is_provisioned_throughput_exceeded_exception());
    // Control-plane calls are limited with LimitExceededException.
    let err = kinesis
        .describe_stream_summary()
        .stream_name("any")
        .send()
        .await
        .unwrap_err();
    assert!(err.into_service_error().is_limit_exceeded_exception());

    for proxy in [&p.dynamodb, &p.kinesis] {
        let counts = proxy.counts();
        assert_eq!((counts.throttled, counts.requests()), (2, 2), "{counts:?}");
    }
}

#[tokio::test]
async fn internal_errors_are_5xx_that_the_sdk_retries() {
    let p = proxied(Faults {
        server_error: 1.0,
        ..Faults::none()
    })
    .await;
    let (ddb, kinesis) = p.clients(retries(3));

    let err = get_item(&ddb, "any").await.unwrap_err();
    assert_eq!(err.code(), Some("InternalServerError"));
    assert_eq!(status(&err), Some(500));
    let err = put_record(&kinesis, "any", "x").await.unwrap_err();
    assert_eq!(err.code(), Some("InternalFailure"));
    assert_eq!(status(&err), Some(500));

    // Three attempts each: the SDK took the answers for retryable.
    assert_eq!(p.dynamodb.counts().errors_500, 3);
    assert_eq!(p.kinesis.counts().errors_500, 3);
    assert_eq!(p.dynamodb.counts().requests(), 3);
}

#[tokio::test]
async fn dropped_connections_are_dispatch_failures() {
    let p = proxied(Faults {
        drop: 1.0,
        ..Faults::none()
    })
    .await;
    let (ddb, kinesis) = p.clients(RetryConfig::disabled());

    let err = ddb.list_tables().send().await.unwrap_err();
    let SdkError::DispatchFailure(failure) = &err else {
        panic!("expected a dispatch failure, got {err:?}");
    };
    assert!(
        failure.is_io() || failure.as_other() == Some(ErrorKind::TransientError),
        "{failure:?}"
    );
    let err = kinesis.list_streams().send().await.unwrap_err();
    assert!(matches!(err, SdkError::DispatchFailure(_)), "{err:?}");
    assert_eq!(p.dynamodb.counts().dropped, 1);
    assert_eq!(p.kinesis.counts().dropped, 1);
    assert_eq!(p.dynamodb.counts().forwarded, 0);
}

#[tokio::test]
async fn delayed_requests_wait_then_succeed() {
    let wait = Duration::from_millis(40);
    let p = proxied(Faults {
        delay: 1.0,
        latency: wait..=wait,
        ..Faults::none()
    })
    .await;
    let (ddb, _) = p.clients(RetryConfig::disabled());
    let started = Instant::now();
    ddb.list_tables()
        .send()
        .await
        .expect("forwarded after the wait");
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    let counts = p.dynamodb.counts();
    assert_eq!(
        (counts.delayed, counts.forwarded, counts.requests()),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn only_the_requests_slow_matches_wait_and_they_go_on_unchanged() {
    let wait = Duration::from_millis(60);
    let p = proxied(Faults {
        slow: Some(SlowRequests {
            operation: "UpdateItem".into(),
            body_contains: vec!["SET #n = :slow".into()],
            latency: wait..=wait,
        }),
        ..Faults::none()
    })
    .await;
    let table = table(&p.aws).await;
    let ddb = &p.aws.dynamodb;
    ddb.put_item()
        .table_name(&table)
        .set_item(Some(item("a", 1)))
        .send()
        .await
        .expect("put");
    let update = |expression: &str, value: usize| {
        ddb.update_item()
            .table_name(&table)
            .key("id", AttributeValue::S("a".into()))
            .update_expression(expression)
            .expression_attribute_names("#n", "n")
            .expression_attribute_values(
                if expression.contains(":slow") {
                    ":slow"
                } else {
                    ":fast"
                },
                AttributeValue::N(value.to_string()),
            )
            .send()
    };
    update("SET #n = :fast", 2).await.expect("a fast update");
    assert_eq!(p.dynamodb.counts().slowed, 0);
    let started = Instant::now();
    update("SET #n = :slow", 3).await.expect("a slow update");
    assert!(started.elapsed() >= wait, "{:?}", started.elapsed());
    get_item(ddb, &table).await.expect("get");
    let counts = p.dynamodb.counts();
    assert_eq!((counts.slowed, counts.injected()), (1, 0), "{counts:?}");
    let stored = get_item(&direct().await.dynamodb, &table)
        .await
        .expect("get");
    assert_eq!(
        stored.item,
        Some(item("a", 3)),
        "the slow update applied as sent"
    );
}

#[tokio::test]
async fn without_faults_everything_is_forwarded_unchanged() {
    let p = proxied(Faults::none()).await;
    let direct = direct().await;

    let table = table(&p.aws).await;
    p.aws
        .dynamodb
        .put_item()
        .table_name(&table)
        .set_item(Some(item("a", 7)))
        .send()
        .await
        .expect("put through the proxy");
    let proxied_item = get_item(&p.aws.dynamodb, &table).await.expect("get").item;
    assert_eq!(proxied_item, Some(item("a", 7)));
    let direct_item = get_item(&direct.dynamodb, &table).await.expect("get").item;
    assert_eq!(proxied_item, direct_item);

    let stream = create_stream(&p.aws, 1).await;
    let put = put_record(&p.aws.kinesis, &stream, "through the proxy")
        .await
        .expect("put record through the proxy");
    let through = records(&p.aws.kinesis, &stream, put.shard_id()).await;
    assert_eq!(
        through,
        vec![(
            put.sequence_number().to_owned(),
            b"through the proxy".to_vec()
        )]
    );
    assert_eq!(
        through,
        records(&direct.kinesis, &stream, put.shard_id()).await
    );

    for (proxy, sent) in [
        (&p.dynamodb, p.aws.dynamodb_requests.total()),
        (&p.kinesis, p.aws.kinesis_requests.total()),
    ] {
        let counts = proxy.counts();
        assert_eq!(counts.injected(), 0, "{counts:?}");
        assert_eq!(counts.forwarded, sent, "{counts:?}");
    }
}

#[tokio::test]
async fn standard_retries_ride_out_a_throttle_rate() {
    let servers = shared_servers().expect("local servers");
    let seed = 20_240_601;
    let proxy = FaultProxy::start_seeded(
        AwsService::DynamoDb,
        &servers.dynamodb_endpoint(),
        Faults {
            throttle: 0.3,
            ..Faults::none()
        },
        seed,
    )
    .await
    .expect("proxy");
    let direct = direct().await;
    let table = table(&direct).await;
    let sent = RequestCounter::new();
    // Ten attempts: at three, 0.3^3 = 2.7 % of calls would run out of them.
    let ddb = dynamodb_client(&direct.config, proxy.url(), retries(10), &sent);
    for n in 0..50 {
        ddb.put_item()
            .table_name(&table)
            .set_item(Some(item(&format!("k{n}"), n)))
            .send()
            .await
            .unwrap_or_else(|e| panic!("put {n} (seed {seed}): {e:?}"));
    }

    let counts = proxy.counts();
    assert_eq!(counts.forwarded, 50, "{counts:?}");
    assert_eq!(counts.requests(), sent.total(), "{counts:?}");
    assert_eq!(counts.throttled, sent.total() - 50, "{counts:?}");
    assert!(
        counts.throttled > 0,
        "no throttling was injected: {counts:?}"
    );
    assert_eq!(counts.errors_500 + counts.dropped + counts.delayed, 0);
    let stored = direct
        .dynamodb
        .scan()
        .table_name(&table)
        .select(Select::Count)
        .send()
        .await
        .expect("scan");
    assert_eq!(stored.count(), 50);
}

#[tokio::test]
async fn faults_change_and_pause_at_run_time() {
    let p = proxied(Faults {
        throttle: 1.0,
        ..Faults::none()
    })
    .await;
    let (ddb, _) = p.clients(RetryConfig::disabled());
    assert!(ddb.list_tables().send().await.is_err());
    p.dynamodb.pause();
    assert!(p.dynamodb.is_paused());
    ddb.list_tables().send().await.expect("paused: forwarded");
    p.dynamodb.resume();
    assert!(ddb.list_tables().send().await.is_err());
    p.dynamodb.set_faults(Faults::none()).unwrap();
    ddb.list_tables()
        .send()
        .await
        .expect("no faults: forwarded");

    let bad = Faults {
        throttle: 0.7,
        server_error: 0.7,
        ..Faults::none()
    };
    assert!(p.dynamodb.set_faults(bad).is_err());
    assert_eq!(p.dynamodb.faults(), Faults::none());
    let counts = p.dynamodb.counts();
    assert_eq!(
        (counts.throttled, counts.forwarded, counts.requests()),
        (2, 2, 4)
    );
}

/// An operation told to fail answers the error and status it was given,
/// whatever the rates and even while paused; the other operations pass.
#[tokio::test]
async fn an_operation_told_to_fail_answers_its_error_and_the_others_pass() {
    let p = proxied(Faults::none()).await;
    let (ddb, _) = p.clients(RetryConfig::disabled());
    let table = table(&direct().await).await;
    p.dynamodb
        .fail_operation("GetItem", 400, "TransactionConflictException")
        .unwrap();
    p.dynamodb.pause();
    let err = get_item(&ddb, &table).await.unwrap_err();
    assert_eq!(err.code(), Some("TransactionConflictException"));
    assert_eq!(status(&err), Some(400));
    ddb.list_tables().send().await.expect("another operation");
    p.dynamodb
        .fail_operation("GetItem", 500, "InternalServerError")
        .unwrap();
    let err = get_item(&ddb, &table).await.unwrap_err();
    assert_eq!(
        (err.code(), status(&err)),
        (Some("InternalServerError"), Some(500))
    );
    p.dynamodb.stop_failing_operations();
    get_item(&ddb, &table)
        .await
        .expect("no longer told to fail");
    let counts = p.dynamodb.counts();
    assert_eq!((counts.failed_as_told, counts.forwarded), (2, 2));
    assert_eq!(counts.requests(), 4);
    assert!(p.dynamodb.fail_operation("GetItem", 99, "X").is_err());
}

#[tokio::test]
async fn proxies_listen_on_loopback_and_front_only_loopback() {
    let servers = shared_servers().expect("local servers");
    let proxy = FaultProxy::start(
        AwsService::Kinesis,
        &servers.kinesis_endpoint(),
        Faults::none(),
    )
    .await
    .unwrap();
    assert!(
        proxy.url().starts_with("http://127.0.0.1:"),
        "{}",
        proxy.url()
    );
    assert_eq!(proxy.service(), AwsService::Kinesis);
    assert!(
        FaultProxy::start(AwsService::Kinesis, "http://192.0.2.1:4567", Faults::none())
            .await
            .is_err()
    );
}

async fn next_records(
    events: &mut aws_sdk_kinesis::operation::subscribe_to_shard::SubscribeToShardOutput,
) -> Vec<Vec<u8>> {
    for _ in 0..50 {
        match events.event_stream.recv().await.expect("event") {
            Some(SubscribeToShardEventStream::SubscribeToShardEvent(event)) => {
                if !event.records().is_empty() {
                    return event
                        .records()
                        .iter()
                        .map(|r| r.data().as_ref().to_vec())
                        .collect();
                }
            }
            Some(_) => {}
            None => panic!("the subscription ended"),
        }
    }
    panic!("no records in 50 events");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_to_shard_streams_through_the_proxy() {
    let p = proxied(Faults::none()).await;
    let kinesis = &p.aws.kinesis;
    let stream = create_stream(&p.aws, 1).await;
    let stream_arn = stream_arn(&p.aws, &stream).await;
    let consumer_arn = active_efo_consumer(&p.aws, &stream_arn, "fault-proxy").await;
    let first = put_record(kinesis, &stream, "first").await.expect("put");
    let mut events = kinesis
        .subscribe_to_shard()
        .consumer_arn(&consumer_arn)
        .shard_id(first.shard_id())
        .starting_position(
            StartingPosition::builder()
                .r#type(ShardIteratorType::TrimHorizon)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("subscribe through the proxy");
    assert_eq!(next_records(&mut events).await, vec![b"first".to_vec()]);
    // A record written after the first arrived comes on the same open
    // subscription: the answer is streamed, not collected to its end.
    put_record(kinesis, &stream, "second").await.expect("put");
    assert_eq!(next_records(&mut events).await, vec![b"second".to_vec()]);
    assert_eq!(p.kinesis.counts().injected(), 0);
}

/// A lost response: the request reaches the server and is applied, and the
/// answer never comes back, so the client sees a failure (and would retry)
/// for a write that happened. What a retried conditional write then meets.
#[tokio::test]
async fn a_lost_response_leaves_the_write_applied() {
    let p = proxied(Faults {
        lose_response: 1.0,
        ..Faults::none()
    })
    .await;
    let direct = direct().await;
    let table = unique_name("lost");
    create_id_table(&direct, &table, false).await;
    let (ddb, _) = p.clients(RetryConfig::disabled());
    let err = ddb
        .put_item()
        .table_name(&table)
        .item("id", AttributeValue::S("x".into()))
        .condition_expression("attribute_not_exists(id)")
        .send()
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::DispatchFailure(_)), "{err:?}");
    let stored = direct
        .dynamodb
        .get_item()
        .table_name(&table)
        .key("id", AttributeValue::S("x".into()))
        .send()
        .await
        .unwrap();
    assert!(stored.item().is_some(), "the write was applied");
    let counts = p.dynamodb.counts();
    assert_eq!((counts.lost_responses, counts.forwarded), (1, 1));
}
