//! A team's own tower layer around a processor's read-once runtime path
//! (`BatchProcessor::runtime`), served as Lambda serves it: a Lambda Runtime
//! API is served here (`shardkeeper_local::RuntimeApi`), and this test
//! binary is started again as the function (`serve_as_function`, ignored
//! unless run so), with the environment Lambda gives a function.

use lambda_runtime::tower::{Layer, Service};
use lambda_runtime::LambdaInvocation;
use shardkeeper::processing::StreamRecord;
use shardkeeper_local::{Answer, Invocation, RuntimeApi};
use std::io::Read;
use std::process::{Command, Stdio};
use std::task::{Context, Poll};
use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_layer_sees_each_invocation_and_the_processor_answers_it() {
    let body = std::fs::read_to_string(format!(
        "{}/events/kinesis-batch.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut api = RuntimeApi::start("orders", vec![Invocation::new("req-1", body.clone())])
        .await
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "lambda::runtime_layers::serve_as_function",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(AS_FUNCTION, "1")
        .envs(api.lambda_environment("orders"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let answer = api.answer(Duration::from_secs(60)).await;
    let _ = child.kill();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let _ = child.wait();
    let Some(Answer::Response(id, answer)) = answer else {
        panic!("no response: {answer:?}; {stderr}");
    };
    assert_eq!(id, "req-1");
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer, serde_json::json!({"batchItemFailures": []}));
    assert!(
        stderr.contains(&format!("witness: req-1 with {} bytes", body.len())),
        "the layer saw the invocation as the runtime received it: {stderr}"
    );
}
