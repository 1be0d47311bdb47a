//! Producer duplicates under the mapping emulator: the property run of
//! `esm_contract` over a stream where a third of the payloads were put
//! twice (a producer's retry after a lost answer: the same payload, a new
//! sequence number, here another partition key, so another lane at
//! parallelization above 1), with a handler idempotent by content whose
//! effect is counted per payload.

use crate::esm_invoke;
use crate::lambda::esm_contract::{function_of_call, property_run, Effects, Message};
use crate::support::common::{create_stream, ctx, stream_arn, Ctx};
use crate::support::esm::{kinesis_event_record, read_shard};
use crate::support::lambda_esm::{self, Completions, EsmRecord};
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_kinesis::primitives::Blob;
use shardkeeper::idempotency::{idempotent, Claim, IdempotencyTable};
use shardkeeper::processing::{stage_effect, RecordHandler, StreamRecord};
use shardkeeper::state::ParkedRecord;
use shardkeeper::KinesisProcessor;

/// A stream of one shard: payloads 0 to 35 (every 13th poison), and every
/// third payload put again later under another partition key.
async fn duplicated_records(ctx: &Ctx) -> Vec<EsmRecord> {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut puts: Vec<(u32, String)> = (0..36).map(|n| (n, format!("k{}", n % 6))).collect();
    for n in (0..36).step_by(3) {
        // The retry lands a few records later.
        let at = (n as usize + 4).min(puts.len());
        puts.insert(at, (n, format!("k{}", (n + 1) % 6)));
    }
    let mut shard = String::new();
    for (n, key) in puts {
        let poison = n % 13 == 12;
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(key)
            .data(Blob::new(format!("{{\"n\":{n},\"poison\":{poison}}}")))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    read_shard(ctx, &stream, &shard)
        .await
        .into_iter()
        .map(|r| EsmRecord {
            id: r.sequence_number().to_owned(),
            shard: shard.clone(),
            sequence: r.sequence_number().to_owned(),
            key: r.partition_key().unwrap_or_default().to_owned(),
            event_record: kinesis_event_record(&arn, &shard, &r),
            units: Vec::new(),
        })
        .collect()
}

/// A handler idempotent by the payload's `n` (per function), staging as its
/// effect an `ADD` of one to the payload's counter, noting every completion
/// and every repeat (a repeat completes its record).
fn idempotent_effect_handler(
    completions: Completions,
    table: String,
    idempotency: IdempotencyTable,
) -> impl RecordHandler {
    let noted = completions.clone();
    idempotent(
        idempotency,
        |record: &StreamRecord| {
            let message: Message = record.json().ok()?;
            Some(format!("{}#{}", function_of_call(), message.n))
        },
        move |record: StreamRecord| {
            let (completions, table) = (completions.clone(), table.clone());
            async move {
                let message: Message = record.json().map_err(|e| e.to_string())?;
                lambda_esm::kill_point().await;
                tokio::task::yield_now().await;
                if message.poison {
                    return Err(format!("poison record {}", message.n));
                }
                let update = Update::builder()
                    .table_name(&table)
                    .key(
                        "pk",
                        AttributeValue::S(format!("{}#p{}", function_of_call(), message.n)),
                    )
                    .update_expression("ADD #count :one")
                    .expression_attribute_names("#count", "count")
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .build()
                    .unwrap();
                stage_effect(TransactWriteItem::builder().update(update).build())
                    .map_err(|e| e.to_string())?;
                lambda_esm::kill_point().await;
                lambda_esm::completed(
                    &completions,
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                );
                Ok(())
            }
        },
    )
    .claim(Claim::AtCompletion)
    .on_repeat(move |record, ()| {
        lambda_esm::completed(
            &noted,
            record.partition_key.to_string(),
            record.sequence_number.to_string(),
        );
    })
}

/// Each payload's effect once: with producer duplicates in the stream
/// (some in the same batch, some in another lane at once), kills (also
/// between staging and returning), parallelization factors up to 10,
/// re-formed batches, two mappings at once and a table that loses answers,
/// every payload a record of which was done has its counter at 1.
/// (`Claim::AtCompletion`: two copies run at once in two lanes may both
/// run; one transaction is written, the other is refused and its record
/// retried, then found a repeat.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_applies_a_producer_duplicates_effect_twice() {
    let ctx = ctx().await;
    let records = duplicated_records(&ctx).await;
    let table = crate::lambda::esm_contract::create_effects_table(&ctx).await;
    let idempotency = shardkeeper_local::unique_name("idempotency");
    shardkeeper_local::create_keyed_table(&ctx.aws.dynamodb, &idempotency, "pk", false)
        .await
        .unwrap();
    let processor = {
        let (table, idempotency) = (table.clone(), idempotency.clone());
        let dynamodb = ctx.aws.dynamodb.clone();
        move |completions, store, options| {
            let entries = IdempotencyTable::new(dynamodb.clone(), idempotency.clone(), "orders")
                .key_attributes("pk", None);
            let handler = idempotent_effect_handler(completions, table.clone(), entries);
            let processor = KinesisProcessor::new(handler)
                .with_store(store)
                .with_options(options);
            esm_invoke!(processor)
        }
    };
    let parked_id = |p: ParkedRecord| p.key.sequence.to_string();
    let effects = Effects {
        table: &table,
        idempotency: Some(&idempotency),
    };
    property_run(
        &ctx,
        &records,
        "orders",
        processor,
        parked_id,
        1,
        Some(effects),
    )
    .await;
}
