//! Every public async entry point can be awaited inside `async` blocks and
//! spawned tasks of a crate of your own without raising its
//! `recursion_limit` (this crate sets none): a future type too deep for the
//! default limit fails to compile here, in CI. The entry points that serve
//! for ever (the runtime loops, a worker's run) are spawned in a branch
//! that never runs: compiled, not run.

use bytes::Bytes;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::value::RawValue;
use shardkeeper::consumer::{ConsumerSession, ShardWorker, WorkerConfig};
use shardkeeper::functions::WorkerFunction;
use shardkeeper::lambda::KinesisWindowProcessor;
use shardkeeper::processing::{changes, json, Change, StreamRecord};
use shardkeeper::state::{ConsumerId, ConsumerInfo, StateStore, StoreConfig};
use shardkeeper::{DynamoDbProcessor, KinesisProcessor};
use std::time::Duration;

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

const EMPTY: &str = r#"{"Records":[]}"#;

fn kinesis() -> KinesisProcessor<impl shardkeeper::processing::RecordHandler> {
    KinesisProcessor::new(json(|order: Order, _: StreamRecord| async move {
        let _ = order.id;
        Ok::<(), String>(())
    }))
}

fn dynamodb() -> DynamoDbProcessor<impl shardkeeper::processing::RecordHandler> {
    DynamoDbProcessor::new(changes(
        |_: Change<serde_json::Value>, _: StreamRecord| async move { Ok::<(), String>(()) },
    ))
}

fn event() -> LambdaEvent<Box<RawValue>> {
    LambdaEvent::new(
        RawValue::from_string(EMPTY.to_owned()).unwrap(),
        Context::default(),
    )
}

#[tokio::test]
async fn the_processors_run_in_spawned_tasks_at_the_default_recursion_limit() {
    let (k, d) = (kinesis(), dynamodb());
    let runs = tokio::spawn(async move {
        let mut processed = 0;
        processed += k.process(EMPTY, None).await.unwrap().processed;
        processed += k
            .process_bytes(Bytes::from(EMPTY), None)
            .await
            .unwrap()
            .processed;
        let records: aws_lambda_events::event::kinesis::KinesisEvent =
            serde_json::from_str(EMPTY).unwrap();
        processed += k.process_event(&records, None).await.unwrap().processed;
        k.handle_bytes(Bytes::from(EMPTY), &Context::default())
            .await
            .unwrap();
        k.handle(event()).await.unwrap();
        processed += d.process(EMPTY, None).await.unwrap().processed;
        processed += d
            .process_bytes(Bytes::from(EMPTY), None)
            .await
            .unwrap()
            .processed;
        let changes: aws_lambda_events::event::dynamodb::Event =
            serde_json::from_str(EMPTY).unwrap();
        processed += d.process_event(&changes, None).await.unwrap().processed;
        d.handle(event()).await.unwrap();
        processed
    });
    assert_eq!(runs.await.unwrap(), 0);
}

#[tokio::test]
async fn the_window_processor_runs_in_a_spawned_task_at_the_default_recursion_limit() {
    let windows = KinesisWindowProcessor::new(
        |state: &mut u64, _: StreamRecord| {
            *state += 1;
            Ok::<(), String>(())
        },
        |_: u64, _: shardkeeper::lambda::WindowInfo| async move {
            Ok::<(), shardkeeper::processing::HandlerError>(())
        },
    );
    let window = r#"{"Records":[],"window":{"start":"2026-01-01T00:00:00Z","end":"2026-01-01T00:01:00Z"},"state":{},"shardId":"shardId-000000000000","eventSourceARN":"arn:aws:kinesis:us-east-1:123456789012:stream/orders","isFinalInvokeForWindow":false,"isWindowTerminatedEarly":false}"#;
    let ran = tokio::spawn(async move { windows.process(window).await.map(|_| ()) });
    let _ = ran.await.unwrap();
}

/// The loops that serve for ever, in a branch that never runs: the
/// compiler lays their futures out all the same. The Lambda runtime loops
/// are awaited in the test's own future (`lambda_runtime::run`'s future is
/// not one to spawn: "implementation of `Send` is not general enough" in
/// its client); a shard worker's run, which a long-running process spawns,
/// in a spawned task.
#[tokio::test]
async fn the_loops_compile_at_the_default_recursion_limit() {
    let handler = || {
        json(|order: Order, _: StreamRecord| async move {
            let _ = order.id;
            Ok::<(), String>(())
        })
    };
    if std::hint::black_box(false) {
        kinesis().run().await.unwrap();
        dynamodb().run().await.unwrap();
        WorkerFunction::from_env(handler)
            .await
            .unwrap()
            .run()
            .await
            .unwrap();
        let worker = tokio::spawn(async move {
            let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
            let store = StateStore::new(
                aws_sdk_dynamodb::Client::new(&aws),
                StoreConfig::new("orders", "orders").unwrap(),
            );
            let info = ConsumerInfo::for_this_process(ConsumerId::new("c").unwrap(), store.now());
            let session = ConsumerSession::new(store.clone(), info, Duration::from_secs(10));
            let kinesis = aws_sdk_kinesis::Client::new(&aws);
            let mut worker =
                ShardWorker::new(session, store, kinesis, handler(), WorkerConfig::default());
            worker.step().await.unwrap();
            worker.run_until(None, || false).await.map(|_| ())
        });
        worker.await.unwrap().unwrap();
    }
}
