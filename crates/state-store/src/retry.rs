//! Bounded retries with capped exponential backoff and full jitter, for throttling.
//!
//! The AWS SDK retries transient errors itself; what survives its retries and is
//! still throttling is retried here a bounded number of times, so a hot table
//! slows the consumers down instead of failing them at once. Everything else
//! goes back to the caller classified: a lost condition, a throttle that never
//! cleared, or another service error.
//!
//! The backoff itself ([`Backoff`]) is the one every pause after a failure
//! uses, here and in the main crate's readers, each with its own base, cap
//! and jitter.

use crate::error::{Service, StateError};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use std::future::Future;
use std::time::Duration;

/// How a backoff's delay is spread around its capped value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// Not at all: the delay is the capped value, for a pause that must last
    /// at least that long.
    None,
    /// Full jitter: drawn uniformly from zero to the capped value (whole
    /// milliseconds), so callers that failed together spread out.
    Full,
    /// Up to half more: drawn from the capped value to one and a half times
    /// it, so callers spread out yet never come back sooner than the value.
    UpToHalfMore,
}

/// A capped exponential backoff with jitter: after `attempt` failures in a
/// row (1-based) the delay is `base * 2^(attempt-1)`, at most `max`, spread
/// as `jitter` says. The one backoff of the state store's throttling retries
/// ([`RetryPolicy::backoff`]), the shard worker's throttled and failed reads
/// and the DynamoDB Streams reader's failing shards, each with its own
/// parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first failure; it doubles with each failure after.
    pub base: Duration,
    /// The delay never grows past this (before jitter).
    pub max: Duration,
    /// How the delay is spread.
    pub jitter: Jitter,
}

impl Backoff {
    /// The delay before jitter after `attempt` failures in a row (1-based):
    /// `min(max, base * 2^(attempt-1))`.
    pub fn cap(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(20);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The delay after `attempt` failures in a row (1-based), jittered.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self.cap(attempt);
        match self.jitter {
            Jitter::None => cap,
            Jitter::Full => Duration::from_millis(fastrand::u64(0..=cap.as_millis() as u64)),
            Jitter::UpToHalfMore => cap + cap.mul_f64(fastrand::f64() / 2.0),
        }
    }
}

/// How often and how long to retry a throttled or failed request: the one
/// retry budget of every AWS call the library makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// The backoff before the second attempt; it doubles with each attempt.
    pub base_delay: Duration,
    /// The backoff never exceeds this.
    pub max_delay: Duration,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl RetryPolicy {
    /// Sets [`RetryPolicy::max_attempts`](Self::max_attempts).
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets [`RetryPolicy::base_delay`](Self::base_delay).
    pub fn base_delay(mut self, base_delay: Duration) -> Self {
        self.base_delay = base_delay;
        self
    }

    /// Sets [`RetryPolicy::max_delay`](Self::max_delay).
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }
}

/// How long the store's client waits: to open a connection, and for each
/// attempt's answer. An attempt that runs out is a transient failure the
/// [`RetryPolicy`] sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SdkTimeouts {
    /// To open a connection.
    pub connect: Duration,
    /// For one attempt's answer.
    pub attempt: Duration,
}

impl SdkTimeouts {
    /// `connect` and `attempt`.
    pub fn new(connect: Duration, attempt: Duration) -> Self {
        SdkTimeouts { connect, attempt }
    }

    /// As an SDK client's timeout configuration.
    pub fn sdk_config(&self) -> aws_smithy_types::timeout::TimeoutConfig {
        aws_smithy_types::timeout::TimeoutConfig::builder()
            .connect_timeout(self.connect)
            .operation_attempt_timeout(self.attempt)
            .build()
    }
}

impl Default for SdkTimeouts {
    /// 3 s to connect, 10 s an attempt: far above a healthy call of the
    /// store (milliseconds), far below a Lambda invocation.
    fn default() -> Self {
        SdkTimeouts {
            connect: Duration::from_secs(3),
            attempt: Duration::from_secs(10),
        }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(50),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// No retries at all: one attempt.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The backoff between attempts: from `base_delay` up to `max_delay`,
    /// with full jitter so racing consumers spread out.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            base: self.base_delay,
            max: self.max_delay,
            jitter: Jitter::Full,
        }
    }

    /// The cap of the backoff after `attempt` failed attempts (1-based):
    /// `min(max_delay, base_delay * 2^(attempt-1))`. The actual sleep is drawn
    /// uniformly from `[0, cap]` (full jitter), so racing consumers spread out.
    pub fn backoff_cap(&self, attempt: u32) -> Duration {
        self.backoff().cap(attempt)
    }
}

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

fn is_condition_failure(code: Option<&str>) -> bool {
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

/// How a call run by [`retry_throttled`] ended without a result.
#[derive(Debug)]
pub enum Retried<E> {
    /// The caller's `stopped` said to stop before an attempt.
    Stopped,
    /// The last attempt failed: with an error that is not throttling, or
    /// still throttled after the policy's attempts.
    Failed {
        /// The last error.
        error: E,
        /// How many attempts were made.
        attempts: u32,
    },
}

/// Runs `send` until it succeeds, fails with an error that `retryable` does
/// not call worth sending again (throttling, a transient fault), `stopped`
/// says to stop, or such errors outlast `policy` (capped exponential backoff
/// with full jitter between attempts). The one retry loop of every AWS call
/// the state store and its users make; on a client that does not retry
/// (see [`own_kinesis_client`](crate::own_kinesis_client)), the call's one
/// retry budget.
pub async fn retry_throttled<T, E, F, Fut>(
    policy: &RetryPolicy,
    operation: &str,
    retryable: impl Fn(&E) -> bool,
    stopped: impl Fn() -> bool,
    mut send: F,
) -> Result<T, Retried<E>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let max = policy.max_attempts.max(1);
    let mut attempts = 0;
    loop {
        if stopped() {
            return Err(Retried::Stopped);
        }
        attempts += 1;
        let error = match send().await {
            Ok(out) => return Ok(out),
            Err(error) => error,
        };
        if attempts >= max || !retryable(&error) {
            return Err(Retried::Failed { error, attempts });
        }
        let pause = policy.backoff().delay(attempts);
        tracing::debug!(
            operation,
            attempts,
            ?pause,
            "failed in passing, backing off"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Runs `send` until it succeeds, fails for good, or throttling and
/// transient faults outlast `policy`: the call's one retry budget, on a
/// client without the SDK's retries (see `clients`).
pub(crate) async fn with_retries<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    service: Service,
    operation: &'static str,
    stopped: impl Fn() -> bool,
    send: F,
) -> Result<T, CallError<E>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    // Besides throttling: a server fault, an attempt that timed out, a
    // connection that failed or an answer that could not be read may pass if
    // sent again. (A write whose answer was lost is sent again too: the
    // protocol's conditions tell its own write apart.)
    // A 5xx whose body is no AWS error (a proxy's or a load balancer's
    // page, an empty body) is a server fault too, whatever code the SDK
    // could not read from it.
    let retryable = |err: &SdkError<E, R>| match err {
        SdkError::ServiceError(_) => {
            err.code()
                .is_some_and(|c| is_throttling_code(c) || is_server_fault_code(c))
                || (err.code().is_none() && status_is(err.raw_response(), |s| s.is_server_error()))
        }
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => true,
        // An answer that could not be read: sent again unless it said the
        // request itself was refused (a 4xx page).
        SdkError::ResponseError(_) => !status_is(err.raw_response(), |s| s.is_client_error()),
        _ => false,
    };
    let (err, attempts) = match retry_throttled(policy, operation, retryable, stopped, send).await {
        Ok(out) => return Ok(out),
        Err(Retried::Stopped) => return Err(CallError::Failed(StateError::Stopped)),
        Err(Retried::Failed { error, attempts }) => (error, attempts),
    };
    let code = err.code().map(str::to_owned);
    if let SdkError::ServiceError(service_err) = err {
        let inner = service_err.into_err();
        if is_condition_failure(code.as_deref()) {
            return Err(CallError::Condition(inner));
        }
        let message = error_chain(&inner);
        return Err(CallError::Failed(service_error(
            service, operation, code, message, attempts,
        )));
    }
    Err(CallError::Failed(StateError::Sdk {
        service,
        operation,
        code,
        message: error_chain(&err),
    }))
}

/// Whether `raw` is an HTTP answer whose status passes `test` (a response
/// type other than the SDK's HTTP response passes none).
fn status_is<R: 'static>(
    raw: Option<&R>,
    test: impl Fn(aws_smithy_runtime_api::http::StatusCode) -> bool,
) -> bool {
    raw.and_then(|r| {
        (r as &dyn std::any::Any)
            .downcast_ref::<aws_smithy_runtime_api::client::orchestrator::HttpResponse>()
    })
    .is_some_and(|r| test(r.status()))
}

/// Sends a Kinesis request with the retries of `policy` (throttling and
/// transient faults; give it a client from
/// [`own_kinesis_client`](crate::own_kinesis_client), whose requests the
/// SDK does not retry as well); every failure comes back as a
/// [`StateError`] (`Throttled`, `EfoQuota`, `KmsKey`, or `Sdk` with the AWS
/// error code).
pub async fn call_kinesis<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    operation: &'static str,
    send: F,
) -> Result<T, StateError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    call_aws(policy, Service::Kinesis, operation, send).await
}

/// Sends a request to `service` with the retries of `policy` (throttling
/// and transient faults, on a client without the SDK's retries: see
/// [`own_kinesis_client`](crate::own_kinesis_client)); every failure comes
/// back as a [`StateError`] (`Throttled`, `EfoQuota`,
/// `KmsKey`, or `Sdk` with the AWS error code; a failed condition is an
/// `Sdk` error here).
pub async fn call_aws<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    service: Service,
    operation: &'static str,
    send: F,
) -> Result<T, StateError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    match with_retries(policy, service, operation, || false, send).await {
        Ok(out) => Ok(out),
        Err(CallError::Failed(e)) => Err(e),
        Err(CallError::Condition(e)) => Err(StateError::Sdk {
            service,
            operation,
            code: e.code().map(str::to_owned),
            message: error_chain(&e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(1000),
        };
        assert_eq!(p.backoff_cap(1), Duration::from_millis(100));
        assert_eq!(p.backoff_cap(2), Duration::from_millis(200));
        assert_eq!(p.backoff_cap(4), Duration::from_millis(800));
        assert_eq!(p.backoff_cap(5), Duration::from_millis(1000));
        assert_eq!(p.backoff_cap(60), Duration::from_millis(1000));
        for attempt in 1..8 {
            assert!(p.backoff().delay(attempt) <= p.backoff_cap(attempt));
        }
    }

    #[test]
    fn backoff_jitter_stays_in_its_range() {
        let exact = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(32),
            jitter: Jitter::None,
        };
        assert_eq!(exact.delay(1), Duration::from_secs(1));
        assert_eq!(exact.delay(6), Duration::from_secs(32));
        assert_eq!(exact.delay(40), Duration::from_secs(32));
        let more = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(1),
            jitter: Jitter::UpToHalfMore,
        };
        for attempt in 1..8 {
            let d = more.delay(attempt);
            assert!(d >= Duration::from_secs(1) && d < Duration::from_millis(1500));
        }
    }

    #[test]
    fn throttling_codes() {
        assert!(is_throttling_code("ProvisionedThroughputExceededException"));
        assert!(is_throttling_code("ThrottlingException"));
        assert!(is_throttling_code("KMSThrottlingException"));
        assert!(!is_throttling_code("ConditionalCheckFailedException"));
        assert!(!is_throttling_code("ResourceNotFoundException"));
    }

    /// Each code's class once the retries are done, by service and call:
    /// the one table behind `StateError::is_transient` and the variants.
    #[test]
    fn every_code_has_its_class_by_service_and_call() {
        use Service::{DynamoDb, Kinesis, Lambda};
        let class = |e: &StateError| match e {
            StateError::Throttled { .. } => "throttled",
            StateError::EfoQuota { .. } => "efo quota",
            StateError::KmsKey { .. } => "kms key",
            e if e.is_transient() => "transient",
            _ => "permanent",
        };
        let cases = [
            (
                Kinesis,
                "RegisterStreamConsumer",
                "LimitExceededException",
                "efo quota",
            ),
            (
                Kinesis,
                "DescribeStreamConsumer",
                "LimitExceededException",
                "throttled",
            ),
            (Kinesis, "ListShards", "LimitExceededException", "throttled"),
            (Kinesis, "ListShards", "ResourceInUseException", "transient"),
            (
                Kinesis,
                "ListShards",
                "ExpiredNextTokenException",
                "transient",
            ),
            (
                Kinesis,
                "RegisterStreamConsumer",
                "ResourceInUseException",
                "permanent",
            ),
            (Kinesis, "PutRecord", "KMSThrottlingException", "throttled"),
            (Kinesis, "PutRecord", "KMSDisabledException", "kms key"),
            (Kinesis, "GetRecords", "KMSOptInRequired", "kms key"),
            (
                Kinesis,
                "GetRecords",
                "InternalFailureException",
                "transient",
            ),
            (Kinesis, "GetRecords", "AccessDeniedException", "permanent"),
            (
                DynamoDb,
                "UpdateItem",
                "TransactionConflictException",
                "transient",
            ),
            (
                DynamoDb,
                "UpdateItem",
                "ReplicatedWriteConflictException",
                "transient",
            ),
            (
                DynamoDb,
                "TransactWriteItems",
                "TransactionInProgressException",
                "transient",
            ),
            (
                DynamoDb,
                "TransactWriteItems",
                "IdempotentParameterMismatchException",
                "permanent",
            ),
            (
                DynamoDb,
                "UpdateTimeToLive",
                "ResourceInUseException",
                "transient",
            ),
            (
                DynamoDb,
                "CreateTable",
                "ResourceInUseException",
                "permanent",
            ),
            (
                DynamoDb,
                "CreateTable",
                "LimitExceededException",
                "throttled",
            ),
            (DynamoDb, "Query", "InternalServerError", "transient"),
            (DynamoDb, "Query", "ResourceNotFoundException", "permanent"),
            (DynamoDb, "GetItem", "RequestLimitExceeded", "throttled"),
            (Lambda, "Invoke", "TooManyRequestsException", "throttled"),
            (Lambda, "Invoke", "EC2ThrottledException", "throttled"),
            (Lambda, "Invoke", "ServiceException", "transient"),
            (Lambda, "Invoke", "ResourceConflictException", "transient"),
            (Lambda, "Invoke", "KMSNotFoundException", "kms key"),
            (Lambda, "Invoke", "ResourceNotFoundException", "permanent"),
        ];
        for (service, operation, code, expected) in cases {
            let e = service_error(service, operation, Some(code.into()), "m".into(), 3);
            assert_eq!(class(&e), expected, "{service} {operation} {code}: {e}");
            let transient = matches!(expected, "throttled" | "transient");
            assert_eq!(e.is_transient(), transient, "{service} {operation} {code}");
        }
        let quota = service_error(
            Kinesis,
            "RegisterStreamConsumer",
            Some("LimitExceededException".into()),
            "m".into(),
            3,
        );
        assert!(
            quota.to_string().contains("SHARDKEEPER_EFO_POOL_SIZE"),
            "{quota}"
        );
        let kms = service_error(
            Kinesis,
            "GetRecords",
            Some("KMSDisabledException".into()),
            "m".into(),
            1,
        );
        assert!(
            kms.to_string()
                .starts_with("Kinesis GetRecords failed: the stream's KMS key is disabled"),
            "{kms}"
        );
    }
}
