//! The processors' futures can be awaited inside `async` blocks and spawned
//! tasks of a crate of your own without raising its `recursion_limit`
//! (this crate sets none): a future type too deep for the default limit
//! fails to compile here, in CI.

use shardkeeper::processing::{changes, json, Change, StreamRecord};
use shardkeeper::{DynamoDbProcessor, KinesisProcessor};

#[derive(serde::Deserialize)]
struct Order {
    id: String,
}

const EMPTY: &str = r#"{"Records":[]}"#;

#[tokio::test]
async fn the_processors_run_in_spawned_tasks_at_the_default_recursion_limit() {
    let kinesis = KinesisProcessor::new(json(|order: Order, _: StreamRecord| async move {
        let _ = order.id;
        Ok::<(), String>(())
    }));
    let dynamodb = DynamoDbProcessor::new(changes(
        |_: Change<serde_json::Value>, _: StreamRecord| async move { Ok::<(), String>(()) },
    ));
    let k = tokio::spawn(async move { kinesis.process(EMPTY, None).await.map(|r| r.processed) });
    let d = tokio::spawn(async move { dynamodb.process(EMPTY, None).await.map(|r| r.processed) });
    assert_eq!(k.await.unwrap().unwrap(), 0);
    assert_eq!(d.await.unwrap().unwrap(), 0);
}
