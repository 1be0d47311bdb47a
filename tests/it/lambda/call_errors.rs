//! Every error the API references document for the AWS calls of the
//! functions outside the reads and the state table gets a class, through
//! the real SDK clients against an endpoint that answers with that error and
//! its HTTP status: Lambda's Invoke (the rebalancer's fleet starts shard
//! workers with it) and Kinesis' PutRecord (a record parked on a dead-letter
//! stream). Throttling and the service's own failures (HTTP 500) are
//! retried by the call's policy, its attempts the only ones (the clients do
//! not retry), then transient; another transient failure is tried again at
//! the next tick (a fleet start) or reported as a failed park;
//! the rest are permanent and name the call and the code.

use crate::support::classes::{config_at, kinesis_at, of_error, quick_retries, Class};
use crate::support::common::ctx;
use aws_smithy_types::retry::RetryConfig;
use shardkeeper::functions::{LambdaStarter, StartWorkers};
use shardkeeper::state::{call_kinesis, ForStream, StreamAddress};
use shardkeeper_local::{AwsService, FailingEndpoint};

/// The rebalancer starts shard workers with asynchronous Invokes
/// (`InvocationType=Event`). Codes and statuses from
/// <https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html#API_Invoke_Errors>:
/// throttled are `TooManyRequestsException` and `EC2ThrottledException`;
/// transient the service's own failure (`ServiceException`) and a function
/// being created, updated or set up (`ResourceConflictException`,
/// `ResourceNotReadyException`, `SnapStartNotReadyException`,
/// `ENINotReadyException`, `CodeArtifactUserPendingException`,
/// `EC2UnexpectedException`); an unusable KMS key of the function's
/// environment is `StateError::KmsKey`; the rest (a missing function, bad
/// input, a function whose set-up is broken) are permanent. A fleet start
/// that fails is logged and tried again at the next tick whatever its class.
#[tokio::test]
async fn every_documented_invoke_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        (409, "CodeArtifactUserDeletedException", Class::Permanent),
        (409, "CodeArtifactUserFailedException", Class::Permanent),
        (409, "CodeArtifactUserPendingException", Class::Transient),
        (
            409,
            "DurableExecutionAlreadyStartedException",
            Class::Permanent,
        ),
        (502, "EC2AccessDeniedException", Class::Permanent),
        (502, "EC2ThrottledException", Class::Throttled),
        (502, "EC2UnexpectedException", Class::Transient),
        (410, "EFSIOException", Class::Permanent),
        (408, "EFSMountConnectivityException", Class::Permanent),
        (403, "EFSMountFailureException", Class::Permanent),
        (408, "EFSMountTimeoutException", Class::Permanent),
        (502, "ENILimitReachedException", Class::Permanent),
        (502, "ENINotReadyException", Class::Transient),
        (400, "InvalidParameterValueException", Class::Permanent),
        (400, "InvalidRequestContentException", Class::Permanent),
        (502, "InvalidRuntimeException", Class::Permanent),
        (502, "InvalidSecurityGroupIDException", Class::Permanent),
        (502, "InvalidSubnetIDException", Class::Permanent),
        (502, "InvalidZipFileException", Class::Permanent),
        (502, "KMSAccessDeniedException", Class::KmsKey),
        (502, "KMSDisabledException", Class::KmsKey),
        (502, "KMSInvalidStateException", Class::KmsKey),
        (502, "KMSNotFoundException", Class::KmsKey),
        (400, "ModeNotSupportedException", Class::Permanent),
        (404, "NoPublishedVersionException", Class::Permanent),
        (400, "RecursiveInvocationException", Class::Permanent),
        (413, "RequestTooLargeException", Class::Permanent),
        (409, "ResourceConflictException", Class::Transient),
        (404, "ResourceNotFoundException", Class::NotFound),
        (502, "ResourceNotReadyException", Class::Transient),
        (408, "S3FilesMountConnectivityException", Class::Permanent),
        (403, "S3FilesMountFailureException", Class::Permanent),
        (408, "S3FilesMountTimeoutException", Class::Permanent),
        (
            413,
            "SerializedRequestEntityTooLargeException",
            Class::Permanent,
        ),
        (500, "ServiceException", Class::Transient),
        (400, "ServiceQuotaExceededException", Class::Permanent),
        (400, "SnapStartException", Class::Permanent),
        (409, "SnapStartNotReadyException", Class::Transient),
        (
            409,
            "SnapStartRegenerationFailureException",
            Class::Permanent,
        ),
        (408, "SnapStartTimeoutException", Class::Permanent),
        (
            502,
            "SubnetIPAddressLimitReachedException",
            Class::Permanent,
        ),
        (429, "TooManyRequestsException", Class::Throttled),
        (415, "UnsupportedMediaTypeException", Class::Permanent),
    ];
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start(status, code).await.unwrap();
        // The SDK's standard retries in the configuration: the starter's
        // client does not use them, its policy is the one budget.
        let config = config_at(&ctx, endpoint.url())
            .to_builder()
            .retry_config(RetryConfig::standard().with_max_attempts(3))
            .build();
        let starter = LambdaStarter::new(&config, "shard-worker".to_owned(), quick_retries(3));
        let error = starter.start(1).await.unwrap_err();
        assert_eq!(of_error(&error), expected, "{code}: {error}");
        let message = error.to_string();
        assert!(message.contains("Lambda Invoke"), "{code}: {message}");
        if expected == Class::Throttled || status == 500 {
            assert_eq!(endpoint.hits(), 3, "{code}: the policy's attempts");
        } else {
            assert_eq!(endpoint.hits(), 1, "{code}: not retried");
        }
        match expected {
            Class::Throttled | Class::Transient => assert!(error.is_transient(), "{code}"),
            Class::KmsKey => {
                assert!(message.contains("function's KMS key"), "{message}");
                assert!(!error.is_transient(), "{code}");
            }
            _ => {
                assert!(message.contains(code), "{code}: {message}");
                assert!(!error.is_transient(), "{code}");
            }
        }
    }
}

/// A record parked on a dead-letter stream is one PutRecord, retried when
/// throttled (`call_kinesis`, as parking sends it). Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecord.html#API_PutRecord_Errors>:
/// KMS throttling is throttling; a KMS key that cannot be used is
/// `StateError::KmsKey`.
#[tokio::test]
async fn every_documented_put_record_error_has_its_class() {
    let ctx = ctx().await;
    let cases = [
        (400, "AccessDeniedException", Class::Permanent),
        (400, "DryRunOperationException", Class::Permanent),
        (500, "InternalFailureException", Class::Transient),
        (400, "InvalidArgumentException", Class::Permanent),
        (400, "KMSAccessDeniedException", Class::KmsKey),
        (400, "KMSDisabledException", Class::KmsKey),
        (400, "KMSInvalidStateException", Class::KmsKey),
        (400, "KMSNotFoundException", Class::KmsKey),
        (400, "KMSOptInRequired", Class::KmsKey),
        (400, "KMSThrottlingException", Class::Throttled),
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        (400, "ResourceNotFoundException", Class::NotFound),
        (500, "InternalFailure", Class::Transient),
    ];
    let stream = StreamAddress::parse("dead-letters").unwrap();
    let retry = quick_retries(3);
    for (status, code, expected) in cases {
        let endpoint = FailingEndpoint::start_as(AwsService::Kinesis, status, code)
            .await
            .unwrap();
        let kinesis = kinesis_at(&ctx, endpoint.url());
        let req = kinesis
            .put_record()
            .for_stream(&stream)
            .partition_key("k")
            .data(aws_sdk_kinesis::primitives::Blob::new("{}"));
        let error: shardkeeper::Error = call_kinesis(&retry, "PutRecord", || req.clone().send())
            .await
            .unwrap_err()
            .into();
        assert_eq!(of_error(&error), expected, "{code}: {error}");
        let message = error.to_string();
        assert!(message.contains("PutRecord"), "{code}: {message}");
        if expected == Class::Throttled || status == 500 {
            assert_eq!(endpoint.hits(), 3, "{code}: the policy's attempts");
        } else {
            assert_eq!(endpoint.hits(), 1, "{code}: not retried");
        }
        match expected {
            Class::Throttled | Class::Transient => assert!(error.is_transient(), "{code}"),
            Class::KmsKey => assert!(message.contains("stream's KMS key"), "{message}"),
            _ => assert!(message.contains(code), "{code}: {message}"),
        }
    }
}
