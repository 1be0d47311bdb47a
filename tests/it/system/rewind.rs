//! `rewind` on a running group: its holders stop at their next heartbeat,
//! the next ones start at the target, resharded shards are read again in
//! order, and a rewind cut short shows in `status` and finishes when run
//! again. Each run is recorded and checked with the history checker.

use crate::support::common::{
    cli_target, create_stream, ctx, lease, list_shards, scripted, split_first,
};
use crate::support::consume::{eager, produce};
use crate::support::recorded::{millis_now, parents, recorded, records, Key};
use shardkeeper::group::{apply_rewind, plan_rewind, GroupStatus, RewindTarget};
use shardkeeper::state::{Checkpoint, ShardId, ShardSpec, StateStore};
use shardkeeper_cli::args::RewindArgs;
use shardkeeper_history::check;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn rewind_args(store: &StateStore, to: &str) -> RewindArgs {
    RewindArgs {
        target: cli_target(store),
        to: Some(to.to_owned()),
        shard: None,
        to_sequence: None,
        change: scripted(),
    }
}

/// A group read a stream to its tip, through a split; it is rewound, while
/// its workers hold their leases, to a time between two loads. Every
/// record from that time on (before the split and after it) is read again,
/// once, keys in order, the children after their reopened parent; no
/// record from before it is read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_group_rewound_to_a_time_reads_everything_after_it_again_and_nothing_before() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let mut g = recorded(&ctx, &stream, eager()).await;
    let store = g.store.clone();

    produce(&ctx.aws.kinesis, &stream, 12, 0..4).await;
    // Kinesis stamps each record's arrival; the target lies between loads,
    // over a second from each (servers may stamp whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let target = millis_now();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    produce(&ctx.aws.kinesis, &stream, 12, 4..8).await;
    split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 12, 8..12).await;
    let start = Instant::now();
    let all = records(12, 0..12);
    g.run_until(&ctx, start, &all).await;
    let first = check(&g.since(start, &all));
    assert!(first.passed(), "before the rewind: {first:?}");
    let held: usize = g.workers.iter().map(|w| w.shards().len()).sum();
    assert!(held > 0, "the workers hold leases when the rewind comes");

    let out = shardkeeper_cli::rewind::rewind(
        &store,
        &ctx.aws.kinesis,
        &rewind_args(&store, &target.to_string()),
        |_| true,
    )
    .await
    .unwrap();
    let outcome: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outcome["report"]["finished"], true, "{outcome}");
    assert_eq!(
        outcome["plan"]["moves"].as_array().unwrap().len(),
        4,
        "the parent, its two children and the other shard: {outcome}"
    );
    let rewound = Instant::now();
    let after = records(12, 4..12);
    g.run_until(&ctx, rewound, &after).await;

    let again = g.processed_since(rewound);
    let before: Vec<&Key> = again.iter().filter(|k| !after.contains(*k)).collect();
    assert!(
        before.is_empty(),
        "read again from before the target: {before:?}"
    );
    let mut h = g.since(rewound, &after);
    h.parents = parents(&ctx, &stream).await;
    let v = check(&h);
    assert!(v.passed(), "after the rewind: {v:?}");
    assert_eq!(v.duplicates, 0, "each record once after the rewind: {v:?}");
    let status =
        GroupStatus::from_snapshot(&store.load_group().await.unwrap(), Duration::from_secs(10));
    let row = status.rewind.unwrap();
    assert!(row.finished && row.moved == 4 && row.shards == 4, "{row:?}");
}

/// A group with a backlog is rewound to LATEST while its workers are in the
/// middle of it: none of the backlog is read after the holders' next
/// heartbeat, and every record that arrives after the rewind is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_rewound_to_latest_skips_its_backlog_and_reads_what_comes_after() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let config = eager().max_records(5);
    let mut g = recorded(&ctx, &stream, config).await;
    let store = g.store.clone();
    produce(&ctx.aws.kinesis, &stream, 12, 0..8).await;
    for _ in 0..3 {
        g.rebalancer.tick().await.unwrap();
        for w in &mut g.workers {
            w.step().await.unwrap();
        }
    }
    let backlog = records(12, 0..8);
    let read = g.history.lock().unwrap().processed.len();
    assert!(read > 0 && read < backlog.len(), "mid-backlog: {read} read");

    tokio::time::sleep(Duration::from_millis(50)).await;
    shardkeeper_cli::rewind::rewind(
        &store,
        &ctx.aws.kinesis,
        &rewind_args(&store, "LATEST"),
        |_| true,
    )
    .await
    .unwrap();
    let rewound = Instant::now();
    // Over a second on (servers may stamp arrivals in whole seconds).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    produce(&ctx.aws.kinesis, &stream, 12, 8..12).await;
    let after = records(12, 8..12);
    g.run_until(&ctx, rewound, &after).await;
    let again = g.processed_since(rewound);
    let skipped: Vec<&Key> = again.iter().filter(|k| backlog.contains(*k)).collect();
    assert!(
        skipped.is_empty(),
        "backlog read after the rewind: {skipped:?}"
    );
    let v = check(&g.since(rewound, &after));
    assert!(v.passed(), "{v:?}");
}

/// A rewind cut short (one shard moved, the other not) shows as unfinished
/// in `status`; the same request run again moves only the shard left, and
/// the rewind is finished. A dry run writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_cut_short_shows_in_status_and_running_it_again_finishes_it() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let mut g = recorded(&ctx, &stream, eager()).await;
    let store = g.store.clone();
    produce(&ctx.aws.kinesis, &stream, 6, 0..3).await;
    let start = Instant::now();
    let all = records(6, 0..3);
    g.run_until(&ctx, start, &all).await;

    let mut dry = rewind_args(&store, "trim-horizon");
    dry.change.dry_run = true;
    let before = store.load_group().await.unwrap();
    let out = shardkeeper_cli::rewind::rewind(&store, &ctx.aws.kinesis, &dry, |_| true)
        .await
        .unwrap();
    assert!(out.contains("\"report\": null"), "{out}");
    assert_eq!(
        store.load_group().await.unwrap().shards,
        before.shards,
        "a dry run writes nothing"
    );

    // Cut short: only the first shard's move is made.
    let listed: Vec<ShardSpec> = list_shards(&ctx.aws, &stream)
        .await
        .iter()
        .map(|s| ShardSpec::from_kinesis(s).unwrap())
        .collect();
    let plan = plan_rewind(&before, &listed, &RewindTarget::TrimHorizon, store.now()).unwrap();
    // Between the plan and its moves the second shard changes hands: its
    // move finds the counter moved on and leaves it.
    let second = &plan.moves[1].shard;
    let seen = before
        .shards
        .iter()
        .find(|s| &s.shard_id == second)
        .unwrap();
    match seen.lease() {
        Some(held) => {
            store
                .leases()
                .release(&held, Duration::from_secs(10))
                .await
                .unwrap();
        }
        None => {
            lease(&store, second, "w9").await;
        }
    }
    let report = apply_rewind(&store, &plan).await.unwrap();
    assert_eq!(report.changed, vec![second.clone()], "{report:?}");
    assert!(!report.finished);
    let first = report.moved[0].clone();
    let snapshot = store.load_group().await.unwrap();
    let row = GroupStatus::from_snapshot(&snapshot, Duration::from_secs(10))
        .rewind
        .unwrap();
    assert!(
        !row.finished && row.moved == 1 && row.shards == 2,
        "{row:?}"
    );
    let counter = |snapshot: &shardkeeper::state::GroupSnapshot, id: &ShardId| {
        snapshot
            .shards
            .iter()
            .find(|s| &s.shard_id == id)
            .unwrap()
            .counter
    };
    let first_counter = counter(&snapshot, &first);
    let status = shardkeeper_cli::commands::status(
        &store,
        &shardkeeper_cli::args::StatusArgs {
            target: rewind_args(&store, "x").target,
            json: false,
            heartbeat_timeout_seconds: 10,
        },
    )
    .await
    .unwrap();
    assert!(
        status.contains("1 of 2 shard(s) moved, unfinished"),
        "{status}"
    );

    let out = shardkeeper_cli::rewind::rewind(
        &store,
        &ctx.aws.kinesis,
        &rewind_args(&store, "TRIM_HORIZON"),
        |_| true,
    )
    .await
    .unwrap();
    let outcome: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(outcome["plan"]["resumed"], true, "{outcome}");
    assert_eq!(
        outcome["report"]["moved"],
        serde_json::json!([second.as_str()]),
        "{outcome}"
    );
    assert_eq!(outcome["report"]["finished"], true);
    let snapshot = store.load_group().await.unwrap();
    assert_eq!(counter(&snapshot, &first), first_counter, "not moved twice");
    let row = GroupStatus::from_snapshot(&snapshot, Duration::from_secs(10))
        .rewind
        .unwrap();
    assert!(row.finished && row.moved == 2, "{row:?}");
    assert!(snapshot
        .shards
        .iter()
        .all(|s| s.checkpoint == Some(Checkpoint::TrimHorizon)));
}

/// One shard rewound to a sequence number, while the group runs: its
/// records from that one on are read again, once, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_rewound_to_a_sequence_number_reads_from_it_again_and_nothing_else() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let mut g = recorded(&ctx, &stream, eager()).await;
    let store = g.store.clone();
    produce(&ctx.aws.kinesis, &stream, 12, 0..4).await;
    let start = Instant::now();
    g.run_until(&ctx, start, &records(12, 0..4)).await;

    let shard = list_shards(&ctx.aws, &stream).await[0]
        .shard_id()
        .to_owned();
    let in_shard = crate::support::esm::read_shard(&ctx, &stream, &shard).await;
    let middle = in_shard.len() / 2;
    let again: BTreeSet<Key> = in_shard[middle..]
        .iter()
        .map(|r| {
            let n = std::str::from_utf8(r.data().as_ref())
                .unwrap()
                .parse()
                .unwrap();
            (r.partition_key().unwrap().to_owned(), n)
        })
        .collect();
    let mut args = rewind_args(&store, "x");
    args.to = None;
    args.shard = Some(shard.clone());
    args.to_sequence = Some(in_shard[middle].sequence_number().to_owned());
    shardkeeper_cli::rewind::rewind(&store, &ctx.aws.kinesis, &args, |_| true)
        .await
        .unwrap();
    let rewound = Instant::now();
    g.run_until(&ctx, rewound, &again).await;
    let read = g.processed_since(rewound);
    assert_eq!(read.iter().cloned().collect::<BTreeSet<_>>(), again);
    assert_eq!(read.len(), again.len(), "each once");
}

/// Nothing is written before the operator agrees: a declined rewind
/// leaves the group as it was, even the children of a split it has not
/// recorded yet, which the question counts; agreed, it records them and
/// moves them with the others.
#[tokio::test]
async fn a_declined_rewind_writes_nothing_not_even_the_shards_new_to_the_group() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    crate::support::common::start_group(&ctx, &store).await;
    let started = store.load_group().await.unwrap();
    shardkeeper::consumer::discover_shards(&store, &ctx.aws.kinesis, &started)
        .await
        .unwrap();
    split_first(&ctx.aws, &stream).await;
    let before = store.load_group().await.unwrap();
    assert_eq!(before.shards.len(), 1, "the children are not recorded yet");

    let mut args = rewind_args(&store, "TRIM_HORIZON");
    args.change.yes = false;
    let mut asked = String::new();
    let declined = shardkeeper_cli::rewind::rewind(&store, &ctx.aws.kinesis, &args, |q| {
        asked = q.to_owned();
        false
    })
    .await;
    assert!(
        matches!(declined, Err(shardkeeper_cli::Error::NotConfirmed)),
        "{declined:?}"
    );
    assert!(
        asked.contains("rewind 3 shard(s)") && asked.contains("2 of them new"),
        "{asked}"
    );
    let after = store.load_group().await.unwrap();
    assert_eq!(after.shards, before.shards, "nothing written");
    assert_eq!(after.stream, before.stream, "no rewind recorded");

    let out = shardkeeper_cli::rewind::rewind(&store, &ctx.aws.kinesis, &args, |_| true)
        .await
        .unwrap();
    let outcome: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        outcome["plan"]["moves"].as_array().unwrap().len(),
        3,
        "the parent and its two children, recorded once agreed: {outcome}"
    );
}

/// An observer reads the home key (the stream item, where a rewind is
/// recorded) and the shards' keys in two queries. A rewind that begins
/// between the two leaves a snapshot with no rewind and a child already
/// waiting again for its parent, which is still depleted (the rewind
/// reopens it next): the planner takes the wait for a leftover and plans
/// to clear it. The clear is conditioned on the rewind the snapshot saw,
/// so it is refused and the child still waits for its reopened parent
/// (before, it was cleared, and the child was read before its parent).
#[tokio::test]
async fn a_childs_wait_survives_a_snapshot_torn_across_the_start_of_a_rewind() {
    use crate::support::common::ctx;
    use shardkeeper::group::{execute, plan_rebalance, Action, Ages, RebalanceConfig};
    use shardkeeper::state::{ConsumerId, GroupPart, PositionMove, RewindState, ShardScope};
    const TERM: Duration = Duration::from_secs(10);
    let ctx = ctx().await;
    let store = ctx.store("rewind-torn");
    ctx.start_group_item(&store).await;
    let group = ShardScope::Group;
    let (parent, child) = crate::support::common::parent_and_child();
    for spec in [&parent, &child] {
        store.shards().ensure(&group, spec).await.unwrap();
    }
    let lease = store
        .leases()
        .acquire(&parent.shard_id, &ConsumerId::new("p").unwrap(), TERM)
        .await
        .unwrap()
        .unwrap();
    store
        .checkpoints()
        .mark_depleted(&lease, std::slice::from_ref(&child))
        .await
        .unwrap();

    // The home key is read: no rewind yet.
    let home = store.observe_group(GroupPart::Home).await.unwrap();
    // A rewind begins and moves the child to wait for its parent ...
    let rewind = RewindState {
        id: ctx.clock_now(),
        request: "trim-horizon".into(),
        to: Checkpoint::TrimHorizon,
        shards: 2,
        finished: None,
    };
    assert!(store.checkpoints().begin_rewind(&rewind).await.unwrap());
    let seen = store.shards().get(&group, &child.shard_id).await.unwrap();
    let mut wait = PositionMove::to(Checkpoint::TrimHorizon);
    wait.wait_for = vec![parent.shard_id.clone()];
    wait.rewind = Some(rewind.id);
    assert!(store
        .checkpoints()
        .move_position(&group, &seen, &wait)
        .await
        .unwrap());
    // ... then the shards are read: the child waits on a depleted parent.
    let mut torn = store.observe_group(GroupPart::Leases).await.unwrap();
    torn.stream = home.stream.clone();
    let actions = plan_rebalance(&torn, &Ages::default(), &RebalanceConfig::default());
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::ClearPendingParent { .. })),
        "{actions:?}"
    );
    execute(&store, None, &actions, TERM).await.unwrap();
    // The rewind reopens the parent.
    let seen = store.shards().get(&group, &parent.shard_id).await.unwrap();
    let mut reopen = PositionMove::to(Checkpoint::TrimHorizon);
    reopen.reopen = true;
    reopen.rewind = Some(rewind.id);
    assert!(store
        .checkpoints()
        .move_position(&group, &seen, &reopen)
        .await
        .unwrap());
    let state = store.shards().get(&group, &child.shard_id).await.unwrap();
    assert_eq!(
        state.pending_parents,
        vec![parent.shard_id.clone()],
        "the child waits for its reopened parent"
    );
}
