//! The operator CLI: `status` and `reset` on a real group; and the demo
//! (`shardkeeper-demo`) with its verification.

use crate::support::common::{cli_target, ctx, lease, register, seed_shards};
use clap::Parser;
use shardkeeper::group::ResetRefused;
use shardkeeper::state::{Checkpoint, ConsumerId, ConsumerInfo, ShardScope, StateError};
use shardkeeper_cli::args::{ImportArgs, ResetArgs};
use shardkeeper_cli::{commands, Cli, Error};
use shardkeeper_demo::DemoArgs;
use std::time::Duration;

fn reset_args(store: &shardkeeper::state::StateStore, to: &str) -> ResetArgs {
    ResetArgs {
        target: cli_target(store),
        to: to.to_owned(),
        shard: None,
        consumer: None,
        efo: None,
        yes: true,
        force: false,
        dry_run: false,
        json: false,
    }
}

#[tokio::test]
async fn status_shows_consumers_leases_checkpoints_and_claims() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    let shards = seed_shards(&store, 3).await;
    let me = ConsumerId::new("worker-a").unwrap();
    store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(me.clone(), store.now()))
        .await
        .unwrap();
    let held = lease(&store, &shards[0], "worker-a").await;
    store
        .checkpoints()
        .save(
            &held,
            &Checkpoint::after("42").unwrap(),
            Some(store.now() - 5_000),
        )
        .await
        .unwrap();
    assert!(store
        .leases()
        .claim(
            &shards[0],
            &ConsumerId::new("worker-b").unwrap(),
            &held.owner,
            held.counter
        )
        .await
        .unwrap());

    // Through the command line, against the endpoint, as an operator would.
    let config = store.config();
    let mut argv = vec![
        "shardkeeper".to_owned(),
        "status".into(),
        "--table".into(),
        config.table.clone(),
        "--group".into(),
        config.group.to_string(),
        "--stream".into(),
        config.stream.to_string(),
        "--json".into(),
    ];
    if let Some(url) = &ctx.aws.endpoints.dynamodb {
        argv.extend(["--endpoint-url".to_owned(), url.clone()]);
    }
    let (out, ok) = shardkeeper_cli::run(Cli::try_parse_from(&argv).unwrap())
        .await
        .unwrap();
    assert!(ok);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["consumers"][0]["id"], "worker-a");
    assert_eq!(json["consumers"][0]["leases"], 1);
    let first = &json["shards"][0];
    assert_eq!(first["shard"], shards[0].as_str());
    assert_eq!(first["owner"], "worker-a");
    assert_eq!(first["checkpoint"], "42");
    assert_eq!(first["claim"][0], "worker-b");
    assert_eq!(json["shards"][1]["owner"], serde_json::Value::Null);

    // The tables, on the test's clock: the age of the last checkpointed record.
    let args = shardkeeper_cli::args::StatusArgs {
        target: reset_args(&store, "latest").target,
        json: false,
        heartbeat_timeout_seconds: 10,
    };
    let text = commands::status(&store, &args).await.unwrap();
    let row = text
        .lines()
        .find(|l| l.contains(shards[0].as_str()))
        .unwrap();
    for expected in ["group", "open", "worker-a", "worker-b", "5.0s", "42"] {
        assert!(row.contains(expected), "{expected} in {row:?}\n{text}");
    }
    assert!(
        text.contains("consumers (1)") && text.contains("live"),
        "{text}"
    );
}

#[tokio::test]
async fn reset_refuses_while_leases_are_held_and_a_forced_reset_fences_the_holder() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    let shards = seed_shards(&store, 2).await;
    let held = lease(&store, &shards[0], "worker-a").await;
    register(&store, "worker-a").await;
    store
        .checkpoints()
        .save(&held, &Checkpoint::after("900").unwrap(), None)
        .await
        .unwrap();

    let refused = commands::reset(&store, &reset_args(&store, "trim-horizon"), |_| true)
        .await
        .unwrap_err();
    match refused {
        Error::Refused(ResetRefused::LeasesHeld(held)) => {
            assert_eq!(held, vec![(shards[0].clone(), "worker-a".to_owned())])
        }
        other => panic!("{other:?}"),
    }
    let cp = store
        .checkpoints()
        .fetch(&ShardScope::Group, &shards[0])
        .await
        .unwrap();
    assert_eq!(cp, Checkpoint::after("900").unwrap(), "nothing was written");

    // Not confirmed: nothing changes either.
    let mut ask = reset_args(&store, "trim-horizon");
    ask.yes = false;
    ask.force = true;
    let mut asked = String::new();
    let declined = commands::reset(&store, &ask, |q| {
        asked = q.to_owned();
        false
    })
    .await
    .unwrap_err();
    assert!(matches!(declined, Error::NotConfirmed), "{declined:?}");
    assert!(
        asked.contains("reset 2 shard(s)") && asked.contains("ending the live leases"),
        "{asked}"
    );
    assert_eq!(
        store
            .leases()
            .owned_shards(&held.owner)
            .await
            .unwrap()
            .len(),
        1
    );

    // Forced: the checkpoint moves back and the holder can no longer write.
    let mut forced = reset_args(&store, "trim-horizon");
    forced.force = true;
    let out = commands::reset(&store, &forced, |_| true).await.unwrap();
    assert!(out.contains("reset: 2 shard(s)"), "{out}");
    let cp = store
        .checkpoints()
        .fetch(&ShardScope::Group, &shards[0])
        .await
        .unwrap();
    assert_eq!(cp, Checkpoint::TrimHorizon);
    let late = store
        .checkpoints()
        .save(&held, &Checkpoint::after("950").unwrap(), None)
        .await
        .unwrap_err();
    assert!(matches!(late, StateError::LeaseLost { .. }), "{late:?}");
}

#[tokio::test]
async fn reset_of_one_shard_and_its_bad_inputs() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    let shards = seed_shards(&store, 2).await;
    for shard in &shards {
        let l = lease(&store, shard, "worker-a").await;
        store
            .checkpoints()
            .save(&l, &Checkpoint::after("500").unwrap(), None)
            .await
            .unwrap();
        store
            .leases()
            .release(&l, Duration::from_secs(10))
            .await
            .unwrap();
    }
    // A dry run names what it would reset, never asks, and writes nothing.
    let mut dry = reset_args(&store, "trim-horizon");
    dry.dry_run = true;
    dry.yes = false;
    let out = commands::reset(&store, &dry, |_| panic!("a dry run asks nothing"))
        .await
        .unwrap();
    assert!(
        out.starts_with("dry run, nothing written: would reset 2 shard(s)"),
        "{out}"
    );
    assert!(shards.iter().all(|s| out.contains(s.as_str())), "{out}");
    for shard in &shards {
        assert_eq!(
            store
                .checkpoints()
                .fetch(&ShardScope::Group, shard)
                .await
                .unwrap(),
            Checkpoint::after("500").unwrap(),
            "a dry run moved {shard}"
        );
    }
    // One shard, to a timestamp given in RFC 3339.
    let mut one = reset_args(&store, "at-timestamp=2026-11-21T10:00:00Z");
    one.shard = Some(shards[1].to_string());
    one.json = true;
    let out = commands::reset(&store, &one, |_| true).await.unwrap();
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["reset"], serde_json::json!([shards[1].as_str()]));
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Group, &shards[1])
            .await
            .unwrap(),
        Checkpoint::AtTimestamp(1_795_255_200_000)
    );
    assert_eq!(
        store
            .checkpoints()
            .fetch(&ShardScope::Group, &shards[0])
            .await
            .unwrap(),
        Checkpoint::after("500").unwrap(),
        "the other shard is untouched"
    );
    // A consumer resumes from the reset position and moves forward again.
    let l = lease(&store, &shards[1], "worker-b").await;
    store
        .checkpoints()
        .save(&l, &Checkpoint::after("7").unwrap(), None)
        .await
        .unwrap();

    let mut unknown = reset_args(&store, "latest");
    unknown.shard = Some("shardId-000000000099".into());
    let err = commands::reset(&store, &unknown, |_| true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Refused(ResetRefused::UnknownShard(s)) if s.as_str() == "shardId-000000000099"),
        "{err:?}"
    );
    for bad in [
        "yesterday",
        "at-timestamp=noon",
        "at-sequence=12ab",
        "latest=5",
    ] {
        let err = commands::reset(&store, &reset_args(&store, bad), |_| true)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::BadArgument { .. } | Error::State(StateError::Validation { .. })
            ),
            "{bad}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_verifies_what_it_consumed() {
    let args = DemoArgs {
        state_dir: None,
        shards: 2,
        workers: 3,
        records: 300,
        keys: 12,
        timeout_seconds: 90,
        quiet: true,
        serve: false,
        env_file: None,
    };
    let report = shardkeeper_demo::run(&args).await.unwrap();
    let v = &report.verification;
    assert!(v.passed(), "{v:?}");
    assert_eq!((v.produced, v.processed, v.lost), (300, 300, 0), "{v:?}");
    assert_eq!(report.killed.as_deref(), Some("worker-0"));
    assert!(report.split.is_some());
    // The split shard was read to its end and its children were taken over.
    let shards = &report.final_status.shards;
    assert_eq!(shards.len(), 4, "{shards:?}");
    assert_eq!(shards.iter().filter(|s| s.state == "depleted").count(), 1);
    assert!(shards
        .iter()
        .filter(|s| s.state == "open")
        .all(|s| s.owner.as_deref().is_some_and(|o| o != "worker-0")));
    let text = shardkeeper_demo::render::demo(&report);
    assert!(text.contains("demo passed"), "{text}");
}

/// `parked` lists the poison records set aside in the state table, with
/// where each came from and how much of it is kept; `--json` gives each
/// payload.
#[tokio::test]
async fn parked_lists_the_parked_records() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    let target = cli_target(&store);
    let args = |json| shardkeeper_cli::args::ParkedArgs {
        target: target.clone(),
        json,
        replay: false,
        to_stream: None,
    };
    assert_eq!(
        commands::parked(&store, &args(false)).await.unwrap(),
        "no parked records\n"
    );
    let record = shardkeeper::state::ParkedRecord {
        key: shardkeeper::state::RecordKey {
            consumer: None,
            event_id: None,
            source: Some("arn:aws:kinesis:us-east-1:123456789012:stream/orders".into()),
            shard_id: Some(shardkeeper::state::ShardId::new("shardId-000000000000").unwrap()),
            sequence: shardkeeper::state::SequenceNumber::new("4242").unwrap(),
            sub_sequence: 1,
        },
        partition_key: "customer-7".into(),
        data: b"{\"id\":7}".to_vec(),
        data_size: 8,
        data_sha256: None,
        error: "order 7 rejected".into(),
        attempts: 3,
        parked_at: store.now(),
    };
    store
        .record_state()
        .park(&record, Duration::from_secs(3600))
        .await
        .unwrap();
    let text = commands::parked(&store, &args(false)).await.unwrap();
    for expected in [
        "4242/1",
        "customer-7",
        "order 7 rejected",
        "8 bytes",
        "ATTEMPTS",
    ] {
        assert!(text.contains(expected), "{expected:?} in\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&commands::parked(&store, &args(true)).await.unwrap()).unwrap();
    assert_eq!(json[0]["sequence_number"], "4242");
    assert_eq!(json[0]["data"], "eyJpZCI6N30=");
    assert_eq!(json[0]["attempts"], 3);
}

/// `parked --replay` puts each parked record back on its stream with its
/// partition key and removes it from the parked set; a record kept only as
/// a prefix, and one from a DynamoDB stream, are left, each with why.
#[tokio::test]
async fn parked_replay_puts_records_back_and_leaves_what_it_cannot() {
    let ctx = ctx().await;
    let stream = crate::support::common::create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let args = shardkeeper_cli::args::ParkedArgs {
        target: cli_target(&store),
        json: false,
        replay: true,
        to_stream: None,
    };
    let parked = |seq: &str, source: Option<&str>, prefix: bool| shardkeeper::state::ParkedRecord {
        key: shardkeeper::state::RecordKey {
            consumer: None,
            event_id: None,
            source: source.map(str::to_owned),
            shard_id: Some(shardkeeper::state::ShardId::new("shardId-000000000000").unwrap()),
            sequence: shardkeeper::state::SequenceNumber::new(seq).unwrap(),
            sub_sequence: 0,
        },
        partition_key: format!("key-{seq}"),
        data: format!("payload {seq}").into_bytes(),
        data_size: 9,
        data_sha256: prefix.then(|| "ab".repeat(32)),
        error: "rejected".into(),
        attempts: 3,
        parked_at: store.now(),
    };
    for record in [
        parked("101", None, false),
        parked("102", None, true),
        parked(
            "103",
            Some("arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"),
            false,
        ),
    ] {
        store.record_state().park(&record, Duration::from_secs(3600)).await.unwrap();
    }
    let text = commands::replay_parked(&store, &ctx.aws.kinesis, &args)
        .await
        .unwrap();
    assert!(text.contains("replayed 101/0"), "{text}");
    assert!(text.contains("left 102/0: kept only as a prefix"), "{text}");
    assert!(
        text.contains("left 103/0: from a DynamoDB stream"),
        "{text}"
    );
    assert!(text.contains("1 of 3 parked records replayed"), "{text}");
    let left: std::collections::BTreeSet<String> = store
        .record_state()
        .list_parked()
        .await
        .unwrap()
        .iter()
        .map(|p| p.key.sequence.to_string())
        .collect();
    assert_eq!(left, ["102".to_owned(), "103".to_owned()].into());
    // On the stream, with its partition key.
    let shard = crate::support::common::list_shards(&ctx.aws, &stream).await[0]
        .shard_id()
        .to_owned();
    let iterator = ctx
        .aws
        .kinesis
        .get_shard_iterator()
        .stream_name(&stream)
        .shard_id(shard)
        .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator
        .unwrap();
    let records = ctx
        .aws
        .kinesis
        .get_records()
        .shard_iterator(iterator)
        .send()
        .await
        .unwrap()
        .records;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].partition_key(), Some("key-101"));
    assert_eq!(records[0].data().as_ref(), b"payload 101");
}

/// `groups` lists the groups of the table with their consumers, shards and
/// parked records.
#[tokio::test]
async fn groups_lists_each_group_of_the_table_with_its_counts() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    crate::support::common::seed_shards(&store, 3).await;
    let me = shardkeeper::state::ConsumerInfo::for_this_process(
        shardkeeper::state::ConsumerId::new("c1").unwrap(),
        store.now(),
    );
    store.consumers().heartbeat(&me).await.unwrap();
    let args = |json| shardkeeper_cli::args::GroupsArgs {
        table: ctx.table.clone(),
        conn: Default::default(),
        json,
    };
    let json: serde_json::Value = serde_json::from_str(
        &commands::groups(&ctx.aws.dynamodb, &args(true))
            .await
            .unwrap(),
    )
    .unwrap();
    let group = store.config().group.to_string();
    let row = json
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == group.as_str())
        .expect("the group is listed");
    assert_eq!(row["stream"], "orders");
    assert_eq!(
        (row["consumers"].as_u64(), row["shards"].as_u64()),
        (Some(1), Some(3))
    );
    let text = commands::groups(&ctx.aws.dynamodb, &args(false))
        .await
        .unwrap();
    assert!(
        text.contains("CONSUMERS") && text.contains(&group),
        "{text}"
    );
}

#[tokio::test]
async fn spread_refuses_while_consumers_heartbeat_then_moves_every_shard() {
    let ctx = ctx().await;
    let group = shardkeeper_local::unique_name("g");
    let config = shardkeeper::state::StoreConfig::new(&group, "orders")
        .unwrap()
        .table(&ctx.table)
        .unwrap();
    let store = shardkeeper::state::StateStore::with_clock(
        ctx.aws.dynamodb.clone(),
        config,
        std::sync::Arc::new(ctx.clock.clone()),
    );
    let shards = seed_shards(&store, 30).await;
    let held = lease(&store, &shards[0], "worker-a").await;
    store
        .consumers()
        .heartbeat(&ConsumerInfo::for_this_process(
            ConsumerId::new("worker-a").unwrap(),
            store.now(),
        ))
        .await
        .unwrap();
    let args = |force| shardkeeper_cli::args::SpreadArgs {
        target: reset_args(&store, "latest").target,
        buckets: Some(8),
        yes: true,
        force,
        dry_run: false,
        heartbeat_timeout_seconds: 10,
    };
    let err = commands::spread(&store, &args(false), |_| true)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::SpreadRefused(why) if why.contains("worker-a")),
        "{err}"
    );
    assert_eq!(
        store.layout().buckets().await.unwrap().count(),
        1,
        "nothing moved"
    );

    // Stopped: its heartbeat is older than the timeout.
    ctx.clock.advance(Duration::from_secs(11));
    // A dry run says the move, never asks, and moves nothing.
    let dry = shardkeeper_cli::args::SpreadArgs {
        dry_run: true,
        yes: false,
        ..args(false)
    };
    let out = commands::spread(&store, &dry, |_| panic!("a dry run asks nothing"))
        .await
        .unwrap();
    assert!(
        out.contains("would move the shard items") && out.contains("from 1 to 8 buckets"),
        "{out}"
    );
    assert_eq!(
        store.layout().buckets().await.unwrap().count(),
        1,
        "a dry run moved"
    );
    let out = commands::spread(&store, &args(false), |_| true)
        .await
        .unwrap();
    assert!(
        out.contains("spread over 8 buckets (was 1): 30 items moved"),
        "{out}"
    );
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(snapshot.buckets.count(), 8);
    assert_eq!(snapshot.shards.len(), 30);
    assert_eq!(
        store.leases().get_owner(&shards[0]).await.unwrap(),
        Some(held.owner)
    );
    let bad = shardkeeper_cli::args::SpreadArgs {
        buckets: Some(3),
        ..args(true)
    };
    let err = commands::spread(&store, &bad, |_| true).await.unwrap_err();
    assert!(
        matches!(err, Error::State(StateError::Validation { .. })),
        "{err}"
    );
}

#[test]
fn table_and_stream_take_the_names_the_aws_cli_uses_too() {
    let parse = |argv: &[&str]| match Cli::try_parse_from(argv).unwrap().command {
        shardkeeper_cli::Command::Status(args) => args.target,
        other => panic!("{other:?}"),
    };
    let short = parse(&[
        "shardkeeper",
        "status",
        "--table",
        "t",
        "--group",
        "g",
        "--stream",
        "s",
    ]);
    let long = parse(&[
        "shardkeeper",
        "status",
        "--table-name",
        "t",
        "--group-name",
        "g",
        "--stream-name",
        "s",
    ]);
    assert_eq!(
        (short.table, short.group, short.stream),
        (long.table, long.group, long.stream)
    );
}

fn import_args(store: &shardkeeper::state::StateStore, file: &std::path::Path) -> ImportArgs {
    ImportArgs {
        target: cli_target(store),
        file: file.to_owned(),
        yes: true,
        force: false,
        dry_run: false,
        json: false,
    }
}

/// `export` writes each shard's checkpoint; `import` sets them on another
/// group (the same shards) with the guarded reset: every checkpoint as
/// exported, a shard the group does not have left out and named, nothing
/// written while a registered consumer holds a lease unless forced, and a
/// file that is not a positions file refused with the reason.
#[tokio::test]
async fn export_then_import_moves_every_checkpoint_to_another_group() {
    let ctx = ctx().await;
    let from = ctx.store("orders");
    let shards = seed_shards(&from, 3).await;
    let positions = [
        Checkpoint::after_sub("900", 2).unwrap(),
        Checkpoint::AtTimestamp(1_700_000_000_000),
        Checkpoint::Latest,
    ];
    for (shard, cp) in shards.iter().zip(&positions) {
        let held = lease(&from, shard, "exporter").await;
        from.checkpoints().save(&held, cp, None).await.unwrap();
        from.leases()
            .release(&held, Duration::from_secs(10))
            .await
            .unwrap();
    }
    let exported = shardkeeper_cli::positions::export(&from).await.unwrap();

    // Another group on the same stream, with two of the shards.
    let to = ctx.store("orders");
    seed_shards(&to, 2).await;
    let file = std::env::temp_dir().join(format!(
        "{}.json",
        shardkeeper_local::unique_name("positions")
    ));
    std::fs::write(&file, &exported).unwrap();
    let held = lease(&to, &shards[0], "worker-a").await;
    register(&to, "worker-a").await;
    let refused = shardkeeper_cli::positions::import(&to, &import_args(&to, &file), |_| true)
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, Error::Refused(ResetRefused::LeasesHeld(h)) if h.len() == 1),
        "{refused:?}"
    );
    assert_eq!(
        to.shards()
            .get(&ShardScope::Group, &shards[1])
            .await
            .unwrap()
            .checkpoint,
        None,
        "nothing written"
    );
    to.leases()
        .release(&held, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(to.consumers().deregister(&held.owner).await.unwrap());

    // A dry run names the shards it would set, asks nothing, writes nothing.
    let dry = ImportArgs {
        dry_run: true,
        yes: false,
        ..import_args(&to, &file)
    };
    let out = shardkeeper_cli::positions::import(&to, &dry, |_| panic!("a dry run asks nothing"))
        .await
        .unwrap();
    assert!(
        out.starts_with("dry run, nothing written: would set 2 shard checkpoint(s)"),
        "{out}"
    );
    assert!(out.contains(shards[1].as_str()), "{out}");
    assert_eq!(
        to.shards()
            .get(&ShardScope::Group, &shards[1])
            .await
            .unwrap()
            .checkpoint,
        None,
        "a dry run wrote"
    );

    let out = shardkeeper_cli::positions::import(&to, &import_args(&to, &file), |_| true)
        .await
        .unwrap();
    assert!(out.contains("reset: 2 shard(s)"), "{out}");
    for (shard, cp) in shards.iter().zip(&positions).take(2) {
        let stored = to.shards().get(&ShardScope::Group, shard).await.unwrap();
        assert_eq!(stored.checkpoint.as_ref(), Some(cp), "{shard}");
    }
    // The third shard is not in `to`: left out, and named.
    assert!(
        out.contains(&format!("not in the group, left out: {}", shards[2])),
        "{out}"
    );

    std::fs::write(&file, "{\"format\": \"other\"}").unwrap();
    let bad = shardkeeper_cli::positions::import(&to, &import_args(&to, &file), |_| true)
        .await
        .unwrap_err();
    assert!(
        matches!(bad, Error::BadArgument { name: "--file", .. }),
        "{bad:?}"
    );
    let _ = std::fs::remove_file(&file);
}

/// A stack's outputs, as a test keeps them instead of CloudFormation.
struct FakeStacks(std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>);

impl shardkeeper_cli::stack::StackOutputs for FakeStacks {
    async fn outputs(
        &self,
        _: &shardkeeper_cli::args::Connection,
        stack: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, Error> {
        self.0
            .get(stack)
            .cloned()
            .ok_or_else(|| Error::BadArgument {
                name: "--stack",
                message: format!("no stack {stack}"),
            })
    }
}

/// `--stack NAME` names the table, group and stream by the stack's outputs
/// (`StateTableName`, `ConsumerGroup`, `StreamName`, as every template
/// outputs them: `system::template`); a name given explicitly wins; a stack
/// without an output the command needs is a typed error naming the flag
/// that would give it.
#[tokio::test]
async fn a_stack_names_the_table_group_and_stream_by_its_outputs() {
    let ctx = ctx().await;
    let store = ctx.store("orders");
    register(&store, "worker-a").await;
    let config = store.config();
    let outputs = std::collections::BTreeMap::from([
        ("StateTableName".to_owned(), config.table.clone()),
        ("ConsumerGroup".to_owned(), config.group.to_string()),
        ("StreamName".to_owned(), config.stream.to_string()),
    ]);
    let mut partial = outputs.clone();
    partial.remove("ConsumerGroup");
    let stacks = FakeStacks(
        [
            ("orders-app".to_owned(), outputs),
            ("partial".to_owned(), partial),
        ]
        .into(),
    );
    let argv = |extra: &[&str]| {
        let mut argv: Vec<String> = ["shardkeeper", "status", "--json"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        if let Some(url) = &ctx.aws.endpoints.dynamodb {
            argv.extend(["--endpoint-url".to_owned(), url.clone()]);
        }
        Cli::try_parse_from(&argv).unwrap()
    };
    let status = |cli| async {
        let (out, ok) = shardkeeper_cli::run_with_stacks(cli, &stacks).await?;
        assert!(ok);
        Ok::<serde_json::Value, Error>(serde_json::from_str(&out).unwrap())
    };
    let by_stack = status(argv(&["--stack", "orders-app"])).await.unwrap();
    assert_eq!(by_stack["consumers"][0]["id"], "worker-a", "{by_stack}");
    let other_group = status(argv(&["--stack", "orders-app", "--group", "another"]))
        .await
        .unwrap();
    assert_eq!(
        other_group["consumers"].as_array().map(Vec::len),
        Some(0),
        "{other_group}"
    );
    match status(argv(&["--stack", "partial"])).await {
        Err(Error::BadArgument { name, message }) => {
            assert_eq!(name, "--group");
            assert!(message.contains("ConsumerGroup"), "{message}");
        }
        other => panic!("a typed error, not {other:?}"),
    }
    // Without a stack, the group and the stream are required by the parser.
    assert!(Cli::try_parse_from(["shardkeeper", "status", "--stream", "s"]).is_err());
}

/// `import` refuses, writing nothing, a positions file of another stream
/// (its sequence numbers mean nothing there) and one with a time still to
/// come.
#[tokio::test]
async fn import_refuses_a_file_of_another_stream_or_with_a_time_to_come() {
    let ctx = ctx().await;
    let from = ctx.store("orders");
    let shards = seed_shards(&from, 1).await;
    let held = lease(&from, &shards[0], "exporter").await;
    let to_come = Checkpoint::AtTimestamp(from.now() + 24 * 3600 * 1000);
    from.checkpoints()
        .save(&held, &to_come, None)
        .await
        .unwrap();
    let exported = shardkeeper_cli::positions::export(&from).await.unwrap();
    let file = std::env::temp_dir().join(format!(
        "{}.json",
        shardkeeper_local::unique_name("positions")
    ));
    std::fs::write(&file, &exported).unwrap();

    let elsewhere = ctx.store("payments");
    seed_shards(&elsewhere, 1).await;
    let here = ctx.store("orders");
    seed_shards(&here, 1).await;
    for (store, why) in [
        (&elsewhere, "exported from stream"),
        (&here, "still to come"),
    ] {
        match shardkeeper_cli::positions::import(store, &import_args(store, &file), |_| true).await
        {
            Err(Error::BadArgument { name, message }) => {
                assert_eq!(name, "--file");
                assert!(message.contains(why), "{message}");
            }
            other => panic!("refused ({why}), not {other:?}"),
        }
        let shard = store
            .shards()
            .get(&ShardScope::Group, &shards[0])
            .await
            .unwrap();
        assert_eq!(shard.checkpoint, None, "nothing written");
    }
}

/// An on-failure record as Lambda sends it to a Kinesis mapping's
/// destination (Lambda developer guide, "Retaining discarded batches for a
/// Kinesis event source": the example invocation record's fields).
fn on_failure_record(arn: &str, shard: &str, start: &str, end: &str) -> serde_json::Value {
    serde_json::json!({
        "requestContext": {
            "requestId": "c9b8fa9f-5a7f-4e4b-9a5a-5d6f4a0e9d11",
            "functionArn": "arn:aws:lambda:us-east-1:123456789012:function:orders",
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": 3
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": "Unhandled"
        },
        "version": "1.0",
        "timestamp": "2026-11-28T10:00:00.000Z",
        "KinesisBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": start,
            "endSequenceNumber": end,
            "approximateArrivalOfFirstRecord": "2026-11-28T09:59:58.000Z",
            "approximateArrivalOfLastRecord": "2026-11-28T09:59:59.000Z",
            "batchSize": 4,
            "streamArn": arn
        }
    })
}

/// `replay-failures` reads the batches a mapping gave up on from its
/// on-failure records (an S3 destination's objects under a prefix, on an
/// S3-compatible server in-process; files), reads each again from its
/// shard, first to last record,
/// and puts them on the stream in order with their partition keys; a dry
/// run puts nothing; a DynamoDB Streams record is left, with why; a file
/// that holds no such record is a typed error naming it.
#[tokio::test]
async fn replay_failures_puts_the_batches_a_mapping_gave_up_on_back_on_a_stream() {
    use crate::support::common::{create_stream, stream_arn};
    let ctx = ctx().await;
    let source = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &source).await;
    for i in 0..10 {
        ctx.aws
            .kinesis
            .put_record()
            .stream_name(&source)
            .partition_key(format!("k{i}"))
            .data(aws_sdk_kinesis::primitives::Blob::new(format!("p{i}")))
            .send()
            .await
            .unwrap();
    }
    let shard = crate::support::common::list_shards(&ctx.aws, &source).await[0]
        .shard_id()
        .to_owned();
    let records = crate::support::esm::read_shard(&ctx, &source, &shard).await;
    let target = create_stream(&ctx.aws, 1).await;
    let dir = std::env::temp_dir().join(shardkeeper_local::unique_name("failures"));
    std::fs::create_dir_all(&dir).unwrap();
    let record = on_failure_record(
        &arn,
        &shard,
        records[3].sequence_number(),
        records[6].sequence_number(),
    );
    let ddb = serde_json::json!({"requestContext": {"condition": "RecordAgeExceeded"}, "DDBStreamBatchInfo": {
        "shardId": "shardId-00000001", "startSequenceNumber": "100", "endSequenceNumber": "200",
        "streamArn": "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"}});
    // The S3 destination's bucket: the two records under the mapping's
    // prefix, and an object of something else beside it.
    let s3 = crate::support::s3::LocalS3::start().await;
    s3.client
        .create_bucket()
        .bucket("failures")
        .send()
        .await
        .unwrap();
    for (key, body) in [
        ("orders/2026/11/28/a.json", record.to_string()),
        ("orders/2026/11/28/b.json", ddb.to_string()),
        ("other/c.json", "not a record".to_owned()),
    ] {
        s3.client
            .put_object()
            .bucket("failures")
            .key(key)
            .body(body.into_bytes().into())
            .send()
            .await
            .unwrap();
    }
    let args = |dry_run: bool, from: &str| shardkeeper_cli::args::ReplayFailuresArgs {
        from: from.to_owned(),
        to_stream: Some(target.clone()),
        conn: cli_target(&ctx.store(&source)).conn,
        change: shardkeeper_cli::args::ChangeOptions {
            dry_run,
            yes: true,
            json: false,
        },
    };
    // The record names the stream by its ARN, as Kinesis takes it (local
    // servers read names only: the proxy puts the ARN in the name).
    let Some(kinesis_endpoint) = shardkeeper_local::test_endpoints().unwrap().kinesis else {
        eprintln!("skipped: the proxy needs a local Kinesis endpoint");
        return;
    };
    let proxy = shardkeeper_local::FaultProxy::start(
        shardkeeper_local::AwsService::Kinesis,
        &kinesis_endpoint,
        shardkeeper_local::Faults::none(),
    )
    .await
    .unwrap();
    proxy.share_from_other_account(&arn).unwrap();
    let mut endpoints = shardkeeper_local::test_endpoints().unwrap();
    endpoints.kinesis = Some(proxy.url().to_owned());
    let by_arn = shardkeeper_local::AwsClients::connect(&endpoints).await;
    let kinesis = &by_arn.kinesis;
    let dry = shardkeeper_cli::failures::replay_failures(
        kinesis,
        &s3.client,
        &args(true, "s3://failures/orders/"),
        |_| false,
    )
    .await
    .unwrap();
    assert!(dry.contains(": 4 records"), "{dry}");
    assert!(
        dry.contains("s3://failures/orders/2026/11/28/b.json#1: a DynamoDB Streams batch"),
        "{dry}"
    );
    let target_shard = crate::support::common::list_shards(&ctx.aws, &target).await[0]
        .shard_id()
        .to_owned();
    assert!(
        crate::support::esm::read_shard(&ctx, &target, &target_shard)
            .await
            .is_empty()
    );
    let done = shardkeeper_cli::failures::replay_failures(
        kinesis,
        &s3.client,
        &args(false, "s3://failures/orders/"),
        |_| false,
    )
    .await
    .unwrap();
    assert!(done.contains("4 records put"), "{done}");
    let put: Vec<(String, String)> = crate::support::esm::read_shard(&ctx, &target, &target_shard)
        .await
        .iter()
        .map(|r| {
            (
                r.partition_key().unwrap_or_default().to_owned(),
                String::from_utf8(r.data().as_ref().to_vec()).unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = (3..=6)
        .map(|i| (format!("k{i}"), format!("p{i}")))
        .collect();
    assert_eq!(put, want);
    // A batch whose first record is past the retention (a sequence number
    // before the shard's first): what the stream still holds, said so.
    let trimmed = dir.join("trimmed");
    std::fs::create_dir_all(&trimmed).unwrap();
    // (The first record's sequence number less one, in decimal.)
    let mut digits: Vec<u8> = records[0].sequence_number().bytes().collect();
    let last = digits.iter().rposition(|d| *d != b'0').unwrap();
    digits[last] -= 1;
    digits[last + 1..].fill(b'9');
    let start = String::from_utf8(digits).unwrap();
    let before = on_failure_record(&arn, &shard, &start, records[1].sequence_number());
    std::fs::write(trimmed.join("d.json"), before.to_string()).unwrap();
    let text = shardkeeper_cli::failures::replay_failures(
        kinesis,
        &s3.client,
        &args(true, trimmed.to_str().unwrap()),
        |_| false,
    )
    .await
    .unwrap();
    assert!(
        text.contains(": 2 records (its start is no longer retained"),
        "{text}"
    );
    // Not an on-failure record.
    let bad = dir.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("c.json"), r#"{"Records": []}"#).unwrap();
    let error = shardkeeper_cli::failures::replay_failures(
        kinesis,
        &s3.client,
        &args(false, bad.to_str().unwrap()),
        |_| true,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, Error::BadArgument { name: "--from", message } if message.contains("c.json#1: not an on-failure record")),
        "{error}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
