//! A team's own tower layer around a processor's read-once runtime path
//! (`BatchProcessor::runtime`), served as Lambda serves it: a Lambda Runtime
//! API is served here (paths and headers as the Lambda developer guide's
//! "Using the Lambda runtime API for custom runtimes" gives them), and this
//! test binary is started again as the function (`serve_as_function`,
//! ignored unless run so), with the environment Lambda gives a function.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::routing::{get, post};
use axum::Router;
use lambda_runtime::tower::{Layer, Service};
use lambda_runtime::LambdaInvocation;
use shardkeeper::processing::StreamRecord;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Set in the environment of the test binary started as the function.
const AS_FUNCTION: &str = "SHARDKEEPER_TEST_SERVE_FUNCTION";

/// A layer of the team's: it writes a line for each invocation it sees,
/// then hands it on.
#[derive(Clone)]
struct Witness;

impl<S> Layer<S> for Witness {
    type Service = Witnessed<S>;
    fn layer(&self, inner: S) -> Witnessed<S> {
        Witnessed(inner)
    }
}

struct Witnessed<S>(S);

impl<S: Service<LambdaInvocation>> Service<LambdaInvocation> for Witnessed<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, invocation: LambdaInvocation) -> S::Future {
        eprintln!(
            "witness: {} with {} bytes",
            invocation.context.request_id,
            invocation.body.len()
        );
        self.0.call(invocation)
    }
}

/// The function: a processor whose handler takes every record, served with
/// the team's layer around it. Does nothing unless started as the function.
#[tokio::test]
#[ignore = "the function the layer test starts"]
async fn serve_as_function() {
    if std::env::var(AS_FUNCTION).is_err() {
        return;
    }
    let processor = shardkeeper::KinesisProcessor::new(|_record: StreamRecord| async {
        Ok::<(), std::io::Error>(())
    });
    processor.runtime().layer(Witness).run().await.unwrap();
}

#[derive(Clone)]
struct Api {
    events: Arc<Mutex<Vec<(String, String)>>>,
    answers: mpsc::Sender<(String, String)>,
}

/// `GET /runtime/invocation/next`: the next event, or a request held open.
async fn next(State(api): State<Api>) -> (HeaderMap, String) {
    let Some((id, body)) = api.events.lock().unwrap().pop() else {
        std::future::pending::<()>().await;
        unreachable!()
    };
    let deadline = SystemTime::now() + Duration::from_secs(60);
    let deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis();
    let mut headers = HeaderMap::new();
    let header = |v: String| HeaderValue::from_str(&v).unwrap();
    headers.insert("lambda-runtime-aws-request-id", header(id));
    headers.insert("lambda-runtime-deadline-ms", header(deadline.to_string()));
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        header("arn:aws:lambda:us-east-1:123456789012:function:orders".into()),
    );
    (headers, body)
}

async fn response(State(api): State<Api>, Path(id): Path<String>, body: String) -> &'static str {
    let _ = api.answers.send((id, body)).await;
    "{}"
}

async fn error(State(api): State<Api>, Path(id): Path<String>, body: String) -> &'static str {
    let _ = api.answers.send((id, format!("error: {body}"))).await;
    "{}"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_layer_sees_each_invocation_and_the_processor_answers_it() {
    let body = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let (answers, mut answered) = mpsc::channel(4);
    let api = Api {
        events: Arc::new(Mutex::new(vec![("req-1".to_owned(), body.clone())])),
        answers,
    };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(response),
        )
        .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let runtime_api = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "lambda::runtime_layers::serve_as_function",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(AS_FUNCTION, "1")
        .env("AWS_LAMBDA_RUNTIME_API", &runtime_api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "orders")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A bound so a broken function fails the test instead of hanging it.
    let answer = tokio::time::timeout(Duration::from_secs(60), answered.recv()).await;
    let _ = child.kill();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let _ = child.wait();
    let (id, answer) = answer
        .ok()
        .flatten()
        .unwrap_or_else(|| panic!("no answer; {stderr}"));
    assert_eq!(id, "req-1");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
    assert!(
        stderr.contains(&format!("witness: req-1 with {} bytes", body.len())),
        "the layer saw the invocation as the runtime received it: {stderr}"
    );
}
