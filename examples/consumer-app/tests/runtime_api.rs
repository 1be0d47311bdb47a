//! The orders binary as Lambda runs it: the Lambda Runtime API is served
//! here (`shardkeeper_local::RuntimeApi`: `next` hands out events,
//! `response` and `error` take the answers), the binary is started with the
//! environment Lambda gives it and the local servers' endpoints, and it
//! answers two invocations through `processor.run()`, which reads each
//! event once from the bytes the runtime receives.

use shardkeeper::state::{StateStore, StoreConfig, TableOptions};
use shardkeeper_local::{
    create_keyed_table, Answer, AwsClients, Endpoints, Invocation, LocalOptions, LocalServers,
    RuntimeApi,
};
use std::process::{Command, Stdio};
use std::time::Duration;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Runs the binary against a Runtime API handing out `invocations` in
/// order; returns each answer and the orders stored.
async fn run_binary(invocations: Vec<Invocation>) -> (Vec<Answer>, i32) {
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
    create_keyed_table(&aws.dynamodb, "orders", "order_id", false)
        .await
        .unwrap();

    let expected = invocations.len();
    let mut api = RuntimeApi::start("orders", invocations).await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders"))
        .env_clear()
        .envs(api.lambda_environment("orders"))
        .envs([
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
        got.push(api.answer(Duration::from_secs(120)).await);
    }
    let _ = child.kill();
    let _ = child.wait();
    let got = got.into_iter().map(|a| a.expect("an answer")).collect();
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

/// The answer as JSON, if it is a response to `request_id`.
fn response(answer: &Answer, request_id: &str) -> serde_json::Value {
    match answer {
        Answer::Response(id, body) if id == request_id => serde_json::from_str(body).unwrap(),
        other => panic!("not a response to {request_id}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_answers_invocations_on_the_lambda_runtime_api() {
    // The malformed batch, then a good batch that starts at the same record
    // (as Lambda's retry of the batch would).
    let invocations = vec![
        Invocation::new("req-1", fixture("kinesis-malformed.json")),
        Invocation::new("req-2", fixture("kinesis-batch.json")),
    ];
    let (got, stored) = run_binary(invocations).await;

    // The malformed batch: its first bad record reported, so Lambda retries from it.
    assert_eq!(
        response(&got[0], "req-1"),
        serde_json::json!({"batchItemFailures": [
            {"itemIdentifier": "49590338271490256608559692540925702759324208523137515618"}
        ]})
    );
    // The good batch from the same first record: done, nothing failed.
    assert_eq!(
        response(&got[1], "req-2"),
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(stored, 3, "the good batch's orders are written");
}

/// A local emulator (`cargo lambda watch`) may send a deadline that has
/// already passed: the batch is processed as if there were none, not
/// reported back as not attempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_past_at_the_start_processes_the_batch() {
    let invocations = vec![Invocation {
        deadline_in_ms: -5_000,
        ..Invocation::new("req-1", fixture("kinesis-batch.json"))
    }];
    let (got, stored) = run_binary(invocations).await;
    assert_eq!(
        response(&got[0], "req-1"),
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(stored, 3, "every order is written");
}
