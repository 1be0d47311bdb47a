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

/// How often and how long to retry throttled requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// The backoff before the second attempt; it doubles with each attempt.
    pub base_delay: Duration,
    /// The backoff never exceeds this.
    pub max_delay: Duration,
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

/// Error codes that mean "slow down" on DynamoDB and Kinesis.
pub fn is_throttling_code(code: &str) -> bool {
    matches!(
        code,
        "ProvisionedThroughputExceededException"
            | "ThrottlingException"
            | "Throttling"
            | "RequestLimitExceeded"
            | "LimitExceededException"
            | "TooManyRequestsException"
    )
}

/// Error codes that mean the service failed on its side, so the same call
/// may succeed when sent again.
pub fn is_server_fault_code(code: &str) -> bool {
    matches!(
        code,
        "InternalServerError"
            | "InternalFailure"
            | "ServiceUnavailable"
            | "ServiceUnavailableException"
            | "RequestTimeout"
            | "RequestTimeoutException"
    )
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

/// A Kinesis error taken as it is (no retry): its code, and its message
/// with every cause.
pub fn kinesis_error(
    operation: &'static str,
    err: &(impl ProvideErrorMetadata + std::error::Error),
) -> StateError {
    StateError::Sdk {
        service: Service::Kinesis,
        operation,
        code: err.code().map(str::to_owned),
        message: error_chain(err),
    }
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

/// Runs `send` until it succeeds, fails with an error that `throttled` does
/// not call throttling, `stopped` says to stop, or throttling outlasts
/// `policy` (capped exponential backoff with full jitter between attempts).
/// The one retry loop of every AWS call the state store and its users make.
pub async fn retry_throttled<T, E, F, Fut>(
    policy: &RetryPolicy,
    operation: &str,
    throttled: impl Fn(&E) -> bool,
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
        if attempts >= max || !throttled(&error) {
            return Err(Retried::Failed { error, attempts });
        }
        let pause = policy.backoff().delay(attempts);
        tracing::debug!(operation, attempts, ?pause, "throttled, backing off");
        tokio::time::sleep(pause).await;
    }
}

/// Runs `send` until it succeeds, fails for good, or throttling outlasts `policy`.
pub(crate) async fn with_retries<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    service: Service,
    operation: &'static str,
    stopped: impl Fn() -> bool,
    send: F,
) -> Result<T, CallError<E>>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    let throttled = |err: &SdkError<E, R>| {
        matches!(err, SdkError::ServiceError(_)) && err.code().is_some_and(is_throttling_code)
    };
    let (err, attempts) = match retry_throttled(policy, operation, throttled, stopped, send).await {
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
        if code.as_deref().is_some_and(is_throttling_code) {
            return Err(CallError::Failed(StateError::Throttled {
                service,
                operation,
                attempts,
                message,
            }));
        }
        return Err(CallError::Failed(StateError::Sdk {
            service,
            operation,
            code,
            message,
        }));
    }
    Err(CallError::Failed(StateError::Sdk {
        service,
        operation,
        code,
        message: error_chain(&err),
    }))
}

/// Sends a Kinesis request with the throttling retries of `policy`; every
/// failure comes back as a [`StateError`] (`Throttled`, or `Sdk` with the
/// AWS error code).
pub async fn call_kinesis<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    operation: &'static str,
    send: F,
) -> Result<T, StateError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, SdkError<E, R>>>,
{
    call_aws(policy, Service::Kinesis, operation, send).await
}

/// Sends a request to `service` with the throttling retries of `policy`;
/// every failure comes back as a [`StateError`] (`Throttled`, or `Sdk` with
/// the AWS error code; a failed condition is an `Sdk` error here).
pub async fn call_aws<T, E, R, F, Fut>(
    policy: &RetryPolicy,
    service: Service,
    operation: &'static str,
    send: F,
) -> Result<T, StateError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug,
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
        assert!(!is_throttling_code("ConditionalCheckFailedException"));
        assert!(!is_throttling_code("ResourceNotFoundException"));
    }
}
