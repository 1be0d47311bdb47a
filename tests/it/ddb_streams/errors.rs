//! Every error the DynamoDB Streams API reference documents for the calls
//! the reader makes (DescribeStream, GetShardIterator, GetRecords) gets its
//! `StreamsError` class, through the real SDK client against an endpoint
//! that answers with that error and its HTTP status: an expired iterator
//! (replaced after the last record read), trimmed data (the shard restarts
//! at TRIM_HORIZON, or `OnTrimmed::Fail`), throttling (retried by the
//! reader's policy, then transient), a transient failure (retried the same
//! way), not found (a shard or stream gone), or
//! a failure that stops the reader (denied, invalid), with its code.
//!
//! The codes are each call's "Errors" section in the Amazon DynamoDB Streams
//! API Reference (the SDK's generated error enums), plus three of the errors
//! common to all actions: `AccessDeniedException`, `ThrottlingException`
//! (both HTTP 400) and `ServiceUnavailable` (HTTP 503).

use crate::support::classes::{of_streams, streams_at, Class};
use crate::support::common::ctx;
use shardkeeper::ddb_streams::{StreamsClient, StreamsError, StreamsIteratorStart};
use shardkeeper_local::FailingEndpoint;

const STREAM_ARN: &str =
    "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2024-01-01T00:00:00.000";

/// A client of `url` with the SDK's standard retries (three attempts), as
/// `aws_sdk_dynamodbstreams::Client::new` makes one: the reader's requests
/// are sent once all the same.
fn with_sdk_retries(
    ctx: &crate::support::common::Ctx,
    url: &str,
) -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::from_conf(
        streams_at(ctx, url)
            .config()
            .to_builder()
            .retry_config(
                aws_sdk_dynamodbstreams::config::retry::RetryConfig::standard()
                    .with_max_attempts(3),
            )
            .build(),
    )
}

/// One call of `call` on `client`.
async fn send(client: &aws_sdk_dynamodbstreams::Client, call: &str) -> Result<(), StreamsError> {
    match call {
        "DescribeStream" => StreamsClient::describe_stream(client, STREAM_ARN, None)
            .await
            .map(drop),
        "GetShardIterator" => StreamsClient::get_shard_iterator(
            client,
            STREAM_ARN,
            "shardId-00000001700000000000-00000000",
            &StreamsIteratorStart::TrimHorizon,
        )
        .await
        .map(drop),
        "GetRecords" => StreamsClient::get_records(client, "iterator", Some(100))
            .await
            .map(drop),
        other => panic!("no call {other}"),
    }
}

/// Codes from
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_DescribeStream.html#API_streams_DescribeStream_Errors>,
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_GetShardIterator.html#API_streams_GetShardIterator_Errors>
/// and
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_streams_GetRecords.html#API_streams_GetRecords_Errors>
/// (GetRecords is throttled with `LimitExceededException`), and the common
/// errors.
#[tokio::test]
async fn every_documented_dynamodb_streams_error_has_its_class() {
    let ctx = ctx().await;
    let mut cases = vec![
        (
            "DescribeStream",
            500,
            "InternalServerError",
            Class::Transient,
        ),
        (
            "DescribeStream",
            400,
            "ResourceNotFoundException",
            Class::NotFound,
        ),
        (
            "GetShardIterator",
            500,
            "InternalServerError",
            Class::Transient,
        ),
        (
            "GetShardIterator",
            400,
            "ResourceNotFoundException",
            Class::NotFound,
        ),
        (
            "GetShardIterator",
            400,
            "TrimmedDataAccessException",
            Class::Trimmed,
        ),
        (
            "GetRecords",
            400,
            "ExpiredIteratorException",
            Class::Expired,
        ),
        ("GetRecords", 500, "InternalServerError", Class::Transient),
        (
            "GetRecords",
            400,
            "LimitExceededException",
            Class::Throttled,
        ),
        (
            "GetRecords",
            400,
            "ResourceNotFoundException",
            Class::NotFound,
        ),
        (
            "GetRecords",
            400,
            "TrimmedDataAccessException",
            Class::Trimmed,
        ),
    ];
    for call in ["DescribeStream", "GetShardIterator", "GetRecords"] {
        cases.push((call, 400, "AccessDeniedException", Class::Permanent));
        cases.push((call, 400, "ThrottlingException", Class::Throttled));
        cases.push((call, 503, "ServiceUnavailable", Class::Transient));
    }
    for (call, status, code, expected) in cases {
        let endpoint = FailingEndpoint::start(status, code).await.unwrap();
        let client = with_sdk_retries(&ctx, endpoint.url());
        let error = send(&client, call).await.unwrap_err();
        assert_eq!(of_streams(&error), expected, "{call} {code}: {error}");
        assert_eq!(
            error.is_transient(),
            matches!(
                expected,
                Class::Throttled | Class::Transient | Class::Expired
            ),
            "{call} {code}"
        );
        assert!(error.to_string().contains(code), "{call} {code}: {error}");
        assert_eq!(endpoint.hits(), 1, "{call} {code}: sent once");
    }
}

/// The reader retries a failed call by the store's policy, and those are
/// all the attempts: a DescribeStream answered 503 every time is sent the
/// policy's three, not three SDK attempts under each, then ends the batch
/// with a transient error.
#[tokio::test]
async fn the_readers_calls_have_one_retry_budget() {
    use crate::support::classes::quick_retries;
    use shardkeeper::ddb_streams::{ReaderConfig, StreamReader};
    use shardkeeper::state::StateStore;
    let ctx = ctx().await;
    let endpoint = FailingEndpoint::start(503, "ServiceUnavailable")
        .await
        .unwrap();
    let client = with_sdk_retries(&ctx, endpoint.url());
    let config = ctx.store("orders").config().clone().retry(quick_retries(3));
    let store = StateStore::new(ctx.aws.dynamodb.clone(), config);
    let mut reader = StreamReader::new(client, store, STREAM_ARN, ReaderConfig::default());
    let error = reader.next_batch().await.unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert_eq!(endpoint.hits(), 3, "the policy's attempts, no more");
}
