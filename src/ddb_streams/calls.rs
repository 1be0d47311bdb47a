//! The DynamoDB Streams calls of one reader, shared by its shards' sources
//! and its discovery: the client, the stream, how much a read asks for, and
//! the one retry budget of each call.

use crate::ddb_streams::client::StreamsClient;
use crate::ddb_streams::config::{OnTrimmed, ReaderConfig};
use crate::ddb_streams::error::StreamsError;
use crate::state::{retry_throttled, Retried, StateStore};
use crate::Error;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

/// What every call of one reader shares.
#[derive(Debug)]
pub(super) struct StreamsCalls<C> {
    pub(super) client: C,
    pub(super) stream_arn: String,
    /// Records per GetRecords (`None`: the service's maximum).
    pub(super) limit: Option<i32>,
    pub(super) on_trimmed: OnTrimmed,
    /// The state store: its clock and its retry policy.
    pub(super) store: StateStore,
    /// Throttled answers, counted across the shards.
    pub(super) throttled: AtomicU64,
}

impl<C: StreamsClient> StreamsCalls<C> {
    pub(super) fn new(
        client: C,
        store: StateStore,
        stream_arn: &str,
        config: &ReaderConfig,
    ) -> Self {
        StreamsCalls {
            client,
            stream_arn: stream_arn.to_owned(),
            limit: config.limit,
            on_trimmed: config.on_trimmed,
            store,
            throttled: AtomicU64::new(0),
        }
    }

    /// Throttled answers so far.
    pub(super) fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// One DynamoDB Streams call, retried with the store's retry policy when
    /// throttled or failed in passing (a server fault, no answer); an expired
    /// iterator is the source's to renew. The client sends each request once
    /// (see `sdk`), so this is the call's one retry budget.
    pub(super) async fn call<T, F, Fut>(&self, operation: &'static str, send: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StreamsError>>,
    {
        let retryable = |e: &StreamsError| {
            let throttled = e.is_throttled();
            self.throttled
                .fetch_add(u64::from(throttled), Ordering::Relaxed);
            e.is_transient() && !matches!(e, StreamsError::ExpiredIterator(_))
        };
        let retry = &self.store.config().retry;
        retry_throttled(retry, operation, retryable, || false, send)
            .await
            .map_err(|e| match e {
                Retried::Failed { error, attempts } => Error::Streams {
                    operation,
                    attempts,
                    error,
                },
                Retried::Stopped => Error::State(crate::state::StateError::Stopped),
            })
    }
}
