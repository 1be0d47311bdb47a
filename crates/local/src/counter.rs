//! Counting the requests an SDK client sends, per operation.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Counts every HTTP request (retries included) a client sends, by operation
/// name, and the bytes of their bodies; and, while a log is kept, keeps each
/// request's operation and body. Clones share the counts and the log.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, OperationCount>>>,
    log: Arc<Mutex<Option<Vec<LoggedRequest>>>>,
}

/// One request of a kept log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedRequest {
    /// The operation name.
    pub operation: String,
    /// The request's URI (path and query; Lambda names the function there).
    pub uri: String,
    /// The request body (JSON for DynamoDB and Kinesis).
    pub body: Vec<u8>,
}

/// The DynamoDB operations that write (each at least one write unit).
pub const DYNAMODB_WRITES: [&str; 5] = [
    "UpdateItem",
    "PutItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
];

/// Requests and request body bytes of one operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OperationCount {
    /// Requests sent.
    pub requests: u64,
    /// Request body bytes sent.
    pub body_bytes: u64,
}

impl RequestCounter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counts so far, by operation name.
    pub fn snapshot(&self) -> BTreeMap<String, OperationCount> {
        self.counts.lock().map(|m| m.clone()).unwrap_or_default()
    }

    /// Requests sent in all.
    pub fn total(&self) -> u64 {
        self.snapshot().values().map(|c| c.requests).sum()
    }

    /// Keeps every request from now on (an empty log if one was kept).
    pub fn start_log(&self) {
        if let Ok(mut log) = self.log.lock() {
            *log = Some(Vec::new());
        }
    }

    /// The requests kept since [`RequestCounter::start_log`] (or the last
    /// take), and keeps logging.
    pub fn take_log(&self) -> Vec<LoggedRequest> {
        self.log
            .lock()
            .ok()
            .and_then(|mut log| log.as_mut().map(std::mem::take))
            .unwrap_or_default()
    }

    /// Sets every count back to zero.
    pub fn reset(&self) {
        if let Ok(mut m) = self.counts.lock() {
            m.clear();
        }
    }

    /// Requests sent since `before` (a snapshot taken earlier), all operations together.
    pub fn requests_since(&self, before: &BTreeMap<String, OperationCount>) -> u64 {
        self.since(before).values().map(|c| c.requests).sum()
    }

    /// DynamoDB write requests sent since `before` (a snapshot taken
    /// earlier): the operations of [`DYNAMODB_WRITES`].
    pub fn writes_since(&self, before: &BTreeMap<String, OperationCount>) -> u64 {
        let since = self.since(before);
        DYNAMODB_WRITES
            .iter()
            .filter_map(|op| since.get(*op))
            .map(|c| c.requests)
            .sum()
    }

    /// The counts since `before` (a snapshot taken earlier), without empty rows.
    pub fn since(
        &self,
        before: &BTreeMap<String, OperationCount>,
    ) -> BTreeMap<String, OperationCount> {
        self.snapshot()
            .into_iter()
            .filter_map(|(op, now)| {
                let was = before.get(&op).copied().unwrap_or_default();
                let diff = OperationCount {
                    requests: now.requests - was.requests,
                    body_bytes: now.body_bytes - was.body_bytes,
                };
                (diff.requests > 0).then_some((op, diff))
            })
            .collect()
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "RequestCounter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let operation = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let body = context.request().body().bytes().unwrap_or_default();
        let bytes = body.len() as u64;
        if let Ok(mut log) = self.log.lock() {
            if let Some(log) = log.as_mut() {
                log.push(LoggedRequest {
                    operation: operation.clone(),
                    uri: context.request().uri().to_owned(),
                    body: body.to_vec(),
                });
            }
        }
        if let Ok(mut m) = self.counts.lock() {
            let entry = m.entry(operation).or_default();
            entry.requests += 1;
            entry.body_bytes += bytes;
        }
        Ok(())
    }
}
