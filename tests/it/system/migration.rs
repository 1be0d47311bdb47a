//! Moving a consumer: a KCL application's lease table imported into a
//! group, and a group's exported positions imported into another; then the
//! group run and its history checked.

use crate::support::common::{
    cli_target, create_stream, ctx, list_shards, scripted, split_first, Ctx,
};
use crate::support::consume::{eager, produce};
use crate::support::esm::read_shard;
use crate::support::recorded::{recorded, recorded_on, records};
use aws_sdk_dynamodb::types::AttributeValue;
use shardkeeper::state::Checkpoint;
use shardkeeper_cli::args::ImportKclArgs;
use shardkeeper_cli::Error;
use shardkeeper_history::{check, Produced};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

/// A KCL lease table, keyed by `leaseKey` as KCL's `createLeaseTableIfNotExists` creates it.
async fn create_kcl_table(dynamodb: &aws_sdk_dynamodb::Client) -> String {
    let name = shardkeeper_local::unique_name("kcl-app");
    shardkeeper_local::create_keyed_table(dynamodb, &name, "leaseKey", false)
        .await
        .unwrap();
    name
}

/// One lease item in the format of KCL 2.x's
/// `DynamoDBLeaseSerializer.toDynamoRecord`.
fn kcl_lease(
    shard: &str,
    checkpoint: &str,
    parents: &[String],
    children: &[String],
) -> HashMap<String, AttributeValue> {
    let mut item = HashMap::from([
        ("leaseKey".to_owned(), s(shard)),
        ("leaseOwner".to_owned(), s("kcl-worker-1")),
        ("leaseCounter".to_owned(), n(41)),
        ("ownerSwitchesSinceCheckpoint".to_owned(), n(0)),
        ("checkpoint".to_owned(), s(checkpoint)),
        ("checkpointSubSequenceNumber".to_owned(), n(0)),
    ]);
    if !parents.is_empty() {
        item.insert("parentShardId".into(), AttributeValue::Ss(parents.to_vec()));
    }
    if !children.is_empty() {
        item.insert(
            "childShardIds".into(),
            AttributeValue::Ss(children.to_vec()),
        );
    }
    item
}

/// Every record of a shard as (key, n, sequence number), in shard order.
async fn shard_records(ctx: &Ctx, stream: &str, shard: &str) -> Vec<(String, u64, String)> {
    read_shard(ctx, stream, shard)
        .await
        .iter()
        .map(|r| {
            let n = std::str::from_utf8(r.data().as_ref())
                .unwrap()
                .parse()
                .unwrap();
            (
                r.partition_key().unwrap().to_owned(),
                n,
                r.sequence_number().to_owned(),
            )
        })
        .collect()
}

fn import_args(store: &shardkeeper::state::StateStore, table: &str) -> ImportKclArgs {
    ImportKclArgs {
        target: cli_target(store),
        kcl_table: table.to_owned(),
        at_timestamp: None,
        watch_ms: 300,
        force: false,
        change: scripted(),
    }
}

/// A KCL application consumed a stream that was split: its parent to
/// SHARD_END, one child part-way, the other child not yet, the open shard
/// part-way with a prepared checkpoint further on; its table also holds a
/// lease of a shard past retention. `import-kcl` refuses while the KCL
/// application still renews a lease, and writes nothing; once it stopped,
/// the group takes every position over, and running it processes every
/// record after KCL's checkpoints (none lost, keys in order, children after
/// parents) and none that KCL had checkpointed (repeats: 0, the prepared
/// checkpoint's range reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcl_lease_table_moves_into_a_group_that_loses_and_repeats_nothing() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    produce(&ctx.aws.kinesis, &stream, 12, 0..5).await;
    let parent = split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 12, 5..10).await;

    // What KCL had processed, shard by shard, as its checkpoints say.
    let parent_id = parent.shard_id().to_owned();
    let shards = list_shards(&ctx.aws, &stream).await;
    let children: Vec<String> = shards
        .iter()
        .filter(|s| s.parent_shard_id() == Some(parent_id.as_str()))
        .map(|s| s.shard_id().to_owned())
        .collect();
    assert_eq!(children.len(), 2, "{shards:?}");
    let open = shards
        .iter()
        .map(|s| s.shard_id().to_owned())
        .find(|id| *id != parent_id && !children.contains(id))
        .unwrap();
    let table = create_kcl_table(&ctx.aws.dynamodb).await;
    let mut expected: BTreeSet<(String, u64)> = BTreeSet::new();
    let mut kcl_done: BTreeSet<(String, u64)> = BTreeSet::new();
    let mut put = Vec::new();
    for (shard, records) in [
        (&parent_id, shard_records(&ctx, &stream, &parent_id).await),
        (&open, shard_records(&ctx, &stream, &open).await),
        (
            &children[0],
            shard_records(&ctx, &stream, &children[0]).await,
        ),
        (
            &children[1],
            shard_records(&ctx, &stream, &children[1]).await,
        ),
    ] {
        // Processed by KCL: the parent whole, the others up to a third.
        let done = if *shard == parent_id {
            records.len()
        } else if *shard == children[1] {
            0
        } else {
            records.len() / 3
        };
        let checkpoint = match (done, *shard == parent_id) {
            (_, true) => "SHARD_END".to_owned(),
            (0, _) => "TRIM_HORIZON".to_owned(),
            (d, _) => records[d - 1].2.clone(),
        };
        for (i, (key, n, _)) in records.iter().enumerate() {
            let set = if i < done {
                &mut kcl_done
            } else {
                &mut expected
            };
            set.insert((key.clone(), *n));
        }
        let parents = if children.contains(shard) {
            vec![parent_id.clone()]
        } else {
            vec![]
        };
        let kids = if *shard == parent_id {
            children.clone()
        } else {
            vec![]
        };
        let mut item = kcl_lease(shard, &checkpoint, &parents, &kids);
        if *shard == open {
            // A checkpoint prepared two records on, not committed.
            let pending = &records[(done + 1).min(records.len() - 1)].2;
            item.insert("pendingCheckpoint".into(), s(pending));
            item.insert("pendingCheckpointSubSequenceNumber".into(), n(0));
        }
        put.push(item);
    }
    assert!(
        expected.len() > 40 && kcl_done.len() > 40,
        "a real split of the work: {} to do, {} done",
        expected.len(),
        kcl_done.len()
    );
    put.push(kcl_lease("shardId-000000000099", "SHARD_END", &[], &[]));
    for item in put {
        ctx.aws
            .dynamodb
            .put_item()
            .table_name(&table)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }

    // The KCL application still runs: a worker renews the open shard's lease.
    let store = ctx.store(&stream);
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (dynamodb, table, open, stop) = (
            ctx.aws.dynamodb.clone(),
            table.clone(),
            open.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                dynamodb
                    .update_item()
                    .table_name(&table)
                    .key("leaseKey", s(&open))
                    .update_expression("ADD leaseCounter :one")
                    .expression_attribute_values(":one", n(1))
                    .send()
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let import = |args: ImportKclArgs| {
        let store = store.clone();
        let (kinesis, dynamodb) = (ctx.aws.kinesis.clone(), ctx.aws.dynamodb.clone());
        async move {
            shardkeeper_cli::kcl_import::import_kcl(&store, &kinesis, &dynamodb, &args, |_| true)
                .await
        }
    };
    let refused = import(import_args(&store, &table)).await.unwrap_err();
    assert!(
        matches!(&refused, Error::KclRunning(keys) if keys == &vec![open.clone()]),
        "{refused:?}"
    );
    assert!(
        store.load_group().await.unwrap().shards.is_empty(),
        "nothing written"
    );
    stop.store(true, Ordering::Relaxed);
    renewer.await.unwrap();

    // A dry run writes nothing either.
    let mut dry = import_args(&store, &table);
    dry.change.dry_run = true;
    let dry = import(dry).await.unwrap();
    let dry: serde_json::Value = serde_json::from_str(&dry).unwrap();
    assert_eq!(dry["plan"]["moves"].as_object().unwrap().len(), 4, "{dry}");
    assert!(store.load_group().await.unwrap().shards.is_empty());

    let out = import(import_args(&store, &table)).await.unwrap();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["plan"]["gone"],
        serde_json::json!(["shardId-000000000099"])
    );
    assert_eq!(report["plan"]["pending"][0][0], serde_json::json!(open));
    assert_eq!(
        report["reset"]["reset"].as_array().unwrap().len(),
        4,
        "{report}"
    );
    let group = store.load_group().await.unwrap();
    let state = |id: &str| {
        group
            .shards
            .iter()
            .find(|s| s.shard_id.as_str() == id)
            .unwrap()
            .clone()
    };
    assert!(state(&parent_id).depleted, "SHARD_END: depleted");
    assert_eq!(
        state(&children[1]).checkpoint,
        Some(Checkpoint::TrimHorizon)
    );
    assert!(state(&children[0]).pending_parents.is_empty());

    // The group runs from there, recorded for the checker.
    let mut g = recorded_on(&ctx, store.clone(), eager());
    g.run_until(&ctx, std::time::Instant::now(), &expected)
        .await;
    let mut history = g.history.lock().unwrap().clone();
    let repeated: Vec<_> = history
        .processed
        .iter()
        .filter(|p| kcl_done.contains(&(p.key.clone(), p.n)))
        .map(|p| (p.shard.clone(), p.key.clone(), p.n))
        .collect();
    assert!(repeated.is_empty(), "KCL had processed these: {repeated:?}");
    // The promised range: every record after KCL's checkpoints.
    history.produced = expected
        .iter()
        .map(|(key, n)| Produced {
            key: key.clone(),
            n: *n,
        })
        .collect();
    // No parents for the checker: KCL read the parent to its end before the run.
    let verification = check(&history);
    assert!(verification.passed(), "{verification:?}");
    assert_eq!(verification.lost, 0);
    assert_eq!(verification.duplicates, 0);
}

/// A group reads part of a stream and stops; its positions are exported
/// and imported into another group (as into another table or account),
/// which reads on from there: every record after the exported positions,
/// none before them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exported_group_carries_on_in_another_losing_and_repeating_nothing() {
    let ctx = ctx().await;
    let stream = crate::support::common::create_stream(&ctx.aws, 2).await;
    let mut first = recorded(&ctx, &stream, eager()).await;
    produce(&ctx.aws.kinesis, &stream, 8, 0..4).await;
    let start = std::time::Instant::now();
    first.run_until(&ctx, start, &records(8, 0..4)).await;
    for w in &mut first.workers {
        w.run_until(None, || true).await.unwrap();
    }
    let exported = shardkeeper_cli::positions::export(&first.store)
        .await
        .unwrap();

    produce(&ctx.aws.kinesis, &stream, 8, 4..8).await;
    let mut second = recorded(&ctx, &stream, eager()).await;
    shardkeeper::consumer::discover_shards(
        &second.store,
        &ctx.aws.kinesis,
        &second.store.load_group().await.unwrap(),
    )
    .await
    .unwrap();
    let file = std::env::temp_dir().join(format!(
        "{}.json",
        shardkeeper_local::unique_name("positions")
    ));
    std::fs::write(&file, &exported).unwrap();
    let args = shardkeeper_cli::args::ImportArgs {
        target: cli_target(&second.store),
        file: file.clone(),
        yes: true,
        force: false,
        dry_run: false,
        json: false,
    };
    shardkeeper_cli::positions::import(&second.store, &args, |_| true)
        .await
        .unwrap();
    let _ = std::fs::remove_file(&file);

    let moved = std::time::Instant::now();
    let after = records(8, 4..8);
    second.run_until(&ctx, moved, &after).await;
    let read: BTreeSet<(String, u64)> = second.processed_since(moved).into_iter().collect();
    assert_eq!(read, after, "every record after the positions, none before");
    let v = check(&second.since(moved, &after));
    assert!(v.passed() && v.duplicates == 0, "{v:?}");
}

/// A rollback to KCL: `export-kcl` writes each shard's position as a KCL
/// lease (KCL's attribute names, no owner, the parents), which the
/// importer's own parser reads back to the group's positions; a position
/// KCL has no form for refuses the export, naming the shard, and writes
/// nothing.
#[tokio::test]
async fn export_kcl_writes_the_positions_back_as_kcl_leases_the_importer_reads_again() {
    use shardkeeper::state::{SequenceNumber, ShardId, ShardScope};
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    crate::support::common::start_group(&ctx, &store).await;
    split_first(&ctx.aws, &stream).await;
    shardkeeper::consumer::discover_shards(
        &store,
        &ctx.aws.kinesis,
        &store.load_group().await.unwrap(),
    )
    .await
    .unwrap();
    let shards: Vec<_> = list_shards(&ctx.aws, &stream).await;
    let id = |i: usize| ShardId::new(shards[i].shard_id()).unwrap();
    let (parent, done, fresh) = (id(0), id(1), id(2));
    let seq = "49590338271490256608559692538361571095921575989136588898";
    let within = Checkpoint::After {
        sequence: SequenceNumber::new(seq).unwrap(),
        sub_sequence: 3,
    };
    for (shard, cp) in [(&parent, Checkpoint::ShardEnd), (&done, within.clone())] {
        store
            .checkpoints()
            .save_unleased(&ShardScope::Group, shard, &cp, None)
            .await
            .unwrap();
    }
    let table = create_kcl_table(&ctx.aws.dynamodb).await;
    let args = shardkeeper_cli::args::ExportKclArgs {
        target: cli_target(&store),
        kcl_table: table.clone(),
        watch_ms: 50,
        change: scripted(),
    };
    shardkeeper_cli::kcl_export::export_kcl(&store, &ctx.aws.dynamodb, &args, |_| true)
        .await
        .unwrap();

    let config = store.config();
    let leases =
        shardkeeper_cli::kcl_import::read_kcl_leases(&ctx.aws.dynamodb, &table, &config.retry)
            .await
            .unwrap();
    assert_eq!(leases.len(), 3);
    assert!(
        leases.iter().all(|l| l.owner.is_none()),
        "free for KCL's workers to take"
    );
    let (listed, _) =
        shardkeeper::consumer::list_stream_shards(&ctx.aws.kinesis, &config.stream, &config.retry)
            .await
            .unwrap();
    let plan =
        shardkeeper_cli::kcl::plan_kcl_import(&leases, &config.stream, &listed, None).unwrap();
    let moves: HashMap<ShardId, Checkpoint> = plan.moves.into_iter().collect();
    assert_eq!(moves[&parent], Checkpoint::ShardEnd);
    assert_eq!(moves[&done], within);
    assert_eq!(moves[&fresh], Checkpoint::TrimHorizon);
    // KCL's own attribute names (`DynamoDBLeaseSerializer`).
    let item = ctx
        .aws
        .dynamodb
        .get_item()
        .table_name(&table)
        .key("leaseKey", s(done.as_str()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    for name in [
        "leaseKey",
        "checkpoint",
        "checkpointSubSequenceNumber",
        "leaseCounter",
        "ownerSwitchesSinceCheckpoint",
        "parentShardId",
    ] {
        assert!(item.contains_key(name), "{name} in {item:?}");
    }
    assert_eq!(item["checkpoint"], s(seq));
    assert_eq!(item["checkpointSubSequenceNumber"], n(3));

    // A shard reset to a record, nothing of it processed: no KCL form.
    let at = Checkpoint::AtSequence(SequenceNumber::new(seq).unwrap());
    store
        .checkpoints()
        .save_unleased(&ShardScope::Group, &fresh, &at, None)
        .await
        .unwrap();
    let other = create_kcl_table(&ctx.aws.dynamodb).await;
    let refused = shardkeeper_cli::kcl_export::export_kcl(
        &store,
        &ctx.aws.dynamodb,
        &shardkeeper_cli::args::ExportKclArgs {
            kcl_table: other.clone(),
            ..args
        },
        |_| true,
    )
    .await;
    match refused {
        Err(Error::BadArgument { message, .. }) => {
            assert!(message.contains(fresh.as_str()), "{message}")
        }
        other => panic!("refused, not {other:?}"),
    }
    let written =
        shardkeeper_cli::kcl_import::read_kcl_leases(&ctx.aws.dynamodb, &other, &config.retry)
            .await
            .unwrap();
    assert!(written.is_empty(), "nothing written: {written:?}");
}
