//! AWS JSON error answers: the one way this crate builds them, and an
//! endpoint that answers every request with one, for retry tests.

use crate::LocalError;
use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The AWS service an injected error speaks for: it decides the error codes,
/// their `__type` spelling and the content type the SDK expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AwsService {
    /// DynamoDB and DynamoDB Streams (AWS JSON 1.0, namespaced `__type`).
    DynamoDb,
    /// Kinesis Data Streams (AWS JSON 1.1, bare `__type`).
    Kinesis,
}

/// Kinesis operations that AWS throttles per shard with
/// `ProvisionedThroughputExceededException`; the others (control plane,
/// enhanced fan-out) are limited with `LimitExceededException`.
const KINESIS_SHARD_OPERATIONS: &[&str] =
    &["PutRecord", "PutRecords", "GetRecords", "GetShardIterator"];

/// DynamoDB operations on items, which AWS throttles with
/// `ProvisionedThroughputExceededException`; table management and the
/// other control-plane calls get `ThrottlingException`.
const DYNAMODB_ITEM_OPERATIONS: &[&str] = &[
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "Scan",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactGetItems",
    "TransactWriteItems",
];

impl AwsService {
    /// The error code AWS answers a throttled request with, for the operation
    /// named by the request's `x-amz-target` header (for example
    /// `Kinesis_20131202.PutRecord`).
    pub(crate) fn throttling_error(self, target: &str) -> &'static str {
        let (api, operation) = target.split_once('.').unwrap_or(("", target));
        match self {
            AwsService::DynamoDb if api.starts_with("DynamoDBStreams") => "LimitExceededException",
            AwsService::DynamoDb if DYNAMODB_ITEM_OPERATIONS.contains(&operation) => {
                "ProvisionedThroughputExceededException"
            }
            AwsService::DynamoDb => "ThrottlingException",
            AwsService::Kinesis if KINESIS_SHARD_OPERATIONS.contains(&operation) => {
                "ProvisionedThroughputExceededException"
            }
            AwsService::Kinesis => "LimitExceededException",
        }
    }

    /// The error code AWS answers an internal failure (HTTP 500) with.
    pub(crate) fn internal_error(self) -> &'static str {
        match self {
            AwsService::DynamoDb => "InternalServerError",
            AwsService::Kinesis => "InternalFailure",
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            AwsService::DynamoDb => "application/x-amz-json-1.0",
            AwsService::Kinesis => "application/x-amz-json-1.1",
        }
    }

    fn type_prefix(self) -> &'static str {
        match self {
            AwsService::DynamoDb => "com.amazonaws.dynamodb.v20120810#",
            AwsService::Kinesis => "",
        }
    }
}

/// An AWS JSON error answer of `service`, as the SDK's error parser reads it:
/// the code in the body's `__type` and in `x-amzn-errortype`, a message that
/// says it was injected.
pub(crate) fn error_response(
    service: AwsService,
    status: StatusCode,
    error_type: &str,
) -> Response<Body> {
    error_answer(
        service,
        status,
        error_type,
        &format!("injected {error_type}"),
    )
}

/// An AWS JSON error answer of `service` with `message`.
pub(crate) fn error_answer(
    service: AwsService,
    status: StatusCode,
    error_type: &str,
    message: &str,
) -> Response<Body> {
    let body = serde_json::json!({
        "__type": format!("{}{error_type}", service.type_prefix()),
        "message": message,
    })
    .to_string();
    let mut resp = (status, body).into_response();
    let headers = resp.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static(service.content_type()),
    );
    if let Ok(v) = HeaderValue::from_str(error_type) {
        headers.insert("x-amzn-errortype", v);
    }
    resp
}

/// A loopback HTTP endpoint that fails every request with a given AWS JSON
/// error (for example `ProvisionedThroughputExceededException` with status
/// 400), counting the requests it received. [`FailingEndpoint::start`]
/// spells it as DynamoDB does, [`FailingEndpoint::start_as`] as the service
/// given; the SDK clients of every service read either.
#[derive(Debug)]
pub struct FailingEndpoint {
    url: String,
    hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FailingEndpoint {
    /// Starts the endpoint on the current runtime, answering as DynamoDB.
    pub async fn start(status: u16, error_type: &str) -> Result<Self, LocalError> {
        Self::start_as(AwsService::DynamoDb, status, error_type).await
    }

    /// Starts the endpoint on the current runtime, answering every request
    /// with `status` and `body` as `content_type`: what a proxy, a load
    /// balancer or a server's own failure page answers (an HTML page, an
    /// empty body), which is no AWS error at all.
    pub async fn start_raw(
        status: u16,
        content_type: &'static str,
        body: &'static str,
    ) -> Result<Self, LocalError> {
        let status = StatusCode::from_u16(status).map_err(|e| LocalError::Start(e.to_string()))?;
        Self::serve(move || {
            let mut resp = (status, body).into_response();
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static(content_type));
            resp
        })
        .await
    }

    /// Starts the endpoint on the current runtime, answering as `service`.
    pub async fn start_as(
        service: AwsService,
        status: u16,
        error_type: &str,
    ) -> Result<Self, LocalError> {
        let status = StatusCode::from_u16(status).map_err(|e| LocalError::Start(e.to_string()))?;
        let error_type = error_type.to_owned();
        Self::serve(move || error_response(service, status, &error_type)).await
    }

    /// Serves `answer` to every request, counting them.
    async fn serve(
        answer: impl Fn() -> Response<Body> + Clone + Send + Sync + 'static,
    ) -> Result<Self, LocalError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| LocalError::Start(e.to_string()))?;
        let url = format!(
            "http://{}",
            listener
                .local_addr()
                .map_err(|e| LocalError::Start(e.to_string()))?
        );
        let hits = Arc::new(AtomicU64::new(0));
        let counter = hits.clone();
        let app = axum::Router::new().fallback(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let resp = answer();
            async move { resp }
        });
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FailingEndpoint { url, hits, task })
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Requests received so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for FailingEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttling_codes_follow_the_operation() {
        let ddb = AwsService::DynamoDb;
        let kinesis = AwsService::Kinesis;
        let cases = [
            (
                ddb,
                "DynamoDB_20120810.PutItem",
                "ProvisionedThroughputExceededException",
            ),
            (
                ddb,
                "DynamoDB_20120810.DescribeTable",
                "ThrottlingException",
            ),
            (
                ddb,
                "DynamoDBStreams_20120810.GetRecords",
                "LimitExceededException",
            ),
            (
                kinesis,
                "Kinesis_20131202.PutRecord",
                "ProvisionedThroughputExceededException",
            ),
            (
                kinesis,
                "Kinesis_20131202.GetRecords",
                "ProvisionedThroughputExceededException",
            ),
            (
                kinesis,
                "Kinesis_20131202.ListShards",
                "LimitExceededException",
            ),
            (
                kinesis,
                "Kinesis_20131202.SubscribeToShard",
                "LimitExceededException",
            ),
        ];
        for (service, target, code) in cases {
            assert_eq!(service.throttling_error(target), code, "{target}");
        }
    }

    #[test]
    fn error_bodies_are_spelled_per_service() {
        let resp = error_response(
            AwsService::Kinesis,
            StatusCode::BAD_REQUEST,
            "LimitExceededException",
        );
        assert_eq!(resp.headers()["content-type"], "application/x-amz-json-1.1");
        assert_eq!(resp.headers()["x-amzn-errortype"], "LimitExceededException");
        let resp = error_response(
            AwsService::DynamoDb,
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
        );
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(resp.headers()["content-type"], "application/x-amz-json-1.0");
    }
}
