//! Error codes and what they mean for a call: throttling, a server fault,
//! a KMS key the stream cannot use, a transient fault worth sending again,
//! a lost condition; and the typed error a call's failure becomes.

use crate::error::{Service, StateError};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Error codes that mean "slow down" on DynamoDB, Kinesis and Lambda: the
/// call is retried with backoff, then reported as [`StateError::Throttled`]
/// (transient). `LimitExceededException` is Kinesis' throttling of its
/// listing and control-plane calls (and DynamoDB Streams' of GetRecords),
/// except from RegisterStreamConsumer, where past the retries it is the
/// stream's quota of enhanced fan-out consumers ([`StateError::EfoQuota`]).
/// `KMSThrottlingException` is KMS throttling the decryption (or encryption)
/// of a stream encrypted with a customer key.
pub fn is_throttling_code(code: &str) -> bool {
    matches!(
        code,
        "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "Throttling"
            | "RequestLimitExceeded"
            | "LimitExceededException"
            | "TooManyRequestsException"
            | "KMSThrottlingException"
            | "EC2ThrottledException"
    )
}

/// Error codes that mean the service failed on its side, so the same call
/// may succeed when sent again: DynamoDB's `InternalServerError`, Kinesis'
/// `InternalFailure` (common to all actions) and `InternalFailureException`
/// (modelled for GetRecords, GetShardIterator, PutRecord and
/// SubscribeToShard), Lambda's `ServiceException`, and the common 503s and
/// timeouts.
pub fn is_server_fault_code(code: &str) -> bool {
    matches!(
        code,
        "InternalServerError"
            | "InternalFailure"
            | "InternalFailureException"
            | "ServiceException"
            | "ServiceUnavailable"
            | "ServiceUnavailableException"
            | "RequestTimeout"
            | "RequestTimeoutException"
    )
}

/// Error codes that mean a KMS key the call needs cannot be used: the
/// stream's for Kinesis, the function's for Lambda. Nothing changes until
/// the key or its policy is fixed ([`StateError::KmsKey`]).
pub fn is_kms_key_code(code: &str) -> bool {
    matches!(
        code,
        "KMSDisabledException"
            | "KMSInvalidStateException"
            | "KMSAccessDeniedException"
            | "KMSNotFoundException"
            | "KMSOptInRequired"
    )
}

/// `true` when the error `code` of `service`'s `operation` means the same
/// call may succeed when sent again later: the service's own failures
/// ([`is_server_fault_code`]), and what AWS documents as busy for a moment:
/// - DynamoDB: an item in another transaction (`TransactionConflictException`),
///   a transaction with the same token still running
///   (`TransactionInProgressException`), a write conflicting in another
///   region of a global table (`ReplicatedWriteConflictException`), a
///   table being updated while its TTL or tags are set
///   (`ResourceInUseException` of UpdateTimeToLive and TagResource);
/// - Kinesis ListShards: a stream not ACTIVE yet (`ResourceInUseException`),
///   a pagination token expired (`ExpiredNextTokenException`; the listing
///   starts again);
/// - Lambda Invoke: a function being created, updated or set up
///   (`ResourceConflictException`, `ResourceNotReadyException`,
///   `SnapStartNotReadyException`, `ENINotReadyException`,
///   `CodeArtifactUserPendingException`) and EC2 failing unexpectedly
///   while setting it up (`EC2UnexpectedException`).
///
/// Throttling is not here: it is [`is_throttling_code`], retried first.
pub fn is_transient_code(service: Service, operation: &str, code: &str) -> bool {
    if is_server_fault_code(code) {
        return true;
    }
    match service {
        Service::DynamoDb => {
            matches!(
                code,
                "TransactionConflictException"
                    | "TransactionInProgressException"
                    | "ReplicatedWriteConflictException"
            ) || (matches!(operation, "UpdateTimeToLive" | "TagResource")
                && code == "ResourceInUseException")
        }
        Service::Kinesis => {
            operation == "ListShards"
                && matches!(code, "ResourceInUseException" | "ExpiredNextTokenException")
        }
        Service::Lambda => matches!(
            code,
            "ResourceConflictException"
                | "ResourceNotReadyException"
                | "SnapStartNotReadyException"
                | "ENINotReadyException"
                | "CodeArtifactUserPendingException"
                | "EC2UnexpectedException"
        ),
    }
}

/// The code a failure without an AWS error code is reported with when it is
/// no passing fault: the SDK could not build or send the request for a
/// reason of the caller's (a construction failure, a connector's "user"
/// error: an invalid request), or an answer refused it (a 4xx status) without
/// naming an AWS error (a proxy's or a gateway's page). Sent again it fails
/// again, so it is not transient. A failure without a code otherwise is no
/// answer at all (an attempt that timed out, a connection that failed, an
/// answer that could not be read): the only failures without a code that
/// [`StateError::is_transient`] rides out.
pub const REFUSED_WITHOUT_CODE: &str = "RefusedWithoutCode";

/// A service error as a [`StateError`], once `attempts` attempts were made:
/// throttling is [`StateError::Throttled`] (but a registration refused past
/// the retries is [`StateError::EfoQuota`]), an unusable KMS key
/// [`StateError::KmsKey`], anything else [`StateError::Sdk`] with its code.
pub(crate) fn service_error(
    service: Service,
    operation: &'static str,
    code: Option<String>,
    message: String,
    attempts: u32,
) -> StateError {
    match code.as_deref() {
        Some("LimitExceededException")
            if service == Service::Kinesis && operation == "RegisterStreamConsumer" =>
        {
            StateError::EfoQuota { attempts, message }
        }
        Some(c) if is_throttling_code(c) => StateError::Throttled {
            service,
            operation,
            attempts,
            message,
        },
        Some(c) if is_kms_key_code(c) => StateError::KmsKey {
            service,
            operation,
            code: c.to_owned(),
            message,
        },
        _ => StateError::Sdk {
            service,
            operation,
            code,
            message,
        },
    }
}

/// What a failed call was, once retries are done.
#[derive(Debug)]
pub(crate) enum CallError<E> {
    /// The request's condition expression (or a transaction's condition) failed.
    Condition(E),
    /// Anything else, already classified.
    Failed(StateError),
}

impl<E> From<StateError> for CallError<E> {
    fn from(e: StateError) -> Self {
        CallError::Failed(e)
    }
}

pub(super) fn is_condition_failure(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("ConditionalCheckFailedException") | Some("TransactionCanceledException")
    )
}

/// A Kinesis error taken as it is (one attempt, no retry), classified as
/// the retried calls' errors are: throttling, an unusable KMS key, or
/// another error with its code, and its message with every cause.
pub fn kinesis_error(
    operation: &'static str,
    err: &(impl ProvideErrorMetadata + std::error::Error),
) -> StateError {
    service_error(
        Service::Kinesis,
        operation,
        err.code().map(str::to_owned),
        error_chain(err),
        1,
    )
}

/// A Kinesis error whose code is known apart from its metadata (the
/// modelled errors inside an event stream carry none), classified as
/// [`kinesis_error`] does.
pub fn kinesis_coded_error(
    operation: &'static str,
    code: &str,
    err: &dyn std::error::Error,
) -> StateError {
    service_error(
        Service::Kinesis,
        operation,
        Some(code.to_owned()),
        error_chain(err),
        1,
    )
}

/// Flattens an error and its sources into one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
