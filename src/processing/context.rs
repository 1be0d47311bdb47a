//! The invocation a handler call runs in, for the handler to read:
//! [`RecordContext::current`]. The processors and the shard-worker function
//! set it once per invocation around all of its handler calls (a task-local
//! value: no cost per record), so a handler needs no extra argument and the
//! [`RecordHandler`](crate::processing::RecordHandler) contract stays as it
//! is.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

tokio::task_local! {
    static CURRENT: RecordContext;
}

/// The Lambda invocation a handler call belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecordContext {
    /// The invocation's request id.
    pub request_id: Arc<str>,
    /// The invoked function's name.
    pub function_name: Arc<str>,
    /// The invoked function's ARN (with its version or alias, if invoked so).
    pub function_arn: Arc<str>,
    /// When Lambda ends the invocation. The processors stop starting records
    /// a margin before it (`None`: no deadline, as a local emulator's past
    /// one is taken).
    pub deadline: Option<SystemTime>,
    /// The first invocation of this execution environment (a cold start).
    pub cold_start: bool,
    /// The invocation's X-Ray trace id, when Lambda gave one.
    pub xray_trace_id: Option<Arc<str>>,
}

impl RecordContext {
    /// The context of the invocation this handler call runs in; `None`
    /// outside one (a processor called without a Lambda context, a test),
    /// and in tasks the handler spawns (task-local values do not follow
    /// them: read it before spawning).
    pub fn current() -> Option<RecordContext> {
        CURRENT.try_with(RecordContext::clone).ok()
    }

    /// The context of a Lambda invocation. A deadline already past when the
    /// invocation starts is a local emulator's, and is none. The first
    /// context made in this process is the cold start's.
    pub fn of(context: &lambda_runtime::Context) -> RecordContext {
        static MADE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let deadline = UNIX_EPOCH + Duration::from_millis(context.deadline);
        RecordContext {
            request_id: context.request_id.as_str().into(),
            function_name: context.env_config.function_name.as_str().into(),
            function_arn: context.invoked_function_arn.as_str().into(),
            deadline: (deadline > SystemTime::now()).then_some(deadline),
            cold_start: !MADE.swap(true, std::sync::atomic::Ordering::Relaxed),
            xray_trace_id: context.xray_trace_id.as_deref().map(Arc::from),
        }
    }

    /// Runs `work` with this as the current context.
    #[cfg(any(feature = "esm", feature = "worker", test))]
    pub(crate) fn scope<F: std::future::Future>(
        self,
        work: F,
    ) -> impl std::future::Future<Output = F::Output> {
        // The task-local future holds `work` itself: no second copy of it
        // in an async fn's state, so the handler's future costs no more stack.
        CURRENT.scope(self, work)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_context_is_there_inside_its_scope_only() {
        assert_eq!(RecordContext::current(), None);
        let mut lambda = lambda_runtime::Context::default();
        lambda.request_id = "req-1".into();
        lambda.deadline = 1_000; // long past: an emulator's
        let context = RecordContext::of(&lambda);
        assert_eq!(context.deadline, None);
        let seen = context
            .clone()
            .scope(async { RecordContext::current() })
            .await;
        assert_eq!(seen, Some(context));
        assert_eq!(RecordContext::current(), None);
    }
}
