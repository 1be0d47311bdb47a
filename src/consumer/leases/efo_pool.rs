//! The group's pool of enhanced fan-out consumers, grown on demand: a
//! consumer that finds no free EFO consumer registers a new one with
//! Kinesis (up to the pool's size, at most 20 per stream), waits until it is
//! ACTIVE, records it, and locks it. Names are `<prefix>-00` to
//! `<prefix>-<size-1>`, so racing consumers can never grow the pool past
//! its size: two that pick the same name register it once (Kinesis answers
//! the second with `ResourceInUseException`, which is adopted) and the lock
//! decides who gets it. The reaper shrinks the pool again (idle ones are
//! deregistered, one is kept).

use crate::state::instant_now;
use crate::state::{
    call_kinesis, ConsumerId, EfoLock, EfoName, ForStream, RetryPolicy, StateError, StateStore,
};
use crate::Result;
use std::time::Duration;

/// Kinesis allows at most this many registered consumers per stream.
pub const MAX_EFO_CONSUMERS: usize = 20;

/// How the pool grows.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EfoPool {
    /// The most EFO consumers the group registers (1 to 20; other groups
    /// and applications share the stream's limit of 20).
    pub size: usize,
    /// Consumer names are `<prefix>-NN` (letters, digits, `_`, `.`, `-`).
    pub prefix: String,
    /// How long to wait for a new consumer to become ACTIVE.
    pub active_timeout: Duration,
    /// How often to ask meanwhile.
    pub poll_interval: Duration,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl EfoPool {
    /// Sets [`EfoPool::size`](Self::size).
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// Sets [`EfoPool::prefix`](Self::prefix).
    pub fn prefix(mut self, prefix: String) -> Self {
        self.prefix = prefix;
        self
    }

    /// Sets [`EfoPool::active_timeout`](Self::active_timeout).
    pub fn active_timeout(mut self, active_timeout: Duration) -> Self {
        self.active_timeout = active_timeout;
        self
    }

    /// Sets [`EfoPool::poll_interval`](Self::poll_interval).
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }
}

impl EfoPool {
    /// A pool of `size` consumers named after `prefix` (typically the group).
    pub fn new(prefix: &str, size: usize) -> Self {
        EfoPool {
            size,
            prefix: prefix.to_owned(),
            active_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(500),
        }
    }

    fn validate(&self) -> Result<(), StateError> {
        if !(1..=MAX_EFO_CONSUMERS).contains(&self.size) {
            return Err(StateError::validation(
                "EFO pool size",
                format!("{}: must be 1 to {MAX_EFO_CONSUMERS}", self.size),
            ));
        }
        let ok = !self.prefix.is_empty()
            && self.prefix.len() <= 120
            && self
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !ok {
            return Err(StateError::validation(
                "EFO consumer name prefix",
                format!(
                    "{:?}: 1 to 120 of letters, digits, '_', '.', '-'",
                    self.prefix
                ),
            ));
        }
        Ok(())
    }

    fn name(&self, i: usize) -> String {
        format!("{}-{i:02}", self.prefix)
    }
}

/// The stream's ARN (EFO calls take ARNs, not names): the configured one,
/// or the one Kinesis describes for the stream's name.
pub async fn stream_arn(store: &StateStore, kinesis: &aws_sdk_kinesis::Client) -> Result<String> {
    let stream = &store.config().stream;
    if let Some(arn) = stream.arn() {
        return Ok(arn.as_str().to_owned());
    }
    let req = kinesis.describe_stream_summary().for_stream(stream);
    let out = call_kinesis(&store.config().retry, "DescribeStreamSummary", || {
        req.clone().send()
    })
    .await?;
    Ok(out
        .stream_description_summary()
        .map(|s| s.stream_arn().to_owned())
        .ok_or_else(|| StateError::not_found("stream description"))?)
}

/// Registers `name` with Kinesis (or adopts it if it exists) and waits
/// until it is ACTIVE; returns its ARN. Each call is retried by `retry` when
/// throttled (Kinesis limits these calls per stream and account). A
/// registration still refused with `LimitExceededException` after the
/// retries is [`StateError::EfoQuota`]: the stream has the 20 consumers
/// Kinesis allows, which no retry changes.
async fn register_active(
    kinesis: &aws_sdk_kinesis::Client,
    retry: &RetryPolicy,
    stream_arn: &str,
    name: &str,
    pool: &EfoPool,
) -> Result<String> {
    let register = kinesis
        .register_stream_consumer()
        .stream_arn(stream_arn)
        .consumer_name(name);
    let arn = match call_kinesis(retry, "RegisterStreamConsumer", || register.clone().send()).await
    {
        Ok(out) => out
            .consumer()
            .map(|c| c.consumer_arn().to_owned())
            .ok_or_else(|| StateError::not_found("registered consumer"))?,
        Err(StateError::Sdk {
            code: Some(code), ..
        }) if code == "ResourceInUseException" => {
            let describe = kinesis
                .describe_stream_consumer()
                .stream_arn(stream_arn)
                .consumer_name(name);
            call_kinesis(retry, "DescribeStreamConsumer", || describe.clone().send())
                .await?
                .consumer_description()
                .map(|c| c.consumer_arn().to_owned())
                .ok_or_else(|| StateError::not_found("described consumer"))?
        }
        Err(e) => return Err(e.into()),
    };
    let started = instant_now();
    let describe = kinesis.describe_stream_consumer().consumer_arn(&arn);
    loop {
        let out = call_kinesis(retry, "DescribeStreamConsumer", || describe.clone().send()).await?;
        let status = out
            .consumer_description()
            .map(|c| c.consumer_status().as_str().to_owned());
        if status.as_deref() == Some("ACTIVE") {
            return Ok(arn);
        }
        if started.elapsed() >= pool.active_timeout {
            return Err(StateError::EfoNotActive {
                name: name.to_owned(),
                status: status.unwrap_or_default(),
                waited_ms: started.elapsed().as_millis() as u64,
            }
            .into());
        }
        tokio::time::sleep(pool.poll_interval).await;
    }
}

/// The EFO consumer `consumer` holds, or a free one locked for it, or a new
/// one registered and locked while the pool is below its size. `None` when
/// every one of `pool.size` consumers is locked by others (the consumer is
/// then marked inactive, so the rebalancer gives it no leases).
/// [`StateError::EfoQuota`] when Kinesis refuses to register another
/// consumer of the stream: the worker's run ends with it.
pub async fn lock_or_grow(
    store: &StateStore,
    kinesis: &aws_sdk_kinesis::Client,
    consumer: &ConsumerId,
    pool: &EfoPool,
) -> Result<Option<EfoLock>> {
    pool.validate()?;
    let mut stream: Option<String> = None;
    for _ in 0..=pool.size {
        if let Some(lock) = store.efo_consumers().get_or_lock(consumer).await? {
            return Ok(Some(lock));
        }
        let known = store.efo_consumers().list().await?;
        let Some(name) = (0..pool.size)
            .map(|i| pool.name(i))
            .find(|n| known.iter().all(|e| e.name.as_str() != n))
        else {
            return Ok(None);
        };
        let stream_arn = match &stream {
            Some(arn) => arn.clone(),
            None => {
                let arn = stream_arn(store, kinesis).await?;
                stream = Some(arn.clone());
                arn
            }
        };
        let arn = register_active(kinesis, &store.config().retry, &stream_arn, &name, pool).await?;
        if store
            .efo_consumers()
            .register(&EfoName::new(&name)?, &arn)
            .await?
        {
            tracing::info!(efo = %name, %consumer, "registered an enhanced fan-out consumer for the pool");
        }
    }
    Ok(None)
}
