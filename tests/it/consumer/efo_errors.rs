//! Every error the Kinesis API reference documents for the enhanced fan-out
//! pool's control-plane calls (RegisterStreamConsumer, DescribeStreamConsumer,
//! DeregisterStreamConsumer) gets a class, through the real SDK client and
//! the in-process servers, with the fault proxy answering the one call with
//! the error and its HTTP status; and a registration past the stream's quota
//! of consumers ends the worker instead of being retried for ever.
//!
//! Kinesis limits these calls with `LimitExceededException` (RegisterStreamConsumer
//! 5 a second per account, DescribeStreamConsumer 20 a second per stream,
//! DeregisterStreamConsumer 5): throttling, retried by the store's policy,
//! as the service's own failures (HTTP 500) are: its attempts are the only
//! ones, the clients do not retry.
//! From RegisterStreamConsumer it also means the stream already has the 20
//! consumers Kinesis allows: past the retries that is `StateError::EfoQuota`.

use crate::support::classes::{counted_kinesis, kinesis_at, of_error, quick_retries, Class};
use crate::support::common::{active_efo_consumer, create_stream, ctx, register_pool, stream_arn};
use crate::support::consume::{eager, worker_with, Log};
use crate::support::faulty::Faulty;
use shardkeeper::consumer::{lock_or_grow, EfoPool};
use shardkeeper::state::{ConsumerId, RetryPolicy, StateError, StateStore, StoreConfig};
use shardkeeper_local::unique_name;
use std::time::{Duration, Instant};

fn pool(prefix: &str) -> EfoPool {
    EfoPool::new(prefix, 2).poll_interval(Duration::from_millis(20))
}

/// A store of a group of its own on `stream`, retrying 3 times.
fn store(faulty: &Faulty, stream: &str) -> StateStore {
    StateStore::new(
        faulty.ctx.aws.dynamodb.clone(),
        StoreConfig::new(&unique_name("g"), stream)
            .unwrap()
            .table(&faulty.ctx.table)
            .unwrap()
            .retry(quick_retries(3)),
    )
}

/// Requests the proxy answered with the error it was told to.
fn told(faulty: &Faulty) -> u64 {
    faulty.kinesis.counts().failed_as_told
}

/// A consumer that grows the pool registers `<prefix>-00`. Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_RegisterStreamConsumer.html#API_RegisterStreamConsumer_Errors>:
/// `ResourceInUseException` (the name is registered: another consumer of
/// the group won the race) is adopted, `LimitExceededException` past the
/// retries is the stream's quota of consumers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_register_stream_consumer_error_has_its_class() {
    let faulty = Faulty::start(31).await;
    let stream = create_stream(&faulty.direct, 1).await;
    let arn = stream_arn(&faulty.direct, &stream).await;
    let kinesis = kinesis_at(&faulty.ctx, faulty.kinesis.url());
    let cases = [
        (400, "InvalidArgumentException", Some(Class::Permanent), 1),
        (400, "LimitExceededException", Some(Class::EfoQuota), 3),
        (400, "ResourceInUseException", None, 1),
        (400, "ResourceNotFoundException", Some(Class::NotFound), 1),
        (500, "InternalFailure", Some(Class::Transient), 3),
    ];
    let me = ConsumerId::new("c0").unwrap();
    for (i, (status, code, expected, attempts)) in cases.into_iter().enumerate() {
        let prefix = format!("reg{i}");
        if expected.is_none() {
            // Registered by another consumer of the group a moment before.
            active_efo_consumer(&faulty.direct, &arn, &format!("{prefix}-00")).await;
        }
        let store = store(&faulty, &stream);
        faulty
            .kinesis
            .fail_operation("RegisterStreamConsumer", status, code)
            .unwrap();
        let before = told(&faulty);
        let got = lock_or_grow(&store, &kinesis, &me, &pool(&prefix)).await;
        faulty.kinesis.stop_failing_operations();
        assert_eq!(told(&faulty) - before, attempts, "{code}: attempts");
        match (got, expected) {
            (Ok(Some(lock)), None) => assert_eq!(lock.name.as_str(), format!("{prefix}-00")),
            (Err(error), Some(class)) => {
                assert_eq!(of_error(&error), class, "{code}: {error}");
                let message = error.to_string();
                assert!(message.contains("RegisterStreamConsumer"), "{message}");
                if class == Class::EfoQuota {
                    assert!(!error.is_transient(), "{code}");
                    assert!(message.contains("SHARDKEEPER_EFO_POOL_SIZE"), "{message}");
                } else {
                    assert!(message.contains(code), "{message}");
                }
            }
            (got, _) => panic!("{code}: {got:?}"),
        }
    }
}

/// A consumer registered by the pool is described until it is ACTIVE.
/// Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DescribeStreamConsumer.html#API_DescribeStreamConsumer_Errors>.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_describe_stream_consumer_error_has_its_class() {
    let faulty = Faulty::start(32).await;
    let stream = create_stream(&faulty.direct, 1).await;
    let kinesis = kinesis_at(&faulty.ctx, faulty.kinesis.url());
    let cases = [
        (400, "InvalidArgumentException", Class::Permanent, 1),
        (400, "LimitExceededException", Class::Throttled, 3),
        (400, "ResourceNotFoundException", Class::NotFound, 1),
        (500, "InternalFailure", Class::Transient, 3),
    ];
    let me = ConsumerId::new("c0").unwrap();
    for (i, (status, code, expected, attempts)) in cases.into_iter().enumerate() {
        let store = store(&faulty, &stream);
        faulty
            .kinesis
            .fail_operation("DescribeStreamConsumer", status, code)
            .unwrap();
        let before = told(&faulty);
        let error = lock_or_grow(&store, &kinesis, &me, &pool(&format!("desc{i}")))
            .await
            .unwrap_err();
        faulty.kinesis.stop_failing_operations();
        assert_eq!(told(&faulty) - before, attempts, "{code}: attempts");
        assert_eq!(of_error(&error), expected, "{code}: {error}");
        assert!(
            error.to_string().contains("DescribeStreamConsumer"),
            "{error}"
        );
        if matches!(expected, Class::Throttled | Class::Transient) {
            assert!(error.is_transient(), "{code}");
        } else {
            assert!(error.to_string().contains(code), "{error}");
        }
    }
}

/// The reaper deregisters an idle consumer of the pool. Codes from
/// <https://docs.aws.amazon.com/kinesis/latest/APIReference/API_DeregisterStreamConsumer.html#API_DeregisterStreamConsumer_Errors>:
/// `ResourceNotFoundException` means it is gone already, and its entry is
/// removed as if the call had succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_deregister_stream_consumer_error_has_its_class() {
    let faulty = Faulty::start(33).await;
    let stream = create_stream(&faulty.direct, 1).await;
    let arn = stream_arn(&faulty.direct, &stream).await;
    let kinesis = kinesis_at(&faulty.ctx, faulty.kinesis.url());
    let cases = [
        (400, "InvalidArgumentException", Some(Class::Permanent), 1),
        (400, "LimitExceededException", Some(Class::Throttled), 3),
        (400, "ResourceNotFoundException", None, 1),
        (500, "InternalFailure", Some(Class::Transient), 3),
    ];
    for (i, (status, code, expected, attempts)) in cases.into_iter().enumerate() {
        let store = store(&faulty, &stream);
        let registered = register_pool(&faulty.direct, &store, &arn, [format!("dereg{i}")]).await;
        let (name, consumer_arn) = &registered[0];
        let entry = store.efo_consumers().list().await.unwrap().remove(0);
        faulty
            .kinesis
            .fail_operation("DeregisterStreamConsumer", status, code)
            .unwrap();
        let before = told(&faulty);
        let got = store
            .efo_consumers()
            .remove_idle(&kinesis, name, consumer_arn, entry.lock_counter)
            .await;
        faulty.kinesis.stop_failing_operations();
        assert_eq!(told(&faulty) - before, attempts, "{code}: attempts");
        match (got, expected) {
            (Ok(removed), None) => {
                assert!(removed, "{code}: removed");
                assert!(store.efo_consumers().list().await.unwrap().is_empty());
            }
            (Err(error), Some(class)) => {
                let error = shardkeeper::Error::from(error);
                assert_eq!(of_error(&error), class, "{code}: {error}");
                assert!(
                    error.to_string().contains("DeregisterStreamConsumer"),
                    "{error}"
                );
            }
            (got, _) => panic!("{code}: {got:?}"),
        }
    }
}

/// Kinesis allows 20 enhanced fan-out consumers a stream, every
/// application's counted; past them RegisterStreamConsumer answers
/// `LimitExceededException`
/// (<https://docs.aws.amazon.com/kinesis/latest/APIReference/API_RegisterStreamConsumer.html#API_RegisterStreamConsumer_Errors>).
/// It is retried as throttling (it can be the limit of registrations at
/// once), then ends the worker's run with `StateError::EfoQuota`, before
/// its first heartbeat; before, it was retried as throttling for ever. The
/// in-process server refuses the 21st consumer itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_past_the_consumer_quota_ends_the_worker_after_bounded_attempts() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    for i in 0..20 {
        // Kinesis takes 5 registrations a second per account: the test's
        // own are sent again when refused for that.
        let register = ctx
            .aws
            .kinesis
            .register_stream_consumer()
            .stream_arn(&arn)
            .consumer_name(format!("other-app-{i:02}"));
        while let Err(e) = register.clone().send().await {
            let throttled = e
                .as_service_error()
                .is_some_and(|e| e.is_limit_exceeded_exception());
            assert!(throttled, "{e:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    let (kinesis, requests) = counted_kinesis(&ctx);
    let store = ctx.store(&stream);
    let config = eager().enhanced_fan_out(Some(pool("grp")));
    let mut worker = worker_with(&store, &kinesis, "w0", Log::default(), config);
    let started = Instant::now();
    let error = worker
        .run_until(Some(started + Duration::from_secs(60)), || false)
        .await
        .unwrap_err();
    let attempts = RetryPolicy::default().max_attempts;
    match error.as_state() {
        Some(StateError::EfoQuota {
            attempts: made,
            message,
        }) => {
            assert_eq!(*made, attempts);
            // The service's own words (each server has its own).
            assert!(message.to_lowercase().contains("consumers"), "{message}");
        }
        _ => panic!("expected EfoQuota, got {error:?}"),
    }
    assert!(!error.is_transient() && !error.is_throttled());
    assert!(
        error.to_string().contains("SHARDKEEPER_EFO_POOL_SIZE"),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ended at once, not at the deadline: {:?}",
        started.elapsed()
    );
    let registrations = requests
        .snapshot()
        .get("RegisterStreamConsumer")
        .map_or(0, |c| c.requests);
    assert_eq!(registrations, u64::from(attempts), "bounded attempts");
    assert!(store.efo_consumers().list().await.unwrap().is_empty());
    assert!(
        store.consumers().list().await.unwrap().is_empty(),
        "ended before its first heartbeat"
    );
}
