//! The Kinesis batch processor end to end: records put into the Kinesis
//! server, read back, shaped as the event source mapping shapes them, and
//! handled through lambda_runtime's service.

use crate::support::common::{create_stream, ctx, lambda_context, stream_arn, Ctx};
use crate::support::esm::{kinesis_event, read_shard};
use aws_sdk_kinesis::primitives::Blob;
use lambda_runtime::{LambdaEvent, Service};
use serde::Deserialize;
use serde_json::value::RawValue;
use shardkeeper::kpl;
use shardkeeper::lambda::KinesisProcessor;
use shardkeeper::processing::{
    json, FailureMode, Parking, ProcessingOptions, RecordError, StreamRecord,
};
use shardkeeper::state::{BatchKey, SequenceNumber, ShardId, ShardScope, StreamAddress};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Deserialize, PartialEq)]
struct Order {
    id: u32,
    amount: u64,
}

struct Fixture {
    stream: String,
    arn: String,
    shard: String,
}

async fn stream_with(ctx: &Ctx, payloads: &[Vec<u8>]) -> Fixture {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut shard = String::new();
    for (i, p) in payloads.iter().enumerate() {
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(format!("customer-{i}"))
            .data(Blob::new(p.clone()))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    Fixture { stream, arn, shard }
}

/// Options that park a record after `max_attempts` failures, as `parking` says.
fn parking_after(max_attempts: u32, parking: Parking) -> ProcessingOptions {
    ProcessingOptions::default()
        .max_attempts(max_attempts)
        .parking(parking)
}

/// The progress stored for the batch that starts at `records[0]`.
async fn batch_progress(
    store: &shardkeeper::state::StateStore,
    fx: &Fixture,
    records: &[aws_sdk_kinesis::types::Record],
) -> shardkeeper::state::Checkpoint {
    store
        .record_state()
        .batch_progress(&batch_of(fx, records))
        .await
        .unwrap()
        .expect("a checkpoint of the batch")
        .checkpoint
}

/// The key of the batch that starts at `records[0]`.
fn batch_of(fx: &Fixture, records: &[aws_sdk_kinesis::types::Record]) -> BatchKey {
    BatchKey {
        // The consumer of a processor run without an invocation context.
        consumer: "local".to_owned(),
        stream: fx.arn.clone(),
        shard: Some(fx.shard.clone()),
        first_event_id: None,
        first: SequenceNumber::new(records[0].sequence_number()).unwrap(),
    }
}

fn orders(n: u32) -> Vec<Vec<u8>> {
    (1..=n)
        .map(|i| format!("{{\"id\":{i},\"amount\":{}}}", i * 10).into_bytes())
        .collect()
}

fn raw(event: &serde_json::Value) -> Box<RawValue> {
    RawValue::from_string(event.to_string()).unwrap()
}

type Seen = Arc<Mutex<Vec<(u32, u64)>>>;

/// A typed handler that records every order it sees and fails on the ids in `fail_on`.
fn recording(
    seen: Seen,
    fail_on: Arc<Mutex<Vec<u32>>>,
) -> impl shardkeeper::processing::RecordHandler {
    json(move |order: Order, record: StreamRecord| {
        let seen = seen.clone();
        let fail_on = fail_on.clone();
        async move {
            if fail_on.lock().unwrap().contains(&order.id) {
                return Err(format!("order {} rejected", order.id));
            }
            seen.lock().unwrap().push((order.id, record.sub_sequence));
            Ok(())
        }
    })
}

fn failures(response: &aws_lambda_events::event::streams::KinesisEventResponse) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn a_batch_is_processed_in_order_through_the_lambda_service() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(5)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let seen: Seen = Arc::default();
    let mut processor = KinesisProcessor::new(recording(seen.clone(), Arc::default()))
        .with_store(ctx.store(&fx.stream));
    let response = processor
        .call(LambdaEvent::new(
            raw(&event),
            lambda_context(Duration::from_secs(60)),
        ))
        .await
        .unwrap();
    assert!(response.batch_item_failures.is_empty());
    let ids: Vec<u32> = seen.lock().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn a_retried_batch_does_not_repeat_side_effects() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(6)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let store = ctx.store(&fx.stream);
    let seen: Seen = Arc::default();
    let fail_on = Arc::new(Mutex::new(vec![4]));
    let processor =
        KinesisProcessor::new(recording(seen.clone(), fail_on.clone())).with_store(store.clone());

    let first = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(first.processed, 3);
    assert_eq!(first.not_attempted, 2, "stops at the first failure");
    assert_eq!(first.failures.len(), 1);
    assert_eq!(
        first.failures[0].item_identifier,
        records[3].sequence_number()
    );
    assert!(matches!(
        first.failures[0].error,
        RecordError::Handler { .. }
    ));
    let cp = batch_progress(&store, &fx, &records).await;
    assert_eq!(
        cp.to_string(),
        records[2].sequence_number(),
        "checkpoint after the successful prefix, under the batch's key"
    );
    // Never in the group's lease items.
    let lease_item = store
        .shards()
        .get(&ShardScope::Group, &ShardId::new(&fx.shard).unwrap())
        .await;
    assert!(lease_item.is_err(), "{lease_item:?}");

    // The whole batch comes again (a timeout, a crash): the prefix is skipped.
    fail_on.lock().unwrap().clear();
    let second = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(second.duplicates_skipped, 3);
    assert_eq!(second.processed, 3);
    assert!(second.failures.is_empty());
    let ids: Vec<u32> = seen.lock().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        vec![1, 2, 3, 4, 5, 6],
        "each order handled exactly once"
    );
}

#[tokio::test]
async fn a_poison_record_is_parked_after_max_attempts_and_the_shard_moves_on() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(3)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let store = ctx.store(&fx.stream);
    let seen: Seen = Arc::default();
    let options = parking_after(
        3,
        Parking::StateTable {
            ttl: Duration::from_secs(3600),
        },
    );
    let processor = KinesisProcessor::new(recording(seen.clone(), Arc::new(Mutex::new(vec![2]))))
        .with_store(store.clone())
        .with_options(options);
    for attempt in 1..=2 {
        // The event source mapping re-delivers from the failed record.
        let event = kinesis_event(&fx.arn, &fx.shard, &records[1..]);
        let report = processor.process(&event.to_string(), None).await.unwrap();
        assert_eq!(report.failures.len(), 1, "attempt {attempt}");
        assert_eq!(report.parked, 0);
    }
    let event = kinesis_event(&fx.arn, &fx.shard, &records[1..]);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.parked, 1);
    assert!(
        report.failures.is_empty(),
        "the next record is processed: {report:?}"
    );
    assert_eq!(report.processed, 1);
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[1].sequence_number()
    );
    assert_eq!(parked[0].attempts, 3);
    assert_eq!(parked[0].data, records[1].data().as_ref());
    assert!(
        parked[0].error.contains("order 2 rejected"),
        "{}",
        parked[0].error
    );
}

#[tokio::test]
async fn poison_records_can_go_to_a_dead_letter_stream() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(2)).await;
    let dlq = create_stream(&ctx.aws, 1).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let options = parking_after(
        1,
        Parking::DeadLetterStream {
            client: ctx.aws.kinesis.clone(),
            stream: StreamAddress::parse(&dlq).unwrap(),
        },
    );
    let processor = KinesisProcessor::new(recording(Arc::default(), Arc::new(Mutex::new(vec![1]))))
        .with_store(ctx.store(&fx.stream))
        .with_options(options);
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!((report.parked, report.processed), (1, 1));
    let shards = crate::support::common::list_shards(&ctx.aws, &dlq).await;
    let dead = read_shard(&ctx, &dlq, shards[0].shard_id()).await;
    assert_eq!(dead.len(), 1);
    let envelope: serde_json::Value = serde_json::from_slice(dead[0].data().as_ref()).unwrap();
    assert_eq!(envelope["sequence_number"], records[0].sequence_number());
    assert_eq!(envelope["attempts"], 1);
    assert_eq!(dead[0].partition_key(), Some("customer-0"));
}

#[tokio::test]
async fn kpl_aggregates_are_deaggregated_and_resume_at_the_sub_sequence() {
    let ctx = ctx().await;
    let payloads: Vec<Vec<u8>> = (0..2)
        .map(|a| {
            let orders: Vec<String> = (0..4)
                .map(|i| format!("{{\"id\":{},\"amount\":1}}", a * 10 + i))
                .collect();
            let recs: Vec<(&str, Option<&str>, &[u8])> = orders
                .iter()
                .map(|o| ("user-key", None, o.as_bytes()))
                .collect();
            kpl::aggregate(&recs)
        })
        .collect();
    let fx = stream_with(&ctx, &payloads).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let seen: Seen = Arc::default();
    let fail_on = Arc::new(Mutex::new(vec![12]));
    let processor = KinesisProcessor::new(recording(seen.clone(), fail_on.clone()))
        .with_store(ctx.store(&fx.stream));
    let first = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(first.processed, 6);
    assert_eq!(
        first.failures[0].item_identifier,
        records[1].sequence_number()
    );
    fail_on.lock().unwrap().clear();
    let retry = kinesis_event(&fx.arn, &fx.shard, &records[1..]);
    let second = processor.process(&retry.to_string(), None).await.unwrap();
    assert_eq!(
        second.duplicates_skipped, 2,
        "sub-sequences 0 and 1 of the second aggregate"
    );
    assert_eq!(second.processed, 2);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            (0, 0),
            (1, 1),
            (2, 2),
            (3, 3),
            (10, 0),
            (11, 1),
            (12, 2),
            (13, 3)
        ],
        "(order, sub-sequence) in order, each once"
    );
}

fn md5_digest(bytes: &[u8]) -> Vec<u8> {
    use md5::Digest;
    md5::Md5::digest(bytes).to_vec()
}

#[tokio::test]
async fn malformed_input_fails_per_record_with_clear_errors() {
    let ctx = ctx().await;
    // Starts with the KPL prefix, but its digest does not match: a plain
    // record (KCL reads it so), handed to the handler, whose JSON it is not.
    let mut plain_with_prefix = kpl::aggregate(&[("k", None, b"{\"id\":1,\"amount\":1}")]);
    let last = plain_with_prefix.len() - 1;
    plain_with_prefix[last] ^= 0xFF;
    // A matching digest over a broken body: a corrupt aggregate.
    let body = [(3u8 << 3) | 2, 50, 1, 2];
    let mut corrupt = kpl::MAGIC.to_vec();
    corrupt.extend_from_slice(&body);
    corrupt.extend_from_slice(&md5_digest(&body));
    let fx = stream_with(
        &ctx,
        &[
            b"{\"id\":1,\"amount\":5}".to_vec(),
            b"not json".to_vec(),
            plain_with_prefix,
            b"{\"id\":4}".to_vec(),
            corrupt,
        ],
    )
    .await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let mut event = kinesis_event(&fx.arn, &fx.shard, &records);
    // A fifth record whose data is not base64.
    let mut bad = event["Records"][0].clone();
    bad["kinesis"]["data"] = serde_json::json!("%%% not base64 %%%");
    bad["kinesis"]["sequenceNumber"] =
        serde_json::json!("99999999999999999999999999999999999999999999999999999999");
    event["Records"].as_array_mut().unwrap().push(bad);

    let options = ProcessingOptions::default().mode(FailureMode::ReportAllFailures);
    let seen: Seen = Arc::default();
    let processor =
        KinesisProcessor::new(recording(seen.clone(), Arc::default())).with_options(options);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.processed, 1);
    let errors: BTreeMap<String, String> = report
        .failures
        .iter()
        .map(|f| (f.item_identifier.clone(), f.error.to_string()))
        .collect();
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert!(
        errors[records[1].sequence_number()].contains("payload does not decode: expected ident"),
        "{errors:#?}"
    );
    assert!(
        errors[records[2].sequence_number()].contains("payload does not decode"),
        "{errors:#?}"
    );
    assert!(
        errors[records[4].sequence_number()].contains("protobuf is malformed"),
        "{errors:#?}"
    );
    assert!(
        errors[records[3].sequence_number()].contains("missing field `amount`"),
        "{errors:#?}"
    );
    assert!(
        errors["99999999999999999999999999999999999999999999999999999999"].contains("malformed"),
        "{errors:#?}"
    );

    // Not a Kinesis event at all: an error for the invocation, not a panic.
    assert!(processor.process("{\"hello\": 1}", None).await.is_err());
    assert!(processor.process("not json", None).await.is_err());
}

/// Lambda kills an invocation at its deadline, so the processor stops
/// first: with the margin (1.5 s) or more left, no record starts later than
/// the deadline minus the margin; with less, half of what is left. A handler
/// still running then is given up, and what was done before is checkpointed.
#[tokio::test]
async fn the_deadline_stops_the_batch_and_reports_the_rest() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(3)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let seen: Seen = Arc::default();
    let store = ctx.store(&fx.stream);
    let slow = {
        let seen = seen.clone();
        json(move |order: Order, record: StreamRecord| {
            let seen = seen.clone();
            async move {
                // The first record is quick; the second never finishes
                // (so how loaded the machine is does not matter).
                if order.id > 1 {
                    std::future::pending::<()>().await;
                }
                seen.lock().unwrap().push((order.id, record.sub_sequence));
                Ok::<(), std::io::Error>(())
            }
        })
    };
    let processor = KinesisProcessor::new(slow).with_store(store.clone());
    // 500 ms left, below the margin: the work may take 250 ms. The first
    // record completes, the second is given up at 250 ms.
    let response = processor
        .handle(LambdaEvent::new(
            raw(&event),
            lambda_context(Duration::from_millis(500)),
        ))
        .await
        .unwrap();
    assert_eq!(
        failures(&response),
        vec![records[1].sequence_number().to_owned()],
        "the first record not completed"
    );
    assert_eq!(seen.lock().unwrap().clone(), vec![(1, 0)]);
    let cp = batch_progress(&store, &fx, &records).await;
    assert_eq!(cp.to_string(), records[0].sequence_number());

    // Fast records in the same little time all run.
    let fast: Seen = Arc::default();
    let processor = KinesisProcessor::new(recording(fast.clone(), Arc::default()));
    let response = processor
        .handle(LambdaEvent::new(
            raw(&event),
            lambda_context(Duration::from_millis(500)),
        ))
        .await
        .unwrap();
    assert!(failures(&response).is_empty());
    assert_eq!(fast.lock().unwrap().len(), 3);
}

/// A bulk handler: each call writes its run of orders at once and reports
/// the orders in `reject` as failed.
struct BulkWriter {
    calls: Arc<Mutex<Vec<Vec<u32>>>>,
    reject: u32,
}

impl shardkeeper::processing::RecordHandler for BulkWriter {
    const BATCHED: bool = true;

    async fn handle(&self, _: StreamRecord) -> Result<(), shardkeeper::processing::HandlerError> {
        unreachable!("a batched handler is called with runs")
    }

    async fn handle_batch(
        &self,
        records: Vec<StreamRecord>,
    ) -> Vec<Result<(), shardkeeper::processing::HandlerError>> {
        let orders: Vec<Order> = records.iter().map(|r| r.json().unwrap()).collect();
        self.calls
            .lock()
            .unwrap()
            .push(orders.iter().map(|o| o.id).collect());
        orders
            .iter()
            .map(|o| match o.id == self.reject {
                true => Err(format!("order {} rejected", o.id).into()),
                false => Ok(()),
            })
            .collect()
    }
}

/// A per-batch handler gets the batch as one run, and its per-record
/// failures map back like those of a per-record handler: the failed record
/// is reported (the event source mapping resumes there, as the
/// ReportBatchItemFailures contract says: "Lambda retries the batch starting
/// from the lowest sequence number reported"), its attempts are counted, and
/// once parked the shard moves on.
#[tokio::test]
async fn a_batch_handler_maps_each_failure_back_to_its_record() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(5)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let store = ctx.store(&fx.stream);
    let options = parking_after(
        2,
        Parking::StateTable {
            ttl: Duration::from_secs(3600),
        },
    );
    let calls: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
    let processor = KinesisProcessor::new(BulkWriter {
        calls: calls.clone(),
        reject: 3,
    })
    .with_store(store.clone())
    .with_options(options);

    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let first = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(first.processed, 2);
    assert_eq!(
        first.not_attempted, 2,
        "records after the failure are delivered again"
    );
    assert_eq!(first.failures.len(), 1);
    assert_eq!(
        first.failures[0].item_identifier,
        records[2].sequence_number()
    );
    let cp = batch_progress(&store, &fx, &records).await;
    assert_eq!(cp.to_string(), records[1].sequence_number());

    // Lambda resumes at the reported record.
    let event = kinesis_event(&fx.arn, &fx.shard, &records[2..]);
    let second = processor.process(&event.to_string(), None).await.unwrap();
    assert!(second.failures.is_empty(), "{second:?}");
    assert_eq!((second.parked, second.processed), (1, 2));
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[2].sequence_number()
    );
    assert_eq!(
        *calls.lock().unwrap(),
        vec![vec![1, 2, 3, 4, 5], vec![3, 4, 5]]
    );
}

/// A park that fails (here, a dead-letter stream that does not exist) fails
/// that record alone: it is reported, the prefix before it stays
/// checkpointed, and the invocation itself succeeds.
#[tokio::test]
async fn a_failed_park_reports_its_record_and_keeps_the_prefix() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(3)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let store = ctx.store(&fx.stream);
    let options = parking_after(
        1,
        Parking::DeadLetterStream {
            client: ctx.aws.kinesis.clone(),
            stream: StreamAddress::parse("no-such-dead-letter-stream").unwrap(),
        },
    );
    let seen: Seen = Arc::default();
    let processor = KinesisProcessor::new(recording(seen.clone(), Arc::new(Mutex::new(vec![2]))))
        .with_store(store.clone())
        .with_options(options);
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(
        (report.processed, report.parked, report.park_failures),
        (1, 0, 1)
    );
    assert_eq!(report.failures.len(), 1);
    assert_eq!(
        report.failures[0].item_identifier,
        records[1].sequence_number()
    );
    let cp = batch_progress(&store, &fx, &records).await;
    assert_eq!(cp.to_string(), records[0].sequence_number());
}

/// A record too large for a DynamoDB item (Kinesis records reach 1 MB, items
/// 400 KB) is parked with a bounded payload: a prefix, the whole size and
/// its SHA-256, under the record's coordinates.
#[tokio::test]
async fn an_oversized_record_is_parked_with_a_bounded_payload() {
    let ctx = ctx().await;
    let big = format!(
        "{{\"id\":1,\"amount\":1,\"pad\":\"{}\"}}",
        "x".repeat(900 * 1024)
    );
    let fx = stream_with(&ctx, &[big.clone().into_bytes()]).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let store = ctx.store(&fx.stream);
    let options = parking_after(
        1,
        Parking::StateTable {
            ttl: Duration::from_secs(3600),
        },
    );
    let processor = KinesisProcessor::new(recording(Arc::default(), Arc::new(Mutex::new(vec![1]))))
        .with_store(store.clone())
        .with_options(options);
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.parked, 1, "{report:?}");
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked[0].data_size, big.len() as u64);
    assert_eq!(parked[0].data, &big.as_bytes()[..1024]);
    let sha: String = {
        use sha2::Digest;
        sha2::Sha256::digest(big.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    assert_eq!(parked[0].data_sha256.as_deref(), Some(sha.as_str()));
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[0].sequence_number()
    );
    assert_eq!(parked[0].key.source.as_deref(), Some(fx.arn.as_str()));
}

/// A handler that panics on a record (the usual Rust poison record: an
/// `unwrap` on a payload it did not expect) fails that record, as a
/// handler's error does: the invocation answers, the attempt is counted,
/// and after `max_attempts` the record is parked and the shard moves on.
/// Before, the panic failed the whole invocation: nothing counted, nothing
/// parked, the shard stuck on the record (Lambda's default retries until
/// it expires).
#[tokio::test]
async fn a_handler_that_panics_on_a_record_fails_that_record_and_it_is_parked() {
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(3)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let store = ctx.store(&fx.stream);
    let seen: Seen = Arc::default();
    let options = parking_after(
        3,
        Parking::StateTable {
            ttl: Duration::from_secs(3600),
        },
    );
    let handled = seen.clone();
    let processor = KinesisProcessor::new(json(move |order: Order, record: StreamRecord| {
        let seen = handled.clone();
        async move {
            let checked: Result<u32, String> = match order.id {
                2 => Err("unexpected order".to_owned()),
                id => Ok(id),
            };
            let id = checked.unwrap();
            seen.lock().unwrap().push((id, record.sub_sequence));
            Ok::<(), String>(())
        }
    }))
    .with_store(store.clone())
    .with_options(options);
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let first = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(first.processed, 1);
    assert_eq!(first.failures.len(), 1, "{first:?}");
    assert!(
        matches!(&first.failures[0].error, RecordError::Panic { message, .. } if message.contains("unexpected order")),
        "{first:?}"
    );
    for attempt in 2..=3 {
        // The mapping re-delivers from the failed record.
        let event = kinesis_event(&fx.arn, &fx.shard, &records[1..]);
        let report = processor.process(&event.to_string(), None).await.unwrap();
        assert_eq!(
            report.parked,
            u64::from(attempt == 3),
            "attempt {attempt}: {report:?}"
        );
    }
    let parked = store.record_state().list_parked().await.unwrap();
    assert_eq!(parked.len(), 1);
    assert_eq!(
        parked[0].key.sequence.as_str(),
        records[1].sequence_number()
    );
    assert!(parked[0].error.contains("panicked"), "{}", parked[0].error);
    let ids: Vec<u32> = seen.lock().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 3], "the others once each");
}

/// A batch handler that panics on a run: the run goes again one record a
/// call, and only the record whose call panics fails.
#[tokio::test]
async fn a_batch_handler_that_panics_fails_only_the_record_that_panics() {
    struct Bulk(Seen);
    impl shardkeeper::processing::RecordHandler for Bulk {
        const BATCHED: bool = true;
        async fn handle(
            &self,
            _: StreamRecord,
        ) -> Result<(), shardkeeper::processing::HandlerError> {
            unreachable!("batched")
        }
        async fn handle_batch(
            &self,
            records: Vec<StreamRecord>,
        ) -> Vec<Result<(), shardkeeper::processing::HandlerError>> {
            let orders: Vec<Order> = records
                .iter()
                .map(|r| serde_json::from_slice(&r.data).unwrap())
                .collect();
            assert!(orders.iter().all(|o| o.id != 2), "order 2 in the run");
            for (order, record) in orders.iter().zip(&records) {
                self.0.lock().unwrap().push((order.id, record.sub_sequence));
            }
            records.iter().map(|_| Ok(())).collect()
        }
    }
    let ctx = ctx().await;
    let fx = stream_with(&ctx, &orders(4)).await;
    let records = read_shard(&ctx, &fx.stream, &fx.shard).await;
    let seen: Seen = Arc::default();
    let processor = KinesisProcessor::new(Bulk(seen.clone()))
        .with_options(ProcessingOptions::default().mode(FailureMode::ReportAllFailures));
    let event = kinesis_event(&fx.arn, &fx.shard, &records);
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.failures.len(), 1, "{report:?}");
    assert_eq!(
        report.failures[0].item_identifier,
        records[1].sequence_number()
    );
    assert!(matches!(
        report.failures[0].error,
        RecordError::Panic { .. }
    ));
    let ids: Vec<u32> = seen.lock().unwrap().iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, vec![1, 3, 4]);
}

/// A batch whose first record fails is a function error
/// (`Error::BatchFailed`): Lambda retries it from that record, as it would
/// for a response listing it, and a mapping without
/// `ReportBatchItemFailures`, which takes any response for a success,
/// retries it too instead of dropping the batch ("Lambda treats all other
/// results as a complete failure", Lambda developer guide, partial batch
/// response with Kinesis). A later record's failure is a partial response.
#[tokio::test]
async fn a_batch_whose_first_record_fails_is_a_function_error() {
    let text = include_str!("../../../events/kinesis-batch.json");
    let sequences: Vec<String> = serde_json::from_str::<serde_json::Value>(text).unwrap()
        ["Records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kinesis"]["sequenceNumber"].as_str().unwrap().to_owned())
        .collect();
    let failing = |bad: String| {
        KinesisProcessor::new(move |record: StreamRecord| {
            let fails = *record.sequence_number == *bad;
            async move {
                if fails {
                    Err(std::io::Error::other("the mail server is down"))
                } else {
                    Ok(())
                }
            }
        })
    };
    let event = || {
        LambdaEvent::new(
            raw(&serde_json::from_str(text).unwrap()),
            lambda_context(Duration::from_secs(60)),
        )
    };
    let first = failing(sequences[0].clone());
    match first.handle(event()).await {
        Err(shardkeeper::Error::BatchFailed {
            item_identifier, ..
        }) => assert_eq!(item_identifier, sequences[0]),
        other => panic!("a function error, not {other:?}"),
    }
    let second = failing(sequences[1].clone());
    let response = second.handle(event()).await.unwrap();
    assert_eq!(failures(&response), vec![sequences[1].clone()]);
}

/// Lambda lanes a record by its own partition key at a ParallelizationFactor
/// above 1, so a KPL aggregate holding another user key than its own may
/// run that key out of order: such aggregates are counted
/// (`MixedKeyAggregates`), the others not.
#[tokio::test]
async fn aggregates_holding_another_key_than_their_own_are_counted() {
    let text = include_str!("../../../events/kinesis-batch.json");
    let mut event: serde_json::Value = serde_json::from_str(text).unwrap();
    let put = |record: &mut serde_json::Value, outer: &str, users: &[&str]| {
        let recs: Vec<(&str, Option<&str>, &[u8])> =
            users.iter().map(|k| (*k, None, &b"{}"[..])).collect();
        let data = kpl::aggregate(&recs);
        record["kinesis"]["partitionKey"] = outer.into();
        record["kinesis"]["data"] = base64_simd::STANDARD.encode_to_string(data).into();
    };
    let records = event["Records"].as_array_mut().unwrap();
    put(&mut records[0], "a", &["a", "a"]);
    put(&mut records[1], "a", &["a", "b"]);
    put(&mut records[2], "c", &["d"]);
    let processor = KinesisProcessor::new(|_: StreamRecord| async { Ok::<(), std::io::Error>(()) });
    let report = processor.process(&event.to_string(), None).await.unwrap();
    assert_eq!(report.processed, 5);
    assert_eq!(report.mixed_key_aggregates, 2);
}

/// A buffer the test's log lines are written into.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A payload that does not decode: the log line says what kind of error
/// and which field, not the values serde quotes from the payload (personal
/// data: before, `invalid type: string "ann@example.com"` went into the
/// logs); `ProcessingOptions::log_values` puts them back. The record's
/// failure keeps the whole text either way.
#[tokio::test]
async fn a_failed_records_log_line_leaves_the_payloads_values_out() {
    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Order {
        amount: u32,
    }
    let text = include_str!("../../../events/kinesis-batch.json");
    let mut event: serde_json::Value = serde_json::from_str(text).unwrap();
    let payload = br#"{"amount": "ann@example.com"}"#;
    event["Records"][0]["kinesis"]["data"] = base64_simd::STANDARD.encode_to_string(payload).into();
    let logged = |options: ProcessingOptions| {
        let event = event.to_string();
        async move {
            let lines = Lines::default();
            let writer = lines.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            let _guard = tracing::subscriber::set_default(subscriber);
            let processor = KinesisProcessor::new(shardkeeper::processing::json(
                |_: Order, _: StreamRecord| async { Ok::<(), std::io::Error>(()) },
            ))
            .with_options(options);
            let report = processor.process(&event, None).await.unwrap();
            let failure = report.failures[0].error.to_string();
            let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
            (text, failure)
        }
    };
    let (lines, failure) = logged(ProcessingOptions::default()).await;
    assert!(lines.contains("record failed"), "{lines}");
    assert!(lines.contains("invalid type: string"), "{lines}");
    assert!(!lines.contains("ann@example.com"), "{lines}");
    assert!(failure.contains("ann@example.com"), "{failure}");
    let (lines, _) = logged(ProcessingOptions::default().log_values(true)).await;
    assert!(lines.contains("ann@example.com"), "{lines}");
}

/// A team's test awaits a processor as it is, unboxed, on a test thread
/// (2 MB of stack in a debug build). The whole path (the state reads, the
/// first record's mark, a failure counted and parked, the commits) fits in
/// half of that (it took between 512 and 640 KB, 2026-11-27): the state
/// calls' futures are boxed, so no caller's frame holds a copy of an SDK
/// call's.
#[tokio::test]
async fn a_processor_runs_a_batch_with_a_parked_record_in_a_megabyte_of_stack() {
    let ctx = ctx().await;
    let store = ctx.store("stack-depth");
    let worker = std::thread::Builder::new()
        .stack_size(1024 * 1024)
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let text = include_str!("../../../events/kinesis-batch.json");
                let processor = KinesisProcessor::new(|record: StreamRecord| async move {
                    if record.sequence_number.ends_with('2') {
                        return Err(std::io::Error::other("poison"));
                    }
                    Ok(())
                })
                .with_store(store)
                .with_options(
                    ProcessingOptions::default()
                        .max_attempts(1)
                        .mark_first_record(true)
                        .parking(Parking::StateTable {
                            ttl: Duration::from_secs(60),
                        }),
                );
                let deadline = std::time::SystemTime::now() + Duration::from_secs(60);
                processor.process(text, Some(deadline)).await.unwrap()
            })
        })
        .unwrap();
    let report = worker.join().expect("no stack overflow");
    assert_eq!(report.processed + report.parked, 3, "{report:?}");
}
