//! Table lifecycle: create, wait, schema check, tags; typed errors for bad input and throttling.

use crate::support::common::{create_id_table, ctx};
use aws_sdk_dynamodb::types::BillingMode;
use shardkeeper::state::{
    Billing, Checkpoint, RetryPolicy, Service, StateError, StateStore, StoreConfig, TableOptions,
};
use shardkeeper_local::{unique_name, FailingEndpoint};
use std::collections::BTreeMap;
use std::time::Duration;

fn fast() -> TableOptions {
    TableOptions::default().poll_interval(Duration::from_millis(50))
}

#[tokio::test]
async fn creates_the_table_once_encrypted_with_ttl_and_tags() {
    let ctx = ctx().await;
    let table = unique_name("sk-table");
    let config = StoreConfig::new("g", "s").unwrap().table(&table).unwrap();
    let store = StateStore::new(ctx.aws.dynamodb.clone(), config);
    let tags = BTreeMap::from([("team".to_owned(), "payments".to_owned())]);
    let options = fast().tags(tags.clone());
    let first = store.table().ensure(&options).await.unwrap();
    assert!(first.created);
    let second = store.table().ensure(&options).await.unwrap();
    assert!(!second.created);
    assert!(second.tags_set.is_empty(), "tags were already there");
    assert_eq!(first.arn, second.arn);

    let desc = ctx
        .aws
        .dynamodb
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let desc = desc.table().unwrap();
    assert_eq!(
        desc.billing_mode_summary().and_then(|b| b.billing_mode()),
        Some(&BillingMode::PayPerRequest)
    );
    assert!(
        desc.sse_description().is_some(),
        "server-side encryption requested"
    );
    let ttl = ctx
        .aws
        .dynamodb
        .describe_time_to_live()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    assert_eq!(
        ttl.time_to_live_description()
            .and_then(|t| t.attribute_name()),
        Some("expires_ttl")
    );
    // A tag added later is confirmed at the next start.
    let more = fast().tags(BTreeMap::from([
        ("team".to_owned(), "payments".to_owned()),
        ("env".to_owned(), "test".to_owned()),
    ]));
    let third = store.table().ensure(&more).await.unwrap();
    assert_eq!(third.tags_set, vec!["env".to_owned()]);
    let listed = ctx
        .aws
        .dynamodb
        .list_tags_of_resource()
        .resource_arn(&first.arn)
        .send()
        .await
        .unwrap();
    let listed: BTreeMap<_, _> = listed
        .tags()
        .iter()
        .map(|t| (t.key().to_owned(), t.value().to_owned()))
        .collect();
    assert_eq!(listed, more.tags);
}

#[tokio::test]
async fn provisioned_billing_on_request() {
    let ctx = ctx().await;
    let table = unique_name("sk-prov");
    let store = StateStore::new(
        ctx.aws.dynamodb.clone(),
        StoreConfig::new("g", "s").unwrap().table(&table).unwrap(),
    );
    let options = fast().billing(Billing::Provisioned { read: 5, write: 7 });
    store.table().ensure(&options).await.unwrap();
    let desc = ctx
        .aws
        .dynamodb
        .describe_table()
        .table_name(&table)
        .send()
        .await
        .unwrap();
    let throughput = desc.table().unwrap().provisioned_throughput().unwrap();
    assert_eq!(throughput.write_capacity_units(), Some(7));
    assert_eq!(throughput.read_capacity_units(), Some(5));
}

#[tokio::test]
async fn a_table_with_another_schema_is_refused() {
    let ctx = ctx().await;
    let table = unique_name("sk-wrong");
    create_id_table(&ctx.aws, &table, false).await;
    let store = StateStore::new(
        ctx.aws.dynamodb.clone(),
        StoreConfig::new("g", "s").unwrap().table(&table).unwrap(),
    );
    let err = store.table().ensure(&fast()).await.unwrap_err();
    match err {
        StateError::WrongTableSchema { table: t, reason } => {
            assert_eq!(t, table);
            assert!(
                reason.contains("expected pk (HASH) and sk (RANGE)"),
                "{reason}"
            );
        }
        other => panic!("expected WrongTableSchema, got {other:?}"),
    }
}

#[test]
fn invalid_names_are_typed_validation_errors() {
    for (group, stream, field) in [
        ("", "s", "consumer group"),
        ("a#b", "s", "consumer group"),
        ("g", "s p", "stream name"),
        ("g", "s|x", "stream name"),
    ] {
        match StoreConfig::new(group, stream) {
            Err(StateError::Validation { field: f, .. }) => {
                assert_eq!(f, field, "{group:?}/{stream:?}")
            }
            other => panic!("{group:?}/{stream:?}: {other:?}"),
        }
    }
    let err = StoreConfig::new("g", "s").unwrap().table("x").unwrap_err();
    assert!(matches!(
        err,
        StateError::Validation {
            field: "table name",
            ..
        }
    ));
    for bad in ["", "12ab", "1e5", &"1".repeat(130)] {
        let err = Checkpoint::after(bad).unwrap_err();
        assert!(
            matches!(
                err,
                StateError::Validation {
                    field: "sequence number",
                    ..
                }
            ),
            "{bad:?}: {err}"
        );
    }
}

#[tokio::test]
async fn throttling_is_retried_with_backoff_then_reported_as_throttled() {
    let ctx = ctx().await;
    let endpoint = FailingEndpoint::start(400, "ProvisionedThroughputExceededException")
        .await
        .unwrap();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&ctx.aws.config)
            .endpoint_url(endpoint.url())
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    );
    let retry = RetryPolicy::default()
        .max_attempts(4)
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(5));
    let store = StateStore::new(
        client.clone(),
        StoreConfig::new("g", "s").unwrap().retry(retry),
    );
    let err = store.consumers().list().await.unwrap_err();
    match &err {
        StateError::Throttled {
            service,
            operation,
            attempts,
            message,
        } => {
            assert_eq!(*service, Service::DynamoDb);
            assert_eq!(*operation, "Query");
            assert_eq!(*attempts, 4);
            assert!(message.contains("injected"), "{message}");
        }
        other => panic!("expected Throttled, got {other:?}"),
    }
    assert!(err.is_throttled());
    assert_eq!(endpoint.hits(), 4, "one request per attempt, bounded");

    // Other service errors are not retried and keep their code.
    let broken = FailingEndpoint::start(400, "ValidationException")
        .await
        .unwrap();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&ctx.aws.config)
            .endpoint_url(broken.url())
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build(),
    );
    let store = StateStore::new(client, StoreConfig::new("g", "s").unwrap().retry(retry));
    match store.consumers().list().await.unwrap_err() {
        StateError::Sdk {
            code, operation, ..
        } => {
            assert_eq!(code.as_deref(), Some("ValidationException"));
            assert_eq!(operation, "Query");
        }
        other => panic!("expected Sdk, got {other:?}"),
    }
    assert_eq!(broken.hits(), 1);
}

#[tokio::test]
async fn a_stopped_store_refuses_calls() {
    let ctx = ctx().await;
    let store = ctx.store("stopped");
    store.consumers().list().await.unwrap();
    store.stop();
    assert!(store.is_stopped());
    assert!(matches!(
        store.consumers().list().await,
        Err(StateError::Stopped)
    ));
}

#[tokio::test]
async fn a_missing_table_is_an_error_naming_the_aws_code() {
    let ctx = ctx().await;
    let store = StateStore::new(
        ctx.aws.dynamodb.clone(),
        StoreConfig::new("g", "s")
            .unwrap()
            .table(&unique_name("sk-missing"))
            .unwrap(),
    );
    let me = shardkeeper::state::ConsumerId::new("c").unwrap();
    let err = store
        .consumers()
        .heartbeat(&shardkeeper::state::ConsumerInfo::for_this_process(
            me,
            store.now(),
        ))
        .await
        .unwrap_err();
    match &err {
        StateError::Sdk { code, .. } => {
            assert_eq!(code.as_deref(), Some("ResourceNotFoundException"), "{err}")
        }
        other => panic!("expected an SDK error, got {other:?}"),
    }
    // `table().ensure` (what every function runs at init) creates it.
    store.table().ensure(&fast()).await.unwrap();
    store
        .consumers()
        .heartbeat(&shardkeeper::state::ConsumerInfo::for_this_process(
            shardkeeper::state::ConsumerId::new("c").unwrap(),
            store.now(),
        ))
        .await
        .unwrap();
}
