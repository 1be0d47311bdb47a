use super::*;

#[test]
fn backoff_doubles_and_caps() {
    let p = RetryPolicy {
        max_attempts: 10,
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
        max_elapsed: None,
    };
    assert_eq!(p.backoff_cap(1), Duration::from_millis(100));
    assert_eq!(p.backoff_cap(2), Duration::from_millis(200));
    assert_eq!(p.backoff_cap(4), Duration::from_millis(800));
    assert_eq!(p.backoff_cap(5), Duration::from_millis(1000));
    assert_eq!(p.backoff_cap(60), Duration::from_millis(1000));
    for attempt in 1..8 {
        assert!(p.backoff().delay(attempt) <= p.backoff_cap(attempt));
    }
}

#[test]
fn backoff_jitter_stays_in_its_range() {
    let exact = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(32),
        jitter: Jitter::None,
    };
    assert_eq!(exact.delay(1), Duration::from_secs(1));
    assert_eq!(exact.delay(6), Duration::from_secs(32));
    assert_eq!(exact.delay(40), Duration::from_secs(32));
    let more = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(1),
        jitter: Jitter::UpToHalfMore,
    };
    for attempt in 1..8 {
        let d = more.delay(attempt);
        assert!(d >= Duration::from_secs(1) && d < Duration::from_millis(1500));
    }
}

#[test]
fn throttling_codes() {
    assert!(is_throttling_code("ProvisionedThroughputExceededException"));
    assert!(is_throttling_code("ThrottlingException"));
    assert!(is_throttling_code("KMSThrottlingException"));
    assert!(!is_throttling_code("ConditionalCheckFailedException"));
    assert!(!is_throttling_code("ResourceNotFoundException"));
}

/// Each code's class once the retries are done, by service and call:
/// the one table behind `StateError::is_transient` and the variants.
#[test]
fn every_code_has_its_class_by_service_and_call() {
    use Service::{DynamoDb, Kinesis, Lambda};
    let class = |e: &StateError| match e {
        StateError::Throttled { .. } => "throttled",
        StateError::EfoQuota { .. } => "efo quota",
        StateError::KmsKey { .. } => "kms key",
        e if e.is_transient() => "transient",
        _ => "permanent",
    };
    let cases = [
        (
            Kinesis,
            "RegisterStreamConsumer",
            "LimitExceededException",
            "efo quota",
        ),
        (
            Kinesis,
            "DescribeStreamConsumer",
            "LimitExceededException",
            "throttled",
        ),
        (Kinesis, "ListShards", "LimitExceededException", "throttled"),
        (Kinesis, "ListShards", "ResourceInUseException", "transient"),
        (
            Kinesis,
            "ListShards",
            "ExpiredNextTokenException",
            "transient",
        ),
        (
            Kinesis,
            "RegisterStreamConsumer",
            "ResourceInUseException",
            "permanent",
        ),
        (Kinesis, "PutRecord", "KMSThrottlingException", "throttled"),
        (Kinesis, "PutRecord", "KMSDisabledException", "kms key"),
        (Kinesis, "GetRecords", "KMSOptInRequired", "kms key"),
        (
            Kinesis,
            "GetRecords",
            "InternalFailureException",
            "transient",
        ),
        (Kinesis, "GetRecords", "AccessDeniedException", "permanent"),
        (
            DynamoDb,
            "UpdateItem",
            "TransactionConflictException",
            "transient",
        ),
        (
            DynamoDb,
            "UpdateItem",
            "ReplicatedWriteConflictException",
            "transient",
        ),
        (
            DynamoDb,
            "TransactWriteItems",
            "TransactionInProgressException",
            "transient",
        ),
        (
            DynamoDb,
            "TransactWriteItems",
            "IdempotentParameterMismatchException",
            "permanent",
        ),
        (
            DynamoDb,
            "UpdateTimeToLive",
            "ResourceInUseException",
            "transient",
        ),
        (
            DynamoDb,
            "CreateTable",
            "ResourceInUseException",
            "permanent",
        ),
        (
            DynamoDb,
            "CreateTable",
            "LimitExceededException",
            "throttled",
        ),
        (DynamoDb, "Query", "InternalServerError", "transient"),
        (DynamoDb, "Query", "ResourceNotFoundException", "permanent"),
        (DynamoDb, "GetItem", "RequestLimitExceeded", "throttled"),
        (Lambda, "Invoke", "TooManyRequestsException", "throttled"),
        (Lambda, "Invoke", "EC2ThrottledException", "throttled"),
        (Lambda, "Invoke", "ServiceException", "transient"),
        (Lambda, "Invoke", "ResourceConflictException", "transient"),
        (Lambda, "Invoke", "KMSNotFoundException", "kms key"),
        (Lambda, "Invoke", "ResourceNotFoundException", "permanent"),
    ];
    for (service, operation, code, expected) in cases {
        let e = service_error(service, operation, Some(code.into()), "m".into(), 3);
        assert_eq!(class(&e), expected, "{service} {operation} {code}: {e}");
        let transient = matches!(expected, "throttled" | "transient");
        assert_eq!(e.is_transient(), transient, "{service} {operation} {code}");
    }
    let quota = service_error(
        Kinesis,
        "RegisterStreamConsumer",
        Some("LimitExceededException".into()),
        "m".into(),
        3,
    );
    assert!(
        quota.to_string().contains("SHARDKEEPER_EFO_POOL_SIZE"),
        "{quota}"
    );
    let kms = service_error(
        Kinesis,
        "GetRecords",
        Some("KMSDisabledException".into()),
        "m".into(),
        1,
    );
    assert!(
        kms.to_string()
            .starts_with("Kinesis GetRecords failed: the stream's KMS key is disabled"),
        "{kms}"
    );
}

/// A call whose every attempt hangs starts no attempt once `max_elapsed`
/// has passed since its first, whatever attempts are left (virtual time).
#[tokio::test(start_paused = true)]
async fn a_call_starts_no_attempt_past_its_time_limit() {
    let policy = RetryPolicy::default().max_elapsed(Some(Duration::from_secs(10)));
    let started = tokio::time::Instant::now();
    let mut sent = 0;
    let out: Result<(), Retried<()>> = retry_throttled(
        &policy,
        "Hangs",
        |_| true,
        || false,
        || {
            sent += 1;
            async {
                tokio::time::sleep(Duration::from_secs(4)).await;
                Err(())
            }
        },
    )
    .await;
    assert!(
        matches!(out, Err(Retried::Failed { attempts: 3, .. })),
        "{out:?}"
    );
    assert_eq!(sent, 3);
    assert!(started.elapsed() <= Duration::from_secs(10) + Duration::from_secs(4));
}

/// A failure without an AWS error code is transient only when no answer came
/// (a timeout, a failed connection, an unreadable 5xx answer): a request the
/// SDK could not build or the connector refused as invalid, and a 4xx answer
/// that names no error, fail again however often they are sent, so a loop
/// that rides out transient failures must not ride them out for ever.
#[tokio::test]
async fn a_failure_without_a_code_is_transient_only_when_no_answer_came() {
    use aws_sdk_dynamodb::operation::get_item::GetItemError;
    use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
    use aws_smithy_runtime_api::client::result::ConnectorError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    type Failure = SdkError<GetItemError, HttpResponse>;
    fn page(status: u16) -> HttpResponse {
        HttpResponse::new(
            StatusCode::try_from(status).unwrap(),
            SdkBody::from("<html>not an AWS answer</html>"),
        )
    }
    type Case = (&'static str, fn() -> Failure, bool);
    let cases: Vec<Case> = vec![
        ("timed out", || SdkError::timeout_error("timed out"), true),
        (
            "connection failed",
            || SdkError::dispatch_failure(ConnectorError::io("reset".into())),
            true,
        ),
        (
            "an unreadable 5xx answer",
            || SdkError::response_error("unreadable", page(502)),
            true,
        ),
        (
            "not built",
            || SdkError::construction_failure("no region"),
            false,
        ),
        (
            "refused as invalid by the connector",
            || SdkError::dispatch_failure(ConnectorError::user("invalid header".into())),
            false,
        ),
        (
            "an unreadable 4xx answer",
            || SdkError::response_error("unreadable", page(403)),
            false,
        ),
    ];
    for (what, failure, transient) in cases {
        let out: Result<(), CallError<GetItemError>> = with_retries(
            &RetryPolicy::none(),
            Service::DynamoDb,
            "GetItem",
            || false,
            || async move { Err(failure()) },
        )
        .await;
        let Err(CallError::Failed(e)) = out else {
            panic!("{what}: {out:?}");
        };
        assert_eq!(e.is_transient(), transient, "{what}: {e:?}");
    }
}
