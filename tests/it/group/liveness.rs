//! What keeping a group alive costs: one heartbeat per consumer per
//! interval, whatever it holds, counted at the client.

use crate::support::common::{create_stream, ctx, rebalancer};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::Reaper;
use shardkeeper::group::ReapConfig;
use shardkeeper::state::{Checkpoint, ConsumerId, ConsumerInfo, ShardId};
use std::collections::BTreeMap;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(10);

/// The operations that write (each at least one write unit).
const WRITES: [&str; 5] = [
    "UpdateItem",
    "PutItem",
    "DeleteItem",
    "TransactWriteItems",
    "BatchWriteItem",
];

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

/// An idle group of 256 shards and 4 consumers, with the rebalancer and
/// the reaper ticking, makes at most 240 DynamoDB writes a minute: each
/// consumer's session heartbeats every 3 s (20 writes a minute) whatever it
/// holds, and the rebalancer and the reaper write nothing while nothing
/// moves. Renewing each lease every 3 s, as the protocol before sessions
/// did (and KCL does), was 5,120 renewals a minute on top.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_group_of_256_shards_and_4_consumers_writes_at_most_240_times_a_minute() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 256).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let reaper = Reaper {
        store: store.clone(),
        kinesis: ctx.aws.kinesis.clone(),
        config: ReapConfig::default(),
        emit_metrics: false,
        sightings: Default::default(),
    };
    let mut sessions: Vec<ConsumerSession> = (0..4)
        .map(|i| {
            let id = ConsumerId::new(format!("c{i}")).unwrap();
            ConsumerSession::new(
                store.clone(),
                ConsumerInfo::for_this_process(id, store.now()),
                TERM,
            )
        })
        .collect();
    let held = |sessions: &[ConsumerSession]| -> BTreeMap<String, usize> {
        sessions
            .iter()
            .map(|s| (s.id().to_string(), s.leases().count()))
            .collect()
    };
    // Balanced: the sessions register, the rebalancer gives every shard,
    // the sessions take them up.
    for _ in 0..3 {
        for s in sessions.iter_mut() {
            s.tick(no_progress).await.unwrap();
        }
        rebalancer.tick().await.unwrap();
        reaper.tick().await.unwrap();
    }
    for s in sessions.iter_mut() {
        s.tick(no_progress).await.unwrap();
    }
    let balanced = held(&sessions);
    assert!(balanced.values().all(|n| *n == 64), "{balanced:?}");

    // One minute, in one-second steps: each session ticks every 3 s, the
    // rebalancer and the reaper every 5 s (their defaults).
    let before = ctx.aws.dynamodb_requests.snapshot();
    for second in 1..=60 {
        ctx.clock.advance(Duration::from_secs(1));
        if second % 3 == 0 {
            for s in sessions.iter_mut() {
                let tick = s.tick(no_progress).await.unwrap();
                assert!(tick.lost.is_empty() && tick.gained.is_empty(), "{tick:?}");
            }
        }
        if second % 5 == 0 {
            let tick = rebalancer.tick().await.unwrap();
            assert_eq!(tick.moves(), 0, "{tick:?}");
            reaper.tick().await.unwrap();
        }
    }
    let sent = ctx.aws.dynamodb_requests.since(&before);
    let writes: u64 = WRITES
        .iter()
        .filter_map(|op| sent.get(*op))
        .map(|c| c.requests)
        .sum();
    assert!(writes <= 240, "{writes} writes in a minute: {sent:?}");
    assert_eq!(writes, 80, "a heartbeat a consumer every 3 s: {sent:?}");
    assert_eq!(held(&sessions), balanced);
}
