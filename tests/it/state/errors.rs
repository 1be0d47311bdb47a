//! Every error the DynamoDB API reference documents for the state table's
//! writes (UpdateItem, TransactWriteItems) and reads (GetItem, Query) gets
//! its class, through the real SDK client and the in-process DynamoDB
//! server, with the fault proxy answering the one call with the error and
//! its HTTP status: throttling and server faults (retried with backoff,
//! then transient: the store's client does not retry, its policy is the one
//! retry budget), a transient failure (the item is busy in another
//! transaction), a lost lease (a fenced write whose condition failed), not
//! found (the table is gone), or a failure that stops the caller, naming
//! the call and the code.
//!
//! The codes are each call's "Errors" section in the Amazon DynamoDB API
//! Reference (the SDK's generated error enums), plus three of the errors
//! common to all actions: `AccessDeniedException`, `ValidationException`
//! (both HTTP 400) and `ServiceUnavailable` (HTTP 503).
//! `InvalidEndpointException` (HTTP 421) belongs to endpoint discovery,
//! which these clients do not use: permanent if it came.

use crate::support::classes::{dynamodb_at, of_state, quick_retries, Class};
use crate::support::common::{lease, seed_shards};
use crate::support::faulty::Faulty;
use shardkeeper::state::{
    Checkpoint, ConsumerId, EfoName, Lease, ShardId, StateError, StateStore, StoreConfig,
};
use shardkeeper_local::unique_name;

/// A store of a group of its own through the DynamoDB proxy, its client
/// sending each request once and the store retrying 3 times.
fn store(faulty: &Faulty) -> StateStore {
    StateStore::new(
        dynamodb_at(&faulty.ctx, faulty.dynamodb.url()),
        StoreConfig::new(&unique_name("g"), "orders")
            .unwrap()
            .table(&faulty.ctx.table)
            .unwrap()
            .retry(quick_retries(3)),
    )
}

/// The errors every one of these calls documents, with their classes.
fn common_errors() -> Vec<(u16, &'static str, Class)> {
    vec![
        (500, "InternalServerError", Class::Transient),
        (421, "InvalidEndpointException", Class::Permanent),
        (
            400,
            "ProvisionedThroughputExceededException",
            Class::Throttled,
        ),
        (400, "RequestLimitExceeded", Class::Throttled),
        (400, "ResourceNotFoundException", Class::NotFound),
        (400, "ThrottlingException", Class::Throttled),
        (400, "AccessDeniedException", Class::Permanent),
        (400, "ValidationException", Class::Permanent),
        (503, "ServiceUnavailable", Class::Transient),
    ]
}

/// Checks one row: the class, the message, and the attempts (3 when
/// throttled or a server fault, else 1).
fn check(
    faulty: &Faulty,
    before: u64,
    call: &str,
    code: &str,
    expected: Class,
    error: &StateError,
) {
    assert_eq!(of_state(error), expected, "{call} {code}: {error}");
    let transient = matches!(expected, Class::Throttled | Class::Transient);
    assert_eq!(error.is_transient(), transient, "{call} {code}: {error}");
    if matches!(expected, Class::Permanent | Class::NotFound) {
        let message = error.to_string();
        assert!(message.contains(call), "{call} {code}: {message}");
        assert!(message.contains(code), "{call} {code}: {message}");
    }
    // The store's client does not retry; its retry policy sends again
    // what throttling or a server fault refused (3 attempts here).
    let retried = expected == Class::Throttled || shardkeeper::state::is_server_fault_code(code);
    let attempts = if retried { 3 } else { 1 };
    let told = faulty.dynamodb.counts().failed_as_told - before;
    assert_eq!(told, attempts, "{call} {code}: attempts");
}

/// A leased shard's checkpoint is one UpdateItem fenced by the lease. Codes
/// from
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_UpdateItem.html#API_UpdateItem_Errors>:
/// a failed condition is a lost lease; an item in another transaction
/// (`TransactionConflictException`) or a conflicting write in another
/// region of a global table (`ReplicatedWriteConflictException`) is
/// transient: the next checkpoint writes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_update_item_error_has_its_class() {
    let faulty = Faulty::start(41).await;
    let store = store(&faulty);
    let shard = seed_shards(&store, 1).await.remove(0);
    let held: Lease = lease(&store, &shard, "c0").await;
    let mut cases = vec![
        (400, "ConditionalCheckFailedException", Class::LeaseLost),
        (
            400,
            "ItemCollectionSizeLimitExceededException",
            Class::Permanent,
        ),
        (400, "ReplicatedWriteConflictException", Class::Transient),
        (400, "TransactionConflictException", Class::Transient),
    ];
    cases.extend(common_errors());
    for (status, code, expected) in cases {
        faulty
            .dynamodb
            .fail_operation("UpdateItem", status, code)
            .unwrap();
        let before = faulty.dynamodb.counts().failed_as_told;
        let error = store
            .checkpoints()
            .save(&held, &Checkpoint::after("100").unwrap(), None)
            .await
            .unwrap_err();
        faulty.dynamodb.stop_failing_operations();
        check(&faulty, before, "UpdateItem", code, expected, &error);
    }
}

/// A standalone enhanced fan-out consumer's checkpoint is one
/// TransactWriteItems: the EFO lock's check and the checkpoint's write.
/// Codes from
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_TransactWriteItems.html#API_TransactWriteItems_Errors>:
/// a transaction still running with the same token
/// (`TransactionInProgressException`) is transient; a cancellation that
/// names no reasons (the proxy names none) is answered by reading the lock
/// and the checkpoint, and with the lock still held it is transient too.
/// A cancellation whose reasons say the lock was lost is `LeaseLost`
/// (`checkpoint::tests::a_cancelled_efo_checkpoint_is_told_apart_by_its_reasons`,
/// `state::efo::standalone_efo_checkpoints_are_fenced_by_the_lock`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_transact_write_items_error_has_its_class() {
    let faulty = Faulty::start(42).await;
    let store = store(&faulty);
    let name = EfoName::new("pool-00").unwrap();
    let arn = "arn:aws:kinesis:us-east-1:123456789012:stream/orders/consumer/pool-00:1";
    store.efo_consumers().register(&name, arn).await.unwrap();
    let lock = store
        .efo_consumers()
        .get_or_lock(&ConsumerId::new("c0").unwrap())
        .await
        .unwrap()
        .expect("the free consumer");
    let shard = ShardId::new("shardId-000000000000").unwrap();
    store
        .checkpoints()
        .save_efo(&lock, &shard, &Checkpoint::after("100").unwrap(), None)
        .await
        .unwrap();
    let mut cases = vec![
        (
            400,
            "IdempotentParameterMismatchException",
            Class::Permanent,
        ),
        (400, "TransactionCanceledException", Class::Transient),
        (400, "TransactionInProgressException", Class::Transient),
    ];
    cases.extend(common_errors());
    for (status, code, expected) in cases {
        faulty
            .dynamodb
            .fail_operation("TransactWriteItems", status, code)
            .unwrap();
        let before = faulty.dynamodb.counts().failed_as_told;
        let error = store
            .checkpoints()
            .save_efo(&lock, &shard, &Checkpoint::after("200").unwrap(), None)
            .await
            .unwrap_err();
        faulty.dynamodb.stop_failing_operations();
        check(
            &faulty,
            before,
            "TransactWriteItems",
            code,
            expected,
            &error,
        );
    }
}

/// The reads: a shard's state is one GetItem, the group's consumers one
/// Query. Codes from
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_GetItem.html#API_GetItem_Errors>
/// and
/// <https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_Query.html#API_Query_Errors>.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_get_item_and_query_error_has_its_class() {
    let faulty = Faulty::start(43).await;
    let store = store(&faulty);
    let shard = seed_shards(&store, 1).await.remove(0);
    for call in ["GetItem", "Query"] {
        for (status, code, expected) in common_errors() {
            faulty.dynamodb.fail_operation(call, status, code).unwrap();
            let before = faulty.dynamodb.counts().failed_as_told;
            let error = match call {
                "GetItem" => store
                    .shards()
                    .get(&shardkeeper::state::ShardScope::Group, &shard)
                    .await
                    .unwrap_err(),
                _ => store.consumers().list().await.unwrap_err(),
            };
            faulty.dynamodb.stop_failing_operations();
            check(&faulty, before, call, code, expected, &error);
        }
    }
}

/// The store's retry policy is the one retry budget of its calls: on a
/// client made with the SDK's standard retries (3 attempts), a read whose
/// every attempt outlasts the attempt timeout reaches the table exactly as
/// often as the policy says (3), not 3 times 3, and comes back transient;
/// one that answers in time on the second attempt succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_past_its_timeout_is_sent_again_by_the_store_alone() {
    use shardkeeper::state::SdkTimeouts;
    use shardkeeper_local::{Faults, SlowRequests};
    use std::time::Duration;

    let faulty = Faulty::start(47).await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&faulty.ctx.aws.config)
            .endpoint_url(faulty.dynamodb.url())
            .retry_config(
                aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(3),
            )
            .build(),
    );
    let store = StateStore::new(
        client,
        StoreConfig::new(&unique_name("g"), "orders")
            .unwrap()
            .table(&faulty.ctx.table)
            .unwrap()
            .retry(quick_retries(3))
            .timeouts(SdkTimeouts::new(
                Duration::from_secs(2),
                Duration::from_millis(200),
            )),
    );
    let shard = seed_shards(&store, 1).await.remove(0);
    let slow = |latency: Duration| Faults {
        slow: Some(SlowRequests {
            operation: "GetItem".to_owned(),
            body_contains: vec![],
            latency: latency..=latency,
        }),
        ..Faults::none()
    };
    faulty
        .dynamodb
        .set_faults(slow(Duration::from_millis(600)))
        .unwrap();
    let before = faulty.dynamodb.counts().slowed;
    let error = store
        .shards()
        .get(&shardkeeper::state::ShardScope::Group, &shard)
        .await
        .unwrap_err();
    assert!(error.is_transient(), "{error}");
    assert_eq!(
        faulty.dynamodb.counts().slowed - before,
        3,
        "the policy's attempts, each cut at its timeout"
    );
    faulty.dynamodb.set_faults(Faults::none()).unwrap();
    assert!(store
        .shards()
        .get(&shardkeeper::state::ShardScope::Group, &shard)
        .await
        .is_ok());
}

/// The library's own Kinesis client (`own_kinesis_client`, what the
/// scheduled functions, workers, rebalancer and reaper use) of a client
/// with the SDK's standard retries: the call's retry policy is its one
/// budget. A throttled call, a failed one (HTTP 500) and one whose attempts
/// outlast the attempt timeout (cut, not waited on) are each sent exactly
/// the policy's attempts, not the SDK's three under each of them, and end
/// transient. Answers in time go through.
#[tokio::test]
async fn a_kinesis_call_has_one_retry_budget() {
    use shardkeeper::state::{
        kinesis_stream_summary, own_kinesis_client, SdkTimeouts, StreamAddress,
    };
    use shardkeeper_local::{Faults, SlowRequests};
    use std::time::Duration;

    let faulty = Faulty::start(53).await;
    let stream = crate::support::common::create_stream(&faulty.direct, 1).await;
    // The SDK's standard retries: three attempts.
    let client = aws_sdk_kinesis::Client::from_conf(
        aws_sdk_kinesis::config::Builder::from(&faulty.ctx.aws.config)
            .endpoint_url(faulty.kinesis.url())
            .retry_config(
                aws_sdk_kinesis::config::retry::RetryConfig::standard().with_max_attempts(3),
            )
            .build(),
    );
    let client = own_kinesis_client(
        &client,
        &SdkTimeouts::new(Duration::from_secs(2), Duration::from_millis(200)),
    );
    let address = StreamAddress::parse(&stream).unwrap();
    let policy = quick_retries(4);
    let slow = |latency: Duration| Faults {
        slow: Some(SlowRequests {
            operation: "DescribeStreamSummary".to_owned(),
            body_contains: vec![],
            latency: latency..=latency,
        }),
        ..Faults::none()
    };
    let cases = [
        (
            "throttled",
            Faults {
                throttle: 1.0,
                ..Faults::none()
            },
        ),
        (
            "failed",
            Faults {
                server_error: 1.0,
                ..Faults::none()
            },
        ),
        ("past the attempt timeout", slow(Duration::from_millis(600))),
    ];
    for (case, faults) in cases {
        faulty.kinesis.set_faults(faults).unwrap();
        let before = faulty.kinesis.counts();
        let error = kinesis_stream_summary(&client, &address, &policy)
            .await
            .unwrap_err();
        assert!(error.is_transient(), "{case}: {error}");
        let after = faulty.kinesis.counts();
        let sent = (after.throttled + after.errors_500 + after.slowed)
            - (before.throttled + before.errors_500 + before.slowed);
        assert_eq!(sent, 4, "{case}: the policy's attempts, no more");
    }
    faulty
        .kinesis
        .set_faults(slow(Duration::from_millis(20)))
        .unwrap();
    assert!(kinesis_stream_summary(&client, &address, &policy)
        .await
        .is_ok());
}

/// A proxy, a load balancer or a failing server can answer a 5xx whose body
/// is no AWS error (an HTML page, nothing at all): the SDK reads no code
/// from it. On DynamoDB and on Kinesis it is a server fault like any other:
/// sent the policy's attempts, then transient (never an error that ends a
/// worker or drops a write for good). A 4xx page is not sent again.
#[tokio::test]
async fn a_server_fault_whose_body_is_not_json_is_retried_and_transient() {
    use shardkeeper::state::{kinesis_stream_summary, own_kinesis_client, StreamAddress};
    use shardkeeper_local::FailingEndpoint;
    let ctx = crate::support::common::ctx().await;
    let html = "<html><body><h1>502 Bad Gateway</h1></body></html>";
    for (status, content_type, body, attempts) in [
        (500, "text/html", html, 3),
        (502, "text/html", html, 3),
        (503, "text/plain", "", 3),
        (504, "text/html", html, 3),
        (403, "text/html", "<html>Forbidden</html>", 1),
    ] {
        let dynamodb = FailingEndpoint::start_raw(status, content_type, body)
            .await
            .unwrap();
        let store = StateStore::new(
            dynamodb_at(&ctx, dynamodb.url()),
            StoreConfig::new(&unique_name("html"), "s")
                .unwrap()
                .table("state")
                .unwrap()
                .retry(quick_retries(3)),
        );
        let error = store.stream_item().state().await.unwrap_err();
        assert_eq!(dynamodb.hits(), attempts, "{status}: {error}");
        if status >= 500 {
            assert!(error.is_transient(), "{status}: {error}");
        }

        let kinesis = FailingEndpoint::start_raw(status, content_type, body)
            .await
            .unwrap();
        let client = own_kinesis_client(
            &crate::support::classes::kinesis_at(&ctx, kinesis.url()),
            &Default::default(),
        );
        let error = kinesis_stream_summary(
            &client,
            &StreamAddress::parse("s").unwrap(),
            &quick_retries(3),
        )
        .await
        .unwrap_err();
        assert_eq!(kinesis.hits(), attempts, "{status}: {error}");
        if status >= 500 {
            assert!(error.is_transient(), "{status}: {error}");
        }
    }
}
