//! `backfill`: a bounded group beside a live one reads exactly its range
//! (through a split, children after parents), says it is finished, and its
//! workers end. Each run is recorded and checked with the history checker.

use crate::support::common::{
    cli_target, create_stream, ctx, reap_once, scripted, split_first, Ctx,
};
use crate::support::consume::{eager, produce};
use crate::support::recorded::{
    millis_now, parents, recorded, recorded_on, records, Key, Recorded,
};
use shardkeeper::group::GroupStatus;
use shardkeeper::processing::RecordHandler;
use shardkeeper::state::StateStore;
use shardkeeper_cli::args::BackfillArgs;
use shardkeeper_cli::Error;
use shardkeeper_history::check;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

fn backfill_args(store: &StateStore, from: &str) -> BackfillArgs {
    BackfillArgs {
        target: cli_target(store),
        from: from.to_owned(),
        until: None,
        until_group: None,
        change: scripted(),
    }
}

async fn backfill(ctx: &Ctx, store: &StateStore, args: &BackfillArgs) -> Result<String, Error> {
    shardkeeper_cli::backfill::backfill(store, &ctx.aws.kinesis, args, |_| true).await
}

/// Ticks and steps until the bounded group is finished (bounded).
async fn run_to_finish<H: RecordHandler>(ctx: &Ctx, g: &mut Recorded<H>) -> bool {
    for _ in 0..120 {
        let tick = g.rebalancer.tick().await.unwrap();
        if tick.bounded_shards_left == Some(0) {
            return true;
        }
        for w in g.workers.iter_mut() {
            w.step().await.unwrap();
        }
        ctx.clock.advance(Duration::from_secs(1));
    }
    false
}

/// A backfill from one time to another, through a split: it reads exactly
/// the records that arrived between them (none before, none after), keys
/// in order, children after their parent; then it is finished, its workers
/// end their runs before any deadline, and status says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_between_two_times_reads_exactly_its_range_and_its_workers_end() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    // Over a second between the loads and the times (servers may stamp
    // arrivals in whole seconds).
    let pause = || tokio::time::sleep(Duration::from_millis(1100));
    produce(&ctx.aws.kinesis, &stream, 12, 0..2).await;
    pause().await;
    let from = millis_now();
    pause().await;
    produce(&ctx.aws.kinesis, &stream, 12, 2..4).await;
    split_first(&ctx.aws, &stream).await;
    produce(&ctx.aws.kinesis, &stream, 12, 4..6).await;
    pause().await;
    let until = millis_now();
    pause().await;
    produce(&ctx.aws.kinesis, &stream, 12, 6..8).await;

    let store = ctx.store(&stream);
    let mut args = backfill_args(&store, &from.to_string());
    args.until = Some(until.to_string());
    backfill(&ctx, &store, &args).await.unwrap();
    let mut g = recorded_on(&ctx, store.clone(), eager());
    let start = Instant::now();
    assert!(run_to_finish(&ctx, &mut g).await, "finished");

    let range = records(12, 2..6);
    let read: BTreeSet<Key> = g.processed_since(start).into_iter().collect();
    assert_eq!(read, range, "exactly the records between the two times");
    let mut h = g.since(start, &range);
    h.parents = parents(&ctx, &stream).await;
    let v = check(&h);
    assert!(v.passed() && v.duplicates == 0, "{v:?}");

    // The workers end their runs on their own, well before any deadline,
    // and leave.
    for w in &mut g.workers {
        let report = w.run_until(None, || false).await.unwrap();
        assert!(report.group_finished, "{report:?}");
    }
    // Done, it costs nothing: a rebalancer and a reaper tick write nothing.
    let before = ctx.aws.dynamodb_requests.snapshot();
    let tick = g.rebalancer.tick().await.unwrap();
    assert_eq!(tick.bounded_shards_left, Some(0));
    reap_once(&store, &ctx.aws.kinesis).await;
    let writes = ctx.aws.dynamodb_requests.writes_since(&before);
    assert_eq!(writes, 0, "{:?}", ctx.aws.dynamodb_requests.since(&before));
    let status =
        GroupStatus::from_snapshot(&store.load_group().await.unwrap(), Duration::from_secs(10));
    let bounded = status.bounded.unwrap();
    assert!(bounded.finished && bounded.done == 4, "{bounded:?}");
}

/// A backfill up to where a live group stands, beside it: a live group
/// that has not started a shard is refused (nothing written); once it has,
/// the backfill reads what the live group had read when it started, and
/// nothing the live group reads after; running it again on its group is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_up_to_a_live_group_reads_what_it_had_read_and_nothing_after() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 2).await;
    let mut live = recorded(&ctx, &stream, eager()).await;
    produce(&ctx.aws.kinesis, &stream, 12, 0..4).await;

    let store = ctx.store(&stream);
    let mut args = backfill_args(&store, "TRIM_HORIZON");
    args.until_group = Some(live.store.config().group.to_string());
    let refused = backfill(&ctx, &store, &args).await.unwrap_err();
    assert!(matches!(refused, Error::BackfillRefused(_)), "{refused:?}");
    assert!(
        store.load_group().await.unwrap().stream.is_none(),
        "nothing written"
    );

    let start = Instant::now();
    let first = records(12, 0..4);
    live.run_until(&ctx, start, &first).await;
    backfill(&ctx, &store, &args).await.unwrap();
    let again = backfill(&ctx, &store, &args).await.unwrap_err();
    assert!(matches!(again, Error::BackfillRefused(_)), "{again:?}");

    // The live group reads on while the backfill runs.
    produce(&ctx.aws.kinesis, &stream, 12, 4..8).await;
    let mut g = recorded_on(&ctx, store.clone(), eager());
    let backfill_start = Instant::now();
    let later = records(12, 4..8);
    live.run_until(&ctx, backfill_start, &later).await;
    assert!(run_to_finish(&ctx, &mut g).await, "finished");
    let read: BTreeSet<Key> = g.processed_since(backfill_start).into_iter().collect();
    assert_eq!(read, first, "what the live group had read, nothing after");
    let v = check(&g.since(backfill_start, &first));
    assert!(v.passed() && v.duplicates == 0, "{v:?}");
    let live_read: BTreeSet<Key> = live.processed_since(backfill_start).into_iter().collect();
    assert_eq!(live_read, later, "the live group read on, unaffected");
}
