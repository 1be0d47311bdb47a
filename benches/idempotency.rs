//! Idempotency by content: what each record costs in DynamoDB capacity units
//! and in time, for shardkeeper's adapter (both claims, with and without
//! effects) against Lambda Powertools' protocol (a conditional `PutItem`
//! in progress, then an `UpdateItem` completed, per record) on the same
//! records, in the same run, on the in-process servers. The time is a ratio
//! to the floor: the same processor with a plain handler (no idempotency).
//!
//! The records: 1,000 payments, and 100 producer duplicates of them (a
//! retried `PutRecord`: the same payload under a new sequence number), in
//! events of 100 records as an event source mapping sends them. The handler
//! waits 1 ms per record, as one that calls a service does.
//!
//! Capacity units follow DynamoDB's rules (developer guide, "Read/write
//! capacity mode"): every item here is under 1 KB (checked), so a standard
//! write (`PutItem`, `UpdateItem`, `DeleteItem`, a failed conditional one
//! included) is 1 WCU, a transactional write 2 WCU, and a strongly
//! consistent read (`GetItem`, each item of a `BatchGetItem`) 1 RCU.
//!
//! Run: `cargo bench --bench idempotency` (prints Markdown tables).

#[allow(dead_code)]
mod support;

use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use bytes::Bytes;
use shardkeeper::idempotency::{idempotent, Claim, IdempotencyTable};
use shardkeeper::lambda::KinesisProcessor;
use shardkeeper::processing::{stage_effect, HandlerError, RecordHandler, StreamRecord};
use shardkeeper::state::{StateStore, StoreConfig};
use shardkeeper_local::{create_keyed_table, test_clients, unique_name, AwsClients, LoggedRequest};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PAYMENTS: usize = 1_000;
const DUPLICATES: usize = 100;
const BATCH: usize = 100;
const HANDLER_WAIT: Duration = Duration::from_millis(1);

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
    cents: u64,
}

fn payment_id(record: &StreamRecord) -> Option<String> {
    record.json::<Payment>().ok().map(|p| p.id)
}

/// The events: every tenth payment is put again five records later.
fn events() -> Vec<Bytes> {
    let mut payloads: Vec<(String, serde_json::Value)> = (0..PAYMENTS)
        .map(|i| {
            let payment = serde_json::json!({"id": format!("pay-{i:05}"), "cents": 100 + i});
            (format!("customer-{}", i % 97), payment)
        })
        .collect();
    for d in 0..DUPLICATES {
        let i = d * (PAYMENTS / DUPLICATES);
        let copy = payloads[i + d].clone();
        payloads.insert((i + d + 5).min(payloads.len()), copy);
    }
    let event: serde_json::Value =
        serde_json::from_str(&support::events::kinesis_event(payloads.into_iter())).unwrap();
    event["Records"]
        .as_array()
        .unwrap()
        .chunks(BATCH)
        .map(|c| Bytes::from(serde_json::json!({ "Records": c }).to_string()))
        .collect()
}

/// The handler's own work: a wait, and with `effect`, an `ADD` to the
/// payment's counter staged as its effect.
async fn work(record: &StreamRecord, effect: Option<&str>) -> Result<u64, HandlerError> {
    let payment: Payment = record.json()?;
    tokio::time::sleep(HANDLER_WAIT).await;
    if let Some(table) = effect {
        let update = Update::builder()
            .table_name(table)
            .key("pk", AttributeValue::S(payment.id.clone()))
            .update_expression("ADD #count :one")
            .expression_attribute_names("#count", "count")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .build()?;
        stage_effect(TransactWriteItem::builder().update(update).build())?;
    }
    Ok(payment.cents)
}

/// Lambda Powertools' idempotency protocol for one record
/// (`BasePersistenceLayer.save_inprogress`, then `save_success`): a
/// conditional `PutItem` of the record in progress (its condition: none,
/// expired, or an in-progress one past its time), returning the old item on
/// a failed condition; a completed one is a repeat. Then the handler, then
/// an `UpdateItem` to completed with the result.
async fn powertools(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    record: StreamRecord,
) -> Result<(), HandlerError> {
    let key = format!("payments.handler#{}", payment_id(&record).ok_or("no key")?);
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let put = dynamodb
        .put_item()
        .table_name(table)
        .item("id", AttributeValue::S(key.clone()))
        .item("expiration", AttributeValue::N((now.as_secs() + 3600).to_string()))
        .item("in_progress_expiration", AttributeValue::N((now.as_millis() + 60_000).to_string()))
        .item("status", AttributeValue::S("INPROGRESS".into()))
        .condition_expression(
            "attribute_not_exists(#id) OR #expiry < :now OR \
             (#status = :inprogress AND attribute_exists(#in_progress_expiry) AND #in_progress_expiry < :now_in_millis)",
        )
        .expression_attribute_names("#id", "id")
        .expression_attribute_names("#expiry", "expiration")
        .expression_attribute_names("#status", "status")
        .expression_attribute_names("#in_progress_expiry", "in_progress_expiration")
        .expression_attribute_values(":now", AttributeValue::N(now.as_secs().to_string()))
        .expression_attribute_values(":now_in_millis", AttributeValue::N(now.as_millis().to_string()))
        .expression_attribute_values(":inprogress", AttributeValue::S("INPROGRESS".into()))
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .send()
        .await;
    if let Err(e) = put {
        let failed = e
            .as_service_error()
            .is_some_and(|s| s.is_conditional_check_failed_exception());
        if failed {
            return Ok(()); // A repeat (its stored result would be returned).
        }
        return Err(e.into());
    }
    let cents = work(&record, None).await?;
    dynamodb
        .update_item()
        .table_name(table)
        .key("id", AttributeValue::S(key))
        .update_expression(
            "SET #response_data = :response_data, #expiry = :expiry, #status = :status",
        )
        .expression_attribute_names("#response_data", "data")
        .expression_attribute_names("#expiry", "expiration")
        .expression_attribute_names("#status", "status")
        .expression_attribute_values(":response_data", AttributeValue::S(cents.to_string()))
        .expression_attribute_values(
            ":expiry",
            AttributeValue::N((now.as_secs() + 3600).to_string()),
        )
        .expression_attribute_values(":status", AttributeValue::S("COMPLETED".into()))
        .send()
        .await?;
    Ok(())
}

/// What one way of running the records cost.
struct Measured {
    name: &'static str,
    seconds: f64,
    requests: u64,
    wcu: u64,
    rcu: u64,
    effects_wcu: u64,
}

/// Runs every event through `processor`, returning the time taken and the
/// requests it sent (logged).
async fn run<H: RecordHandler>(
    aws: &AwsClients,
    processor: &KinesisProcessor<H>,
    events: &[Bytes],
) -> (f64, Vec<LoggedRequest>) {
    aws.dynamodb_requests.start_log();
    let began = Instant::now();
    for event in events {
        let deadline = SystemTime::now() + Duration::from_secs(60);
        let report = processor
            .process_bytes(event.clone(), Some(deadline))
            .await
            .unwrap();
        assert!(report.failures.is_empty(), "{:?}", report.failures.first());
    }
    let seconds = began.elapsed().as_secs_f64();
    (seconds, aws.dynamodb_requests.take_log())
}

/// The write and read units `log` spent on `table`.
fn units(log: &[LoggedRequest], table: &str) -> (u64, u64, u64) {
    let (mut requests, mut wcu, mut rcu) = (0, 0, 0);
    for request in log {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        let on_table = body["TableName"].as_str() == Some(table);
        match request.operation.as_str() {
            "PutItem" | "UpdateItem" | "DeleteItem" if on_table => {
                assert!(request.body.len() < 1024, "an item under 1 KB");
                requests += 1;
                wcu += 1;
            }
            "GetItem" if on_table => {
                requests += 1;
                rcu += 1;
            }
            "BatchGetItem" => {
                if let Some(keys) = body["RequestItems"][table]["Keys"].as_array() {
                    requests += 1;
                    rcu += keys.len() as u64;
                }
            }
            "TransactWriteItems" => {
                let items = body["TransactItems"].as_array().unwrap();
                let mine = items
                    .iter()
                    .filter(|i| {
                        i.as_object()
                            .and_then(|o| o.values().next())
                            .is_some_and(|op| op["TableName"].as_str() == Some(table))
                    })
                    .count() as u64;
                if mine > 0 {
                    requests += 1;
                    wcu += 2 * mine;
                }
            }
            _ => {}
        }
    }
    (requests, wcu, rcu)
}

fn store(aws: &AwsClients, table: &str) -> StateStore {
    StateStore::new(
        aws.dynamodb.clone(),
        StoreConfig::new("payments", &unique_name("payments"))
            .unwrap()
            .table(table)
            .unwrap(),
    )
}

async fn measure_all(aws: &AwsClients) -> Vec<Measured> {
    let events = events();
    let state = support::state_table(aws, "idem-bench").await;
    let mut measured = Vec::new();
    // The floor: no idempotency (the duplicates run again).
    let floor =
        KinesisProcessor::new(
            |record: StreamRecord| async move { work(&record, None).await.map(drop) },
        )
        .with_store(store(aws, &state));
    let (seconds, _) = run(aws, &floor, &events).await;
    measured.push(Measured {
        name: "no idempotency (floor)",
        seconds,
        requests: 0,
        wcu: 0,
        rcu: 0,
        effects_wcu: 0,
    });
    // Powertools' protocol.
    let pt_table = unique_name("powertools");
    create_keyed_table(&aws.dynamodb, &pt_table, "id", false)
        .await
        .unwrap();
    let dynamodb = aws.dynamodb.clone();
    let pt = {
        let table = pt_table.clone();
        KinesisProcessor::new(move |record: StreamRecord| {
            let (dynamodb, table) = (dynamodb.clone(), table.clone());
            async move { powertools(&dynamodb, &table, record).await }
        })
        .with_store(store(aws, &state))
    };
    let (seconds, log) = run(aws, &pt, &events).await;
    let (requests, wcu, rcu) = units(&log, &pt_table);
    measured.push(Measured {
        name: "Powertools' protocol",
        seconds,
        requests,
        wcu,
        rcu,
        effects_wcu: 0,
    });
    let effects = unique_name("counters");
    create_keyed_table(&aws.dynamodb, &effects, "pk", false)
        .await
        .unwrap();
    for (name, claim, with_effects) in [
        ("shardkeeper, Claim::BeforeRun", Claim::BeforeRun, false),
        (
            "shardkeeper, Claim::AtCompletion",
            Claim::AtCompletion,
            false,
        ),
        (
            "shardkeeper, Claim::BeforeRun, with an effect",
            Claim::BeforeRun,
            true,
        ),
        (
            "shardkeeper, Claim::AtCompletion, with an effect",
            Claim::AtCompletion,
            true,
        ),
    ] {
        let table = unique_name("idempotency");
        create_keyed_table(&aws.dynamodb, &table, "pk", false)
            .await
            .unwrap();
        let entries = IdempotencyTable::new(aws.dynamodb.clone(), table.clone(), "payments")
            .key_attributes("pk", None);
        let effect = with_effects.then(|| effects.clone());
        let handler = idempotent(entries, payment_id, move |record: StreamRecord| {
            let effect = effect.clone();
            async move { work(&record, effect.as_deref()).await }
        })
        .claim(claim);
        let processor = KinesisProcessor::new(handler).with_store(store(aws, &state));
        let (seconds, log) = run(aws, &processor, &events).await;
        let (requests, wcu, rcu) = units(&log, &table);
        let (_, effects_wcu, _) = units(&log, &effects);
        measured.push(Measured {
            name,
            seconds,
            requests,
            wcu,
            rcu,
            effects_wcu,
        });
    }
    measured
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--list") {
        return;
    }
    let runtime = support::runtime();
    runtime.block_on(async {
        let aws = test_clients().await.expect("the in-process servers");
        let measured = measure_all(&aws).await;
        let records = (PAYMENTS + DUPLICATES) as f64;
        let floor = measured[0].seconds;
        println!("{PAYMENTS} payments and {DUPLICATES} producer duplicates, events of {BATCH}, a handler waiting {} ms:\n", HANDLER_WAIT.as_millis());
        println!("| way | requests / record | WCU / record | RCU / record | cost / record (WCU equivalents) | effect WCU / record | time / floor |");
        println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for m in &measured {
            // On-demand prices are $0.625 a million write and $0.125 a
            // million read request units: a read unit is a fifth of a write.
            let cost = (m.wcu as f64 + m.rcu as f64 / 5.0) / records;
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}x |",
                m.name,
                m.requests as f64 / records,
                m.wcu as f64 / records,
                m.rcu as f64 / records,
                cost,
                m.effects_wcu as f64 / records,
                m.seconds / floor,
            );
        }
    });
}
