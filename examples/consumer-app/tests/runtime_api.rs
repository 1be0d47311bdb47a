//! The orders binary as Lambda runs it: a Lambda Runtime API is
//! served here (`next` hands out events, `response` and `error` take the
//! answers), the binary is started with the environment Lambda gives it and
//! the local servers' endpoints, and it answers two invocations through
//! `processor.run()`, which reads each event once from the bytes the
//! runtime receives. The API's paths and headers follow the Lambda
//! developer guide ("Using the Lambda runtime API for custom runtimes").

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::routing::{get, post};
use axum::Router;
use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{AwsClients, Endpoints, LocalOptions, LocalServers};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// The events still to hand out, where the answers go, and how far from
/// now each invocation's deadline lies (negative: in the past, as a local
/// emulator may send it).
#[derive(Clone)]
struct Api {
    events: Arc<Mutex<Vec<(String, String)>>>,
    answers: mpsc::Sender<(String, String, String)>,
    deadline_in_ms: i64,
}

/// `GET /runtime/invocation/next`: the next event with its headers, or,
/// with none left, a request held open as Lambda holds it.
async fn next(State(api): State<Api>) -> (HeaderMap, String) {
    let event = api.events.lock().unwrap().pop();
    let Some((id, body)) = event else {
        std::future::pending::<()>().await;
        unreachable!()
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let deadline = now + api.deadline_in_ms;
    let mut headers = HeaderMap::new();
    let header = |v: String| HeaderValue::from_str(&v).unwrap();
    headers.insert("lambda-runtime-aws-request-id", header(id));
    headers.insert("lambda-runtime-deadline-ms", header(deadline.to_string()));
    headers.insert(
        "lambda-runtime-invoked-function-arn",
        header("arn:aws:lambda:us-east-1:123456789012:function:orders".into()),
    );
    headers.insert(
        "lambda-runtime-trace-id",
        header("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1".into()),
    );
    (headers, body)
}

async fn response(State(api): State<Api>, Path(id): Path<String>, body: String) -> &'static str {
    let _ = api.answers.send((id, "response".into(), body)).await;
    "{}"
}

async fn error(State(api): State<Api>, Path(id): Path<String>, body: String) -> &'static str {
    let _ = api.answers.send((id, "error".into(), body)).await;
    "{}"
}

async fn init_error(State(api): State<Api>, body: String) -> &'static str {
    let _ = api
        .answers
        .send(("init".into(), "error".into(), body))
        .await;
    "{}"
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Runs the binary against a Runtime API handing out `events` (last first)
/// with deadlines `deadline_in_ms` from now; returns each answer (request
/// id, `response` or `error`, body) and the orders stored.
async fn run_binary(
    events: Vec<(String, String)>,
    deadline_in_ms: i64,
) -> (Vec<(String, String, String)>, i32) {
    let servers = LocalServers::start(LocalOptions::default()).unwrap();
    let aws = AwsClients::connect(&Endpoints::local(&servers)).await;
    let store = StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new("orders-app", "orders").unwrap(),
    );
    store
        .table()
        .ensure(&TableOptions::default())
        .await
        .unwrap();
    aws.dynamodb
        .create_table()
        .table_name("orders")
        .billing_mode(aws_sdk_dynamodb::types::BillingMode::PayPerRequest)
        .key_schema(
            aws_sdk_dynamodb::types::KeySchemaElement::builder()
                .attribute_name("order_id")
                .key_type(aws_sdk_dynamodb::types::KeyType::Hash)
                .build()
                .unwrap(),
        )
        .attribute_definitions(
            aws_sdk_dynamodb::types::AttributeDefinition::builder()
                .attribute_name("order_id")
                .attribute_type(aws_sdk_dynamodb::types::ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();

    let (tx, mut answers) = mpsc::channel(8);
    let expected = events.len();
    let api = Api {
        events: Arc::new(Mutex::new(events)),
        answers: tx,
        deadline_in_ms,
    };
    let app = Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route(
            "/2018-06-01/runtime/invocation/{id}/response",
            post(response),
        )
        .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state(api);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let runtime_api = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let mut child = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env_clear()
        .envs([
            ("AWS_LAMBDA_RUNTIME_API", runtime_api.as_str()),
            ("AWS_LAMBDA_FUNCTION_NAME", "orders"),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256"),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            ("AWS_LAMBDA_LOG_STREAM_NAME", "local"),
            ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/orders"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
            ("AWS_CONFIG_FILE", "/nonexistent/config"),
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
            ("ORDERS_TABLE", "orders"),
            ("SHARDKEEPER_GROUP", "orders-app"),
            ("SHARDKEEPER_STREAM", "orders"),
        ])
        .env("AWS_ENDPOINT_URL_DYNAMODB", servers.dynamodb_endpoint())
        .env("AWS_ENDPOINT_URL_KINESIS", servers.kinesis_endpoint())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();

    let mut got = Vec::new();
    for _ in 0..expected {
        // A bound so a broken binary fails the test instead of hanging it.
        let answer = tokio::time::timeout(Duration::from_secs(120), answers.recv()).await;
        got.push(answer.ok().flatten());
    }
    let _ = child.kill();
    let _ = child.wait();
    let got: Vec<(String, String, String)> =
        got.into_iter().map(|a| a.expect("an answer")).collect();
    let stored = aws
        .dynamodb
        .scan()
        .table_name("orders")
        .send()
        .await
        .unwrap()
        .count();
    (got, stored)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_answers_invocations_on_the_lambda_runtime_api() {
    // Handed out last first: the malformed batch, then a good batch that
    // starts at the same record (as Lambda's retry of the batch would).
    let events = vec![
        ("req-2".into(), fixture("kinesis-batch.json")),
        ("req-1".into(), fixture("kinesis-malformed.json")),
    ];
    let (got, stored) = run_binary(events, 60_000).await;

    // The malformed batch: its first bad record reported, so Lambda retries from it.
    assert_eq!(
        (got[0].0.as_str(), got[0].1.as_str()),
        ("req-1", "response"),
        "{got:?}"
    );
    let first: serde_json::Value = serde_json::from_str(&got[0].2).unwrap();
    assert_eq!(
        first,
        serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": "49590338271490256608559692540925702759324208523137515618"}
        ]})
    );
    // The good batch from the same first record: done, nothing failed.
    assert_eq!(
        (got[1].0.as_str(), got[1].1.as_str()),
        ("req-2", "response"),
        "{got:?}"
    );
    let second: serde_json::Value = serde_json::from_str(&got[1].2).unwrap();
    assert_eq!(second, serde_json::json!({"batchItemFailures": []}));
    assert_eq!(stored, 3, "the good batch's orders are written");
}

/// A local emulator (`cargo lambda watch`) may send a deadline that has
/// already passed: the batch is processed as if there were none, not
/// reported back as not attempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_past_at_the_start_processes_the_batch() {
    let events = vec![("req-1".into(), fixture("kinesis-batch.json"))];
    let (got, stored) = run_binary(events, -5_000).await;
    assert_eq!(
        (got[0].0.as_str(), got[0].1.as_str()),
        ("req-1", "response"),
        "{got:?}"
    );
    let answer: serde_json::Value = serde_json::from_str(&got[0].2).unwrap();
    assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
    assert_eq!(stored, 3, "every order is written");
}
