//! Every error the Kinesis API reference documents for GetRecords gets a
//! class, through the real SDK client against an endpoint that answers with
//! that error: an expired iterator (refreshed at the checkpoint), throttling
//! (the shard backs off alone), a transient failure (the shard backs off
//! alone), or a failure the worker cannot ride out (it ends the run, with
//! the code).
//!
//! The codes are those of the "Errors" sections of GetRecords and
//! GetShardIterator in the Amazon Kinesis Data Streams API Reference, plus
//! `InternalFailure`, one of the errors common to all actions (HTTP 500).

use crate::support::common::ctx;
use shardkeeper::consumer::reads::{IteratorStart, KinesisReads, ReadError, SdkReads};
use shardkeeper::state::{RetryPolicy, ShardId, StreamAddress};
use shardkeeper_local::FailingEndpoint;
use std::time::Duration;

#[derive(Debug, PartialEq)]
enum Class {
    Expired,
    Throttled,
    Transient,
    Fatal,
}

fn class(error: &ReadError) -> Class {
    match error {
        ReadError::ExpiredIterator => Class::Expired,
        ReadError::Throttled(_) => Class::Throttled,
        ReadError::Failed(e) if e.is_transient() => Class::Transient,
        _ => Class::Fatal,
    }
}

#[tokio::test]
async fn every_documented_get_records_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        (400, "ExpiredIteratorException", Class::Expired),
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        // KMS throttles decrypting a stream encrypted with a customer key:
        // the shard backs off and reads again, as for its own throughput.
        (400, "KMSThrottlingException", Class::Throttled),
        (500, "InternalFailure", Class::Transient),
        (400, "AccessDeniedException", Class::Fatal),
        (400, "InvalidArgumentException", Class::Fatal),
        (400, "ResourceNotFoundException", Class::Fatal),
        (400, "KMSAccessDeniedException", Class::Fatal),
        (400, "KMSDisabledException", Class::Fatal),
        (400, "KMSInvalidStateException", Class::Fatal),
        (400, "KMSNotFoundException", Class::Fatal),
        (400, "KMSOptInRequired", Class::Fatal),
    ];
    let stream = StreamAddress::parse("orders").unwrap();
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start(status, code).await.unwrap();
        let client = aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::config::Builder::from(&ctx.aws.config)
                .endpoint_url(endpoint.url())
                .build(),
        );
        let reads = SdkReads::new(client, RetryPolicy::default());
        let error = reads
            .get_records(&stream, "AAAAAAAAAAE=", 100)
            .await
            .unwrap_err();
        assert_eq!(class(&error), expected, "{code}: {error}");
        if expected == Class::Fatal {
            assert!(error.to_string().contains(code), "{code}: {error}");
        }
    }
}

/// GetShardIterator is retried when throttled (it opens a read, so a shard
/// waits for it); throttling that outlasts the retries is a transient
/// failure: the shard backs off and opens its iterator again.
#[tokio::test]
async fn every_documented_get_shard_iterator_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Transient,
        ),
        (500, "InternalFailure", Class::Transient),
        (400, "AccessDeniedException", Class::Fatal),
        (400, "InvalidArgumentException", Class::Fatal),
        (400, "ResourceNotFoundException", Class::Fatal),
    ];
    let stream = StreamAddress::parse("orders").unwrap();
    let shard = ShardId::new("shardId-000000000000").unwrap();
    let retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start(status, code).await.unwrap();
        let client = aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::config::Builder::from(&ctx.aws.config)
                .endpoint_url(endpoint.url())
                .retry_config(aws_sdk_kinesis::config::retry::RetryConfig::disabled())
                .build(),
        );
        let reads = SdkReads::new(client, retry);
        let error = reads
            .shard_iterator(&stream, &shard, &IteratorStart::TrimHorizon)
            .await
            .unwrap_err();
        assert_eq!(class(&error), expected, "{code}: {error}");
        assert!(error.to_string().contains(code), "{code}: {error}");
    }
}
