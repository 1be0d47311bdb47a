//! State calls inside an invocation's time: a call that has not come back
//! by the instant given is given up, as a transient state error, so the
//! batch degrades (runs without de-duplication) or reports what it did,
//! instead of Lambda killing the invocation while a slow table eats its
//! timeout. Callers box the calls they pass (an SDK call's future is tens
//! of kilobytes: unboxed, each caller's frame holds a copy of it in debug
//! builds, where a test thread has 2 MB of stack).

use crate::state::{Service, StateError};
use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

/// A state call, boxed (its type erased too: an SDK call's future type is
/// deep enough that a caller's `Send` check can pass the compiler's
/// recursion limit).
pub(crate) type StateCall<'a, T> = Pin<Box<dyn Future<Output = crate::Result<T>> + Send + 'a>>;

/// Awaits `call` (a state call named `operation`) until `until` (`None`: no
/// bound); past it, a transient [`StateError::Sdk`] says the time ran out.
pub(crate) async fn within<T>(
    until: Option<Instant>,
    operation: &'static str,
    call: StateCall<'_, T>,
) -> crate::Result<T> {
    let Some(until) = until else {
        return call.await;
    };
    match tokio::time::timeout_at(until.into(), call).await {
        Ok(out) => out,
        Err(_) => Err(StateError::Sdk {
            service: Service::DynamoDb,
            operation,
            code: None,
            message: "given up: the invocation's time for state calls ran out".to_owned(),
        }
        .into()),
    }
}
