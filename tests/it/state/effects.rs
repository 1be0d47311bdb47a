//! Progress with effects in one transaction, on the real DynamoDB-compatible
//! server: both or neither; fenced by the lease, or over the progress a
//! delivery saw; the same write sent again (an answer lost) written once;
//! an effect's failed condition writing nothing.

use crate::support::common::{ctx, lease, seed_shards, Ctx};
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem, Update};
use shardkeeper::state::{
    BatchKey, BatchProgress, Checkpoint, EffectsOutcome, SequenceNumber, ShardScope, StateError,
};
use std::time::Duration;

const TERM: Duration = Duration::from_secs(30);

/// An `ADD` of one to the counter `key` of `table`.
fn add_one(table: &str, key: &str) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .key("pk", AttributeValue::S(key.to_owned()))
        .update_expression("ADD #count :one")
        .expression_attribute_names("#count", "count")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .build()
        .unwrap();
    TransactWriteItem::builder().update(update).build()
}

/// A check that fails: the item `missing` of `table` does not exist.
fn failing_check(table: &str) -> TransactWriteItem {
    let check = ConditionCheck::builder()
        .table_name(table)
        .key("pk", AttributeValue::S("missing".into()))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    TransactWriteItem::builder().condition_check(check).build()
}

async fn count(ctx: &Ctx, table: &str, key: &str) -> u64 {
    crate::lambda::esm_contract::effect_counts_in(&ctx.aws.dynamodb, table)
        .await
        .get(key)
        .copied()
        .unwrap_or(0)
}

#[tokio::test]
async fn a_lease_holders_effects_are_written_with_its_checkpoint_once_and_never_after_the_lease_moved(
) {
    let ctx = ctx().await;
    let store = ctx.store("effects-lease");
    let table = crate::lambda::esm_contract::create_effects_table(&ctx).await;
    let shard = seed_shards(&store, 1).await.remove(0);
    let old = lease(&store, &shard, "a").await;
    let cp = Checkpoint::after("100").unwrap();
    let save = |lease, cp, effects| {
        let store = store.clone();
        async move {
            store
                .checkpoints()
                .save_with(&lease, &cp, None, effects)
                .await
        }
    };
    assert_eq!(
        save(old.clone(), cp.clone(), vec![add_one(&table, "x")])
            .await
            .unwrap(),
        EffectsOutcome::Stored
    );
    // Sent again, as the SDK does after a lost answer: written once.
    assert!(matches!(
        save(old.clone(), cp.clone(), vec![add_one(&table, "x")])
            .await
            .unwrap(),
        EffectsOutcome::Stale { .. }
    ));
    assert_eq!(count(&ctx, &table, "x").await, 1);
    // An effect whose condition fails: nothing of the transaction.
    let later = Checkpoint::after("150").unwrap();
    assert!(matches!(
        save(
            old.clone(),
            later,
            vec![add_one(&table, "y"), failing_check(&table)]
        )
        .await
        .unwrap(),
        EffectsOutcome::Conflict { index: Some(1), .. }
    ));
    assert_eq!(count(&ctx, &table, "y").await, 0);
    let state = store
        .shards()
        .get(&ShardScope::Group, &shard)
        .await
        .unwrap();
    assert_eq!(state.checkpoint, Some(cp));
    // The lease moves; the old holder's write comes late: nothing of it.
    ctx.clock.advance(TERM + Duration::from_secs(1));
    let new = lease(&store, &shard, "b").await;
    let err = save(
        old,
        Checkpoint::after("200").unwrap(),
        vec![add_one(&table, "z")],
    )
    .await
    .unwrap_err();
    assert!(matches!(err, StateError::LeaseLost { .. }), "{err:?}");
    assert_eq!(count(&ctx, &table, "z").await, 0);
    assert_eq!(
        save(
            new,
            Checkpoint::after("200").unwrap(),
            vec![add_one(&table, "z")]
        )
        .await
        .unwrap(),
        EffectsOutcome::Stored
    );
    assert_eq!(count(&ctx, &table, "z").await, 1);
}

#[tokio::test]
async fn a_batchs_effects_are_written_only_over_the_progress_its_delivery_saw() {
    let ctx = ctx().await;
    let store = ctx.store("effects-batch");
    let table = crate::lambda::esm_contract::create_effects_table(&ctx).await;
    let key = BatchKey {
        consumer: "orders".to_owned(),
        stream: "arn:aws:kinesis:us-east-1:123456789012:stream/orders".to_owned(),
        shard: Some("shardId-000000000000".to_owned()),
        first_event_id: None,
        first: SequenceNumber::new("10").unwrap(),
    };
    let content = [7; 16];
    let progress =
        |last: &str| BatchProgress::new(Checkpoint::after(last).unwrap(), vec![], content);
    let write = |progress: BatchProgress, effect: &str, expected: Option<Checkpoint>| {
        let (store, key, effects) = (store.clone(), key.clone(), vec![add_one(&table, effect)]);
        async move {
            let expected = expected.as_ref().map(|cp| (cp, content));
            store
                .record_state()
                .store_batch_progress_with(
                    &key,
                    &progress,
                    Duration::from_secs(3600),
                    effects,
                    expected,
                )
                .await
        }
    };
    // Two deliveries of the batch saw nothing stored; the first writes.
    assert_eq!(
        write(progress("12"), "a", None).await.unwrap(),
        EffectsOutcome::Stored
    );
    // The second, to the same point: the same write, stored already.
    assert!(matches!(
        write(progress("12"), "a", None).await.unwrap(),
        EffectsOutcome::Stale { .. }
    ));
    // To a point of its own: the progress moved since it looked.
    let err = write(progress("11"), "b", None).await.unwrap_err();
    assert!(matches!(err, StateError::ProgressMoved { .. }), "{err:?}");
    assert_eq!(count(&ctx, &table, "a").await, 1);
    assert_eq!(count(&ctx, &table, "b").await, 0);
    // The first goes on over what it wrote.
    assert_eq!(
        write(progress("15"), "c", Some(Checkpoint::after("12").unwrap()))
            .await
            .unwrap(),
        EffectsOutcome::Stored
    );
    assert_eq!(count(&ctx, &table, "c").await, 1);
}
