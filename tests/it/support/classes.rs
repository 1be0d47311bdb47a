//! The class of a failed AWS call, as the tables of documented errors name
//! it, and SDK clients that send every request once to an endpoint (no SDK
//! retries), so a table's rows stay quick and their attempts countable.

use crate::support::common::Ctx;
use shardkeeper::consumer::retrieval::ReadError;
use shardkeeper::ddb_streams::StreamsError;
use shardkeeper::state::StateError;

/// What the caller does about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Get a new iterator at the last position read.
    Expired,
    /// The position is behind the trim horizon.
    Trimmed,
    /// Back off and send again (past the retries: transient).
    Throttled,
    /// Send again later: the service failed, or the resource is busy.
    Transient,
    /// The stream, shard, table or function is not there (permanent).
    NotFound,
    /// A second subscription of the consumer to the shard (tried again after 5 s).
    InUse,
    /// The enhanced fan-out consumer is gone from Kinesis (its pool entry is retired).
    ConsumerGone,
    /// The lease (or EFO lock) is no longer the caller's.
    LeaseLost,
    /// The stream's quota of enhanced fan-out consumers (permanent).
    EfoQuota,
    /// A KMS key that cannot be used (permanent).
    KmsKey,
    /// Denied, invalid or otherwise refused for good: stop, naming the call.
    Permanent,
}

/// The class of a state store error (every AWS call made through the
/// state crate's retries ends as one).
pub fn of_state(e: &StateError) -> Class {
    match e {
        StateError::Throttled { .. } => Class::Throttled,
        StateError::EfoQuota { .. } => Class::EfoQuota,
        StateError::KmsKey { .. } => Class::KmsKey,
        StateError::LeaseLost { .. } => Class::LeaseLost,
        StateError::NotFound { .. } => Class::NotFound,
        StateError::Sdk {
            code: Some(code), ..
        } if code == "ResourceNotFoundException" => Class::NotFound,
        e if e.is_transient() => Class::Transient,
        _ => Class::Permanent,
    }
}

/// The class of the crate's error.
pub fn of_error(e: &shardkeeper::Error) -> Class {
    match e {
        shardkeeper::Error::State(e) => of_state(e),
        shardkeeper::Error::Streams { error, .. } => of_streams(error),
        e if e.is_transient() => Class::Transient,
        _ => Class::Permanent,
    }
}

/// The class of a Kinesis read's error.
pub fn of_read(e: &ReadError) -> Class {
    match e {
        ReadError::ExpiredIterator => Class::Expired,
        ReadError::Throttled { .. } => Class::Throttled,
        ReadError::SubscriptionInUse(_) => Class::InUse,
        ReadError::ConsumerGone(_) => Class::ConsumerGone,
        ReadError::Failed(e) => of_error(e),
    }
}

/// The class of a DynamoDB Streams call's error.
pub fn of_streams(e: &StreamsError) -> Class {
    match e {
        StreamsError::ExpiredIterator(_) => Class::Expired,
        StreamsError::TrimmedData(_) => Class::Trimmed,
        StreamsError::Throttled(_) => Class::Throttled,
        StreamsError::ResourceNotFound(_) => Class::NotFound,
        e if e.is_transient() => Class::Transient,
        _ => Class::Permanent,
    }
}

/// A Kinesis client of `url` that sends each request once.
pub fn kinesis_at(ctx: &Ctx, url: &str) -> aws_sdk_kinesis::Client {
    aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&ctx.aws.config)
            .endpoint_url(url)
            .retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// A DynamoDB client of `url` that sends each request once.
pub fn dynamodb_at(ctx: &Ctx, url: &str) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&ctx.aws.config)
            .endpoint_url(url)
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// A DynamoDB Streams client of `url` that sends each request once.
pub fn streams_at(ctx: &Ctx, url: &str) -> aws_sdk_dynamodbstreams::Client {
    aws_sdk_dynamodbstreams::Client::from_conf(
        aws_sdk_dynamodbstreams::config::Builder::from(&ctx.aws.config)
            .endpoint_url(url)
            .retry_config(aws_sdk_dynamodbstreams::config::retry::RetryConfig::disabled())
            .build(),
    )
}

/// The AWS configuration of the tests, for `url`, sending each request once
/// (for what builds its own client from an `SdkConfig`).
pub fn config_at(ctx: &Ctx, url: &str) -> aws_config::SdkConfig {
    ctx.aws
        .config
        .to_builder()
        .endpoint_url(url)
        .retry_config(aws_smithy_types::retry::RetryConfig::disabled())
        .build()
}

/// A retry policy of `attempts` attempts with short pauses.
pub fn quick_retries(attempts: u32) -> shardkeeper::state::RetryPolicy {
    shardkeeper::state::RetryPolicy::default()
        .max_attempts(attempts)
        .base_delay(std::time::Duration::from_millis(1))
        .max_delay(std::time::Duration::from_millis(5))
}

/// A Kinesis client of the test servers that sends each request once,
/// counting its requests by operation.
pub fn counted_kinesis(ctx: &Ctx) -> (aws_sdk_kinesis::Client, shardkeeper_local::RequestCounter) {
    let counter = shardkeeper_local::RequestCounter::new();
    let mut config = aws_sdk_kinesis::config::Builder::from(&ctx.aws.config)
        .retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
        .interceptor(counter.clone());
    if let Some(url) = &ctx.aws.endpoints.kinesis {
        config = config.endpoint_url(url);
    }
    (aws_sdk_kinesis::Client::from_conf(config.build()), counter)
}
