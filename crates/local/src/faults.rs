//! An endpoint that answers every request with one AWS error, for retry tests.

use crate::LocalError;
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A loopback HTTP endpoint that fails every request with a given AWS JSON
/// error (for example `ProvisionedThroughputExceededException` with status
/// 400), counting the requests it received.
#[derive(Debug)]
pub struct FailingEndpoint {
    url: String,
    hits: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FailingEndpoint {
    /// Starts the endpoint on the current runtime.
    pub async fn start(status: u16, error_type: &str) -> Result<Self, LocalError> {
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
        let status = StatusCode::from_u16(status).map_err(|e| LocalError::Start(e.to_string()))?;
        let body = format!(
            r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"injected {error_type}"}}"#
        );
        let error_type = error_type.to_owned();
        let counter = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let body = body.clone();
            let error_type = error_type.clone();
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut resp = (status, body).into_response();
                let headers = resp.headers_mut();
                headers.insert(
                    "content-type",
                    HeaderValue::from_static("application/x-amz-json-1.0"),
                );
                if let Ok(v) = HeaderValue::from_str(&error_type) {
                    headers.insert("x-amzn-errortype", v);
                }
                resp
            }
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
