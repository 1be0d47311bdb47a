//! Idempotency by content: producer duplicates (one payload under two
//! sequence numbers) handled once, through the processor as Lambda calls
//! it and through the handler itself; a duplicate at the same moment; a
//! failed call; bad input with its typed error.

use crate::support::common::{create_stream, ctx, lambda_context, stream_arn, Ctx};
use crate::support::esm::{kinesis_event, read_shard};
use aws_sdk_kinesis::primitives::Blob;
use lambda_runtime::{LambdaEvent, Service};
use serde::Deserialize;
use shardkeeper::idempotency::{idempotent, Claim, IdempotencyError, IdempotencyTable};
use shardkeeper::lambda::KinesisProcessor;
use shardkeeper::processing::{HandlerError, RecordHandler, StreamRecord};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Deserialize)]
struct Payment {
    id: String,
    cents: u64,
}

/// Calls of the handler, by payment id.
type Calls = Arc<Mutex<BTreeMap<String, u32>>>;

/// The key of a record: its payment's id.
fn payment_id(record: &StreamRecord) -> Option<String> {
    record.json::<Payment>().ok().map(|p| p.id)
}

/// A handler that counts its calls by payment id, and returns the cents.
fn counting(
    calls: Calls,
) -> impl Fn(
    StreamRecord,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<u64, HandlerError>> + Send>>
       + Send
       + Sync
       + 'static {
    move |record: StreamRecord| {
        let calls = calls.clone();
        Box::pin(async move {
            let payment: Payment = record.json()?;
            tokio::time::sleep(Duration::from_millis(5)).await;
            *calls.lock().unwrap().entry(payment.id).or_default() += 1;
            Ok(payment.cents)
        })
    }
}

fn record(seq: u64, payload: &str) -> StreamRecord {
    StreamRecord {
        shard_id: "shardId-000000000000".into(),
        sequence_number: format!("{seq:056}").into(),
        sub_sequence: 0,
        aggregated: false,
        partition_key: "k".into(),
        explicit_hash_key: None,
        data: bytes::Bytes::from(payload.to_owned()),
        approximate_arrival: None,
        event_source_arn: None,
        change: None,
    }
}

/// A table of its own for one test (entries of other tests never meet).
fn table(ctx: &Ctx) -> IdempotencyTable {
    IdempotencyTable::in_state(&ctx.store(&shardkeeper_local::unique_name("idem")))
}

/// A stream of one shard holding `payloads` (producer duplicates are the
/// same payload put twice: two sequence numbers).
async fn stream_of(ctx: &Ctx, payloads: &[&str]) -> (String, String, String) {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut shard = String::new();
    for (i, p) in payloads.iter().enumerate() {
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(format!("p{i}"))
            .data(Blob::new(p.as_bytes().to_vec()))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    (stream, arn, shard)
}

/// A producer's retried `PutRecord` (one payload under a new sequence
/// number), in the same batch and in the next, runs the handler once with
/// either claim; each repeat hands back the first call's result.
#[tokio::test]
async fn a_producer_duplicate_runs_once_and_hands_back_the_stored_result() {
    let ctx = ctx().await;
    for claim in [Claim::BeforeRun, Claim::AtCompletion] {
        let a = r#"{"id":"a","cents":100}"#;
        let b = r#"{"id":"b","cents":250}"#;
        let (stream, arn, shard) = stream_of(&ctx, &[a, b, a, a, b]).await;
        let records = read_shard(&ctx, &stream, &shard).await;
        let calls: Calls = Arc::default();
        let repeats: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let noted = repeats.clone();
        let store = ctx.store(&stream);
        let handler = idempotent(
            IdempotencyTable::in_state(&store),
            payment_id,
            counting(calls.clone()),
        )
        .claim(claim)
        .on_repeat(move |record, cents: u64| {
            noted
                .lock()
                .unwrap()
                .push((payment_id(record).unwrap(), cents));
        });
        let mut processor = KinesisProcessor::new(handler).with_store(store);
        // Two batches: the first three records, then the last two.
        for part in [&records[..3], &records[3..]] {
            let event = kinesis_event(&arn, &shard, part);
            let response = processor
                .call(LambdaEvent::new(
                    serde_json::value::RawValue::from_string(event.to_string()).unwrap(),
                    lambda_context(Duration::from_secs(60)),
                ))
                .await
                .unwrap();
            assert!(response.batch_item_failures.is_empty(), "{claim:?}");
        }
        let calls = calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            BTreeMap::from([("a".into(), 1), ("b".into(), 1)]),
            "{claim:?}"
        );
        let mut repeats = repeats.lock().unwrap().clone();
        repeats.sort();
        assert_eq!(
            repeats,
            vec![("a".into(), 100), ("a".into(), 100), ("b".into(), 250)],
            "{claim:?}"
        );
    }
}

/// Powertools' in-progress state: a duplicate handled while the first call
/// runs (another shard, another lane) waits for it and finds it completed,
/// or fails with `InProgress`; the handler never runs twice at once.
#[tokio::test]
async fn a_duplicate_at_the_same_moment_waits_or_fails_and_never_runs_twice() {
    let ctx = ctx().await;
    let calls: Calls = Arc::default();
    let slow = {
        let calls = calls.clone();
        move |record: StreamRecord| {
            let calls = calls.clone();
            async move {
                let payment: Payment = record.json()?;
                *calls.lock().unwrap().entry(payment.id).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok::<_, HandlerError>(())
            }
        }
    };
    let handler = Arc::new(idempotent(table(&ctx), payment_id, slow));
    let payload = r#"{"id":"x","cents":1}"#;
    let (first, second) = tokio::join!(
        handler.handle(record(1, payload)),
        handler.handle(record(2, payload)),
    );
    assert_eq!(calls.lock().unwrap().get("x"), Some(&1));
    for result in [first, second] {
        if let Err(e) = result {
            assert!(
                matches!(
                    e.downcast_ref::<IdempotencyError>(),
                    Some(IdempotencyError::InProgress { .. })
                ),
                "{e}"
            );
        }
    }
}

/// A call that fails leaves no claim behind: its retry runs at once.
#[tokio::test]
async fn a_failed_call_releases_its_claim_for_the_retry() {
    let ctx = ctx().await;
    let attempts = Arc::new(Mutex::new(0));
    let flaky = {
        let attempts = attempts.clone();
        move |_: StreamRecord| {
            let attempts = attempts.clone();
            async move {
                let mut n = attempts.lock().unwrap();
                *n += 1;
                if *n == 1 {
                    return Err("down for a moment".to_owned());
                }
                Ok(())
            }
        }
    };
    let handler = idempotent(table(&ctx), payment_id, flaky);
    let payload = r#"{"id":"y","cents":1}"#;
    assert!(handler.handle(record(1, payload)).await.is_err());
    handler.handle(record(1, payload)).await.unwrap();
    handler.handle(record(2, payload)).await.unwrap();
    assert_eq!(*attempts.lock().unwrap(), 2);
}

/// Bad input gets a typed error: no key in the record; a key completed with
/// another payload (validation on); a stored result that does not read as
/// the handler's result type. Nothing is lost: each fails its record.
#[tokio::test]
async fn bad_input_fails_its_record_with_a_typed_error() {
    let ctx = ctx().await;
    let calls: Calls = Arc::default();
    let table = table(&ctx);
    let handler = idempotent(table.clone(), payment_id, counting(calls.clone()))
        .validate(|record| record.data.to_vec());
    let error = handler.handle(record(1, "not json")).await.unwrap_err();
    assert!(matches!(
        error.downcast_ref::<IdempotencyError>(),
        Some(IdempotencyError::NoKey { .. })
    ));
    handler
        .handle(record(2, r#"{"id":"z","cents":5}"#))
        .await
        .unwrap();
    let error = handler
        .handle(record(3, r#"{"id":"z","cents":6}"#))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error.downcast_ref::<IdempotencyError>(),
            Some(IdempotencyError::PayloadMismatch { key }) if key == "z"
        ),
        "{error}"
    );
    // The same key read by a handler whose results are strings.
    let strings = idempotent(table, payment_id, |_: StreamRecord| async {
        Ok::<String, HandlerError>("s".into())
    })
    .on_repeat(|_, _: String| {});
    let error = strings
        .handle(record(4, r#"{"id":"z","cents":5}"#))
        .await
        .unwrap_err();
    assert!(matches!(
        error.downcast_ref::<IdempotencyError>(),
        Some(IdempotencyError::StoredResult { .. })
    ));
    assert_eq!(calls.lock().unwrap().get("z"), Some(&1));
}

/// A completion past its expiry keeps nothing from running again.
#[tokio::test]
async fn a_completion_past_its_expiry_lets_the_key_run_again() {
    let ctx = ctx().await;
    let calls: Calls = Arc::default();
    let handler = idempotent(table(&ctx), payment_id, counting(calls.clone()))
        .claim(Claim::AtCompletion)
        .expires_after(Duration::ZERO);
    let payload = r#"{"id":"e","cents":1}"#;
    handler.handle(record(1, payload)).await.unwrap();
    // Expiry is kept in whole seconds, as DynamoDB's TTL.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    handler.before_batch(&[&record(2, payload)]).await;
    handler.handle(record(2, payload)).await.unwrap();
    assert_eq!(calls.lock().unwrap().get("e"), Some(&2));
}
