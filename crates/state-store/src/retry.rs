//! Bounded retries with capped exponential backoff and full jitter.
//!
//! The clients run without the SDK's retries (see `clients`): each call has
//! one retry budget here ([`RetryPolicy`]). Throttling and transient faults
//! (a server fault, an attempt that timed out, a connection that failed, an
//! answer lost) are sent again a bounded number of times, so a hot table
//! slows the consumers down instead of failing them at once. Everything else
//! goes back to the caller classified (`codes`): a lost condition, a
//! throttle that never cleared, or another service error.
//!
//! The backoff itself ([`Backoff`]) is the one every pause after a failure
//! uses, here and in the main crate's readers, each with its own base, cap
//! and jitter.

mod codes;

use codes::is_condition_failure;
pub(crate) use codes::{error_chain, service_error, CallError};
pub use codes::{
    is_kms_key_code, is_server_fault_code, is_throttling_code, is_transient_code,
    kinesis_coded_error, kinesis_error, REFUSED_WITHOUT_CODE,
};

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
    /// No attempt starts once this long has passed since the call's first
    /// (`None`: no bound but the attempts): a call whose every attempt
    /// hangs then ends within this plus one attempt's timeout. A session
    /// bounds its calls by its lease term so (see
    /// [`StateStore::with_call_limit`](crate::StateStore::with_call_limit)).
    pub max_elapsed: Option<Duration>,
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

    /// Sets [`RetryPolicy::max_elapsed`](Self::max_elapsed).
    pub fn max_elapsed(mut self, max_elapsed: Option<Duration>) -> Self {
        self.max_elapsed = max_elapsed;
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
            max_elapsed: None,
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
    let started = crate::clock::instant_now();
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
        let past = |limit: Duration| {
            crate::clock::instant_now().saturating_duration_since(started) + pause >= limit
        };
        if policy.max_elapsed.is_some_and(past) {
            return Err(Retried::Failed { error, attempts });
        }
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
        SdkError::TimeoutError(_) => true,
        // A connection that failed, or an answer that did not come; not a
        // request the connector refused as invalid.
        SdkError::DispatchFailure(d) => !d.is_user(),
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
    // A failure without a code that no retry passes (see
    // `REFUSED_WITHOUT_CODE`) is not a passing fault: only a failure without
    // an answer stays without a code.
    let code = err
        .code()
        .map(str::to_owned)
        .or_else(|| (!retryable(&err)).then(|| REFUSED_WITHOUT_CODE.to_owned()));
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
mod tests;
