//! A Lambda Runtime API served in-process, for running a function binary
//! the way Lambda runs it: `GET .../invocation/next` hands out the queued
//! invocations in order (then holds the request open, as Lambda does while
//! no event waits), `POST .../invocation/{id}/response`, `.../{id}/error`
//! and `.../init/error` take the answers. Paths and headers follow the
//! Lambda developer guide, "Using the Lambda runtime API for custom
//! runtimes".

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::routing::{get, post};
use axum::Router;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// One invocation to hand out.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// Its request id.
    pub request_id: String,
    /// The event, as its JSON text.
    pub body: String,
    /// Its deadline, in milliseconds from when it is handed out (negative:
    /// already past, as a local emulator may send it).
    pub deadline_in_ms: i64,
}

impl Invocation {
    /// An invocation of `body` with a minute to run.
    pub fn new(request_id: &str, body: impl Into<String>) -> Self {
        Invocation {
            request_id: request_id.to_owned(),
            body: body.into(),
            deadline_in_ms: 60_000,
        }
    }
}

/// What the function answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `POST /invocation/{id}/response`: the request id and the response.
    Response(String, String),
    /// `POST /invocation/{id}/error`: the request id and the error document.
    Error(String, String),
    /// `POST /init/error`: the error document.
    InitError(String),
}

#[derive(Clone)]
struct Shared {
    invocations: Arc<Mutex<VecDeque<Invocation>>>,
    answers: mpsc::UnboundedSender<Answer>,
    function_arn: String,
}

/// A Runtime API serving one function.
pub struct RuntimeApi {
    address: String,
    answers: mpsc::UnboundedReceiver<Answer>,
    server: tokio::task::JoinHandle<()>,
}

impl RuntimeApi {
    /// Serves `invocations`, in order, to a function named `function` (its
    /// ARN in each invocation's headers names it), on a port of 127.0.0.1.
    pub async fn start(function: &str, invocations: Vec<Invocation>) -> std::io::Result<Self> {
        let (answers, received) = mpsc::unbounded_channel();
        let shared = Shared {
            invocations: Arc::new(Mutex::new(invocations.into())),
            answers,
            function_arn: format!("arn:aws:lambda:us-east-1:123456789012:function:{function}"),
        };
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route(
                "/2018-06-01/runtime/invocation/{id}/response",
                post(response),
            )
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?.to_string();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(RuntimeApi {
            address,
            answers: received,
            server,
        })
    }

    /// The value of `AWS_LAMBDA_RUNTIME_API` for the function.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The variables Lambda gives the function `function`, with this API.
    pub fn lambda_environment(&self, function: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_LAMBDA_RUNTIME_API", self.address.clone()),
            ("AWS_LAMBDA_FUNCTION_NAME", function.to_owned()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256".to_owned()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".to_owned()),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "local".to_owned()),
            (
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{function}"),
            ),
        ]
    }

    /// The next answer, or `None` if none came `within` (a bound, so a
    /// broken function fails its test instead of hanging it).
    pub async fn answer(&mut self, within: Duration) -> Option<Answer> {
        tokio::time::timeout(within, self.answers.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn next(State(shared): State<Shared>) -> (HeaderMap, String) {
    let invocation = shared.invocations.lock().unwrap().pop_front();
    let Some(invocation) = invocation else {
        std::future::pending::<()>().await;
        unreachable!("a pending future never ends")
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    let deadline = now + invocation.deadline_in_ms;
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    };
    set("lambda-runtime-aws-request-id", &invocation.request_id);
    set("lambda-runtime-deadline-ms", &deadline.to_string());
    set("lambda-runtime-invoked-function-arn", &shared.function_arn);
    set(
        "lambda-runtime-trace-id",
        "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1",
    );
    (headers, invocation.body)
}

async fn response(
    State(shared): State<Shared>,
    Path(id): Path<String>,
    body: String,
) -> &'static str {
    let _ = shared.answers.send(Answer::Response(id, body));
    "{}"
}

async fn error(State(shared): State<Shared>, Path(id): Path<String>, body: String) -> &'static str {
    let _ = shared.answers.send(Answer::Error(id, body));
    "{}"
}

async fn init_error(State(shared): State<Shared>, body: String) -> &'static str {
    let _ = shared.answers.send(Answer::InitError(body));
    "{}"
}
