//! Every error the Kinesis API reference documents for the shard worker's
//! reads (GetRecords, GetShardIterator, SubscribeToShard) and its listing
//! calls (ListShards, DescribeStreamSummary) gets a class, through the real
//! SDK client against an endpoint that answers with that error and its HTTP
//! status: an expired iterator (refreshed at the checkpoint), throttling
//! (the shard backs off alone; past the retries a transient failure), a
//! transient failure (the shard backs off alone), a subscription still open
//! or a consumer gone (enhanced fan-out), or a failure the worker cannot
//! ride out (it ends the run, naming the call and the code): not found,
//! denied, invalid, or a KMS key that cannot be used.
//!
//! The codes are those of each call's "Errors" section in the Amazon
//! Kinesis Data Streams API Reference (the same as the SDK's generated
//! error enums), plus `InternalFailure`, one of the errors common to all
//! actions (HTTP 500). `DryRunOperationException` answers a request that
//! asked for a dry run, which these calls never do: permanent if it came.

use crate::support::classes::{kinesis_at, of_error, of_read, quick_retries, Class};
use crate::support::common::ctx;
use shardkeeper::consumer::list_stream_shards;
use shardkeeper::consumer::retrieval::{IteratorStart, KinesisReads, SdkReads};
use shardkeeper::state::{kinesis_stream_summary, ShardId, StreamAddress};
use shardkeeper_local::{AwsService, FailingEndpoint};

/// Checks what every class but the retried ones must say: the failure names
/// its call, a permanent one its code, an unusable KMS key the stream's key.
fn check_message(call: &str, code: &str, class: Class, message: &str) {
    match class {
        Class::Permanent | Class::NotFound => {
            assert!(message.contains(code), "{call} {code}: {message}");
            assert!(message.contains(call), "{call} {code}: {message}");
        }
        Class::KmsKey => {
            assert!(message.contains(code), "{call} {code}: {message}");
            assert!(message.contains(call), "{call} {code}: {message}");
            assert!(
                message.contains("stream's KMS key"),
                "{call} {code}: {message}"
            );
        }
        _ => {}
    }
}

/// The KMS codes GetRecords and SubscribeToShard document for a stream
/// encrypted with a customer key that cannot be used: permanent, naming the
/// stream's key.
const KMS_KEY_ERRORS: [&str; 5] = [
    "KMSAccessDeniedException",
    "KMSDisabledException",
    "KMSInvalidStateException",
    "KMSNotFoundException",
    "KMSOptInRequired",
];

/// GetRecords is sent once, without the SDK's retries: the worker backs the
/// one shard off. Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetRecords.html#API_GetRecords_Errors>.
#[tokio::test]
async fn every_documented_get_records_error_has_its_class() {
    let ctx = ctx().await;
    let mut cases = vec![
        (400, "AccessDeniedException", Class::Permanent),
        (400, "DryRunOperationException", Class::Permanent),
        (400, "ExpiredIteratorException", Class::Expired),
        (500, "InternalFailureException", Class::Transient),
        (400, "InvalidArgumentException", Class::Permanent),
        // KMS throttles decrypting a stream encrypted with a customer key:
        // the shard backs off and reads again, as for its own throughput.
        (400, "KMSThrottlingException", Class::Throttled),
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        (400, "ResourceNotFoundException", Class::NotFound),
        (500, "InternalFailure", Class::Transient),
    ];
    cases.extend(KMS_KEY_ERRORS.map(|code| (400, code, Class::KmsKey)));
    let stream = StreamAddress::parse("orders").unwrap();
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, status, code)
            .await
            .unwrap();
        let reads = SdkReads::new(kinesis_at(&ctx, endpoint.url()));
        let error = reads
            .get_records(&stream, "AAAAAAAAAAE=", 100)
            .await
            .unwrap_err();
        assert_eq!(of_read(&error), expected, "{code}: {error}");
        check_message("GetRecords", code, expected, &error.to_string());
        assert_eq!(endpoint.hits(), 1, "{code}: sent once");
    }
}

/// GetShardIterator is sent once, as GetRecords is: throttled (5 a second
/// per shard) or failed in passing, the shard backs off alone and opens its
/// iterator again. Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_GetShardIterator.html#API_GetShardIterator_Errors>.
#[tokio::test]
async fn every_documented_get_shard_iterator_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        (400, "AccessDeniedException", Class::Permanent),
        (400, "DryRunOperationException", Class::Permanent),
        (500, "InternalFailureException", Class::Transient),
        (400, "InvalidArgumentException", Class::Permanent),
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        (400, "ResourceNotFoundException", Class::NotFound),
        (500, "InternalFailure", Class::Transient),
    ];
    let stream = StreamAddress::parse("orders").unwrap();
    let shard = ShardId::new("shardId-000000000000").unwrap();
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, status, code)
            .await
            .unwrap();
        let reads = SdkReads::new(kinesis_at(&ctx, endpoint.url()));
        let error = reads
            .shard_iterator(&stream, &shard, &IteratorStart::TrimHorizon)
            .await
            .unwrap_err();
        assert_eq!(of_read(&error), expected, "{code}: {error}");
        check_message("GetShardIterator", code, expected, &error.to_string());
        assert_eq!(endpoint.hits(), 1, "{code}: sent once");
    }
}

/// SubscribeToShard's answer (before any event arrives) fails with the
/// codes of
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html#API_SubscribeToShard_Errors>:
/// a subscription of the consumer to the shard still open (tried again
/// after 5 s), the consumer gone from Kinesis (its pool entry retired),
/// throttling (5 subscriptions a second per consumer; KMS) and internal
/// failures (the shard backs off), and the rest, which end the run. The
/// errors inside an open event stream are matched by variant
/// (`consumer::retrieval::sdk::tests::errors_inside_the_event_stream_are_told_apart_by_variant`).
#[tokio::test]
async fn every_documented_subscribe_to_shard_error_has_its_class() {
    let ctx = ctx().await;
    let mut cases = vec![
        (400, "AccessDeniedException", Class::Permanent),
        (400, "DryRunOperationException", Class::Permanent),
        (500, "InternalFailureException", Class::Transient),
        (400, "InvalidArgumentException", Class::Permanent),
        (400, "KMSThrottlingException", Class::Throttled),
        (400, "LimitExceededException", Class::Throttled),
        (400, "ResourceInUseException", Class::InUse),
        (400, "ResourceNotFoundException", Class::ConsumerGone),
    ];
    cases.extend(KMS_KEY_ERRORS.map(|code| (400, code, Class::KmsKey)));
    let consumer = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/pool-00:1";
    let shard = ShardId::new("shardId-000000000000").unwrap();
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, status, code)
            .await
            .unwrap();
        let reads = SdkReads::new(kinesis_at(&ctx, endpoint.url()));
        let error = match reads
            .subscribe(consumer, &shard, &IteratorStart::TrimHorizon)
            .await
        {
            Ok(_) => panic!("{code}: subscribed"),
            Err(error) => error,
        };
        assert_eq!(of_read(&error), expected, "{code}: {error}");
        check_message("SubscribeToShard", code, expected, &error.to_string());
        assert_eq!(endpoint.hits(), 1, "{code}: sent once");
    }
}

/// The listing calls (shard discovery's ListShards, the stream's
/// DescribeStreamSummary) are retried by the policy, its attempts the only
/// ones, when throttled (Kinesis limits them with `LimitExceededException`:
/// ListShards 1,000 a second per stream, DescribeStreamSummary 20) or when
/// the service failed (`InternalFailure`, HTTP 500); past the retries that
/// is transient. A stream still being created (ListShards'
/// `ResourceInUseException`) or an expired pagination token is transient
/// too, for the caller's next tick. Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_ListShards.html#API_ListShards_Errors>
/// and
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamSummary.html#API_DescribeStreamSummary_Errors>.
#[tokio::test]
async fn every_documented_listing_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        ("ListShards", 400, "AccessDeniedException", Class::Permanent),
        (
            "ListShards",
            400,
            "ExpiredNextTokenException",
            Class::Transient,
        ),
        (
            "ListShards",
            400,
            "InvalidArgumentException",
            Class::Permanent,
        ),
        (
            "ListShards",
            400,
            "LimitExceededException",
            Class::Throttled,
        ),
        (
            "ListShards",
            400,
            "ResourceInUseException",
            Class::Transient,
        ),
        (
            "ListShards",
            400,
            "ResourceNotFoundException",
            Class::NotFound,
        ),
        ("ListShards", 500, "InternalFailure", Class::Transient),
        (
            "DescribeStreamSummary",
            400,
            "AccessDeniedException",
            Class::Permanent,
        ),
        (
            "DescribeStreamSummary",
            400,
            "InvalidArgumentException",
            Class::Permanent,
        ),
        (
            "DescribeStreamSummary",
            400,
            "LimitExceededException",
            Class::Throttled,
        ),
        (
            "DescribeStreamSummary",
            400,
            "ResourceNotFoundException",
            Class::NotFound,
        ),
        (
            "DescribeStreamSummary",
            500,
            "InternalFailure",
            Class::Transient,
        ),
    ];
    let stream = StreamAddress::parse("orders").unwrap();
    let retry = quick_retries(3);
    for (call, status, code, expected) in cases {
        let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, status, code)
            .await
            .unwrap();
        let kinesis = kinesis_at(&ctx, endpoint.url());
        let error: shardkeeper::Error = match call {
            "ListShards" => list_stream_shards(&kinesis, &stream, &retry)
                .await
                .unwrap_err(),
            _ => kinesis_stream_summary(&kinesis, &stream, &retry)
                .await
                .unwrap_err()
                .into(),
        };
        assert_eq!(of_error(&error), expected, "{call} {code}: {error}");
        let message = error.to_string();
        if expected == Class::NotFound && call == "DescribeStreamSummary" {
            assert!(message.contains("stream orders"), "{message}");
        } else {
            check_message(call, code, expected, &message);
        }
        let attempts = if expected == Class::Throttled || status == 500 {
            3
        } else {
            1
        };
        assert_eq!(endpoint.hits(), attempts, "{call} {code}");
        if matches!(expected, Class::Throttled | Class::Transient) {
            assert!(error.is_transient(), "{call} {code}");
        }
    }
}

/// What the library builds on a team's Kinesis client (made as
/// `aws_sdk_kinesis::Client::new` makes it, with the SDK's standard
/// retries) sends without the SDK's retries: the rebalancer's ListShards,
/// throttled, exactly the store policy's attempts (not the SDK's three
/// under each), and a worker's GetShardIterator once a step (its shard
/// backs off alone and the step goes on).
#[tokio::test]
async fn a_teams_kinesis_client_gets_one_retry_budget() {
    use crate::support::common::{create_stream, lease, seed_shards, start_group};
    use crate::support::consume::worker;
    use shardkeeper::functions::Rebalancer;
    use shardkeeper::group::RebalanceConfig;
    use shardkeeper::state::StateStore;
    use std::sync::Arc;

    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let config = ctx.store(&stream).config().clone().retry(quick_retries(4));
    let store = StateStore::with_clock(
        ctx.aws.dynamodb.clone(),
        config,
        Arc::new(ctx.clock.clone()),
    );
    start_group(&ctx, &store).await;
    let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, 400, "LimitExceededException")
        .await
        .unwrap();
    let counter = shardkeeper_local::RequestCounter::new();
    let kinesis = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&ctx.aws.config)
            .endpoint_url(endpoint.url())
            .retry_config(
                aws_sdk_kinesis::config::retry::RetryConfig::standard().with_max_attempts(3),
            )
            .interceptor(counter.clone())
            .build(),
    );
    let sent = |operation: &str| counter.snapshot().get(operation).map_or(0, |c| c.requests);

    let rebalancer = Rebalancer::new(store.clone(), kinesis.clone(), RebalanceConfig::default());
    let _ = rebalancer.tick().await;
    assert_eq!(sent("ListShards"), 4, "the store policy's attempts");

    let shard = seed_shards(&store, 1).await.remove(0);
    lease(&store, &shard, "w").await;
    let mut worker = worker(&store, &kinesis, "w", Default::default());
    worker.step().await.unwrap();
    assert_eq!(sent("GetShardIterator"), 1, "sent once, not retried");
}
