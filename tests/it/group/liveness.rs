//! What keeping a group alive costs: one heartbeat per consumer per
//! interval, whatever it holds, counted at the client.

use crate::support::common::{create_stream, ctx, rebalancer};
use aws_sdk_dynamodb::types::AttributeValue::{N, S};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::functions::Reaper;
use shardkeeper::group::ReapConfig;
use shardkeeper::state::{Checkpoint, ConsumerId, ConsumerInfo, ShardId};
use shardkeeper::state::{SCHEMA_VERSION, UPGRADE_WINDOW};
use std::collections::BTreeMap;
use std::time::Duration;

const TERM: Duration = Duration::from_secs(10);

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
    let reaper = Reaper::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        ReapConfig::default(),
    );
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
    let writes = ctx.aws.dynamodb_requests.writes_since(&before);
    assert!(writes <= 240, "{writes} writes in a minute: {sent:?}");
    assert_eq!(writes, 80, "a heartbeat a consumer every 3 s: {sent:?}");
    assert_eq!(held(&sessions), balanced);
}

/// A group of the code before sessions is raised to the schema of sessions
/// by the first newer process to start, which records when. Processes of
/// the older code may still run beside the newer for a while (a Lambda
/// invocation in flight), and that code's rebalancer takes a lease it sees
/// unrenewed for a term: so for `UPGRADE_WINDOW` a session also renews each
/// lease before it heartbeats, and then stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_upgrade_sessions_also_renew_each_lease_for_the_upgrade_window() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    // The group as the older code left it: schema 2.
    ctx.aws
        .dynamodb
        .update_item()
        .table_name(&ctx.table)
        .key("pk", S(store.layout().partition_key().to_owned()))
        .key("sk", S("STREAM".to_owned()))
        .update_expression("SET #schema = :two REMOVE #since")
        .expression_attribute_names("#schema", "schema")
        .expression_attribute_names("#since", "sessions_since")
        .expression_attribute_values(":two", N("2".to_owned()))
        .send()
        .await
        .unwrap();
    let old = store.stream_item().state().await.unwrap().unwrap();
    assert_eq!((old.schema_version, old.sessions_since), (2, None));
    // A newer process starts on it: raised, and when.
    store
        .stream_item()
        .init(old.stream_created, old.stream_arn.as_deref())
        .await
        .unwrap();
    let raised = store.stream_item().state().await.unwrap().unwrap();
    assert_eq!(raised.schema_version, SCHEMA_VERSION);
    assert_eq!(raised.sessions_since, Some(store.now()));

    let rebalancer = rebalancer(&ctx.aws, &store);
    let id = ConsumerId::new("c0").unwrap();
    let mut session = ConsumerSession::new(
        store.clone(),
        ConsumerInfo::for_this_process(id, store.now()),
        TERM,
    );
    session.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    assert_eq!(session.tick(no_progress).await.unwrap().gained.len(), 4);
    let updates = |before: &BTreeMap<String, shardkeeper_local::OperationCount>| {
        ctx.aws.dynamodb_requests.since(before)["UpdateItem"].requests
    };
    let before = ctx.aws.dynamodb_requests.snapshot();
    session.tick(no_progress).await.unwrap();
    assert_eq!(updates(&before), 1 + 4, "a heartbeat and a renewal a lease");
    ctx.clock.advance(UPGRADE_WINDOW);
    let before = ctx.aws.dynamodb_requests.snapshot();
    session.tick(no_progress).await.unwrap();
    assert_eq!(updates(&before), 1, "past the window, the heartbeat alone");
}

/// The lease term is the holder's as much as the observers': a worker
/// configured with 30 s beside a control plane at 10 s processes up to 30 s
/// past its last heartbeat, so the rebalancer and the reaper, which judge
/// by their own 10 s, would give its leases away while it may still be
/// inside a batch. Its heartbeats say its term, and observers wait out the
/// longer of the two.
#[tokio::test]
async fn observers_wait_out_a_holders_longer_term_before_moving_its_leases() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let reaper = Reaper::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        ReapConfig::default(),
    );
    let info =
        |name: &str| ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let long = Duration::from_secs(30);
    let mut slow = ConsumerSession::new(store.clone(), info("slow"), long);
    let mut b = ConsumerSession::new(store.clone(), info("b"), TERM);
    slow.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    slow.tick(no_progress).await.unwrap();
    b.tick(no_progress).await.unwrap();
    let held: Vec<ShardId> = slow.leases().map(|l| l.shard_id.clone()).collect();
    assert_eq!(held.len(), 4);
    // The slow holder's last heartbeat: it may process until this plus 30 s.
    slow.tick(no_progress).await.unwrap();
    let mut elapsed = Duration::ZERO;
    while elapsed < Duration::from_secs(60) {
        ctx.clock.advance(Duration::from_secs(3));
        elapsed += Duration::from_secs(3);
        b.tick(no_progress).await.unwrap();
        rebalancer.tick().await.unwrap();
        reaper.tick().await.unwrap();
        let mut owners = Vec::new();
        for shard in &held {
            owners.push(store.leases().get_owner(shard).await.unwrap());
        }
        if elapsed < long {
            assert!(
                owners.iter().all(|o| o.as_ref() == Some(slow.id())),
                "{elapsed:?} after its last heartbeat, within its 30 s term: {owners:?}"
            );
        }
    }
    // Past its term, the shards went to the live consumer.
    b.tick(no_progress).await.unwrap();
    assert_eq!(b.leases().count(), 4);
}

/// The reaper reads the consumers every tick and the shards only when it
/// has something to do with them: a consumer to reap (its leases to free),
/// or once a minute for the shards past retention. Its ticks in between
/// cost one read of the home key.
#[tokio::test]
async fn the_reaper_reads_the_shards_once_a_minute_or_for_a_consumer_to_reap() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let rebalancer = rebalancer(&ctx.aws, &store);
    let reaper = Reaper::new(
        store.clone(),
        ctx.aws.kinesis.clone(),
        ReapConfig::default(),
    );
    let info =
        |name: &str| ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    let mut a = ConsumerSession::new(store.clone(), info("a"), TERM);
    let mut b = ConsumerSession::new(store.clone(), info("b"), TERM);
    a.tick(no_progress).await.unwrap();
    b.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    a.tick(no_progress).await.unwrap();
    b.tick(no_progress).await.unwrap();
    let queries = |before: &BTreeMap<String, shardkeeper_local::OperationCount>| {
        ctx.aws
            .dynamodb_requests
            .since(before)
            .get("Query")
            .map_or(0, |c| c.requests)
    };
    let first = ctx.aws.dynamodb_requests.snapshot();
    reaper.tick().await.unwrap();
    let whole = queries(&first);
    // The next ticks of the minute: the home key alone (two ranges).
    for _ in 0..5 {
        ctx.clock.advance(Duration::from_secs(5));
        a.tick(no_progress).await.unwrap();
        b.tick(no_progress).await.unwrap();
        let before = ctx.aws.dynamodb_requests.snapshot();
        reaper.tick().await.unwrap();
        assert_eq!(queries(&before), 2, "the home key alone");
    }
    assert!(
        whole > 2,
        "the first tick read the shards too ({whole} queries)"
    );
    // b stops; once it is past the heartbeat timeout, the reaper reads the
    // shards and frees its leases.
    let held_by_b = b.leases().count();
    assert!(held_by_b > 0);
    let mut freed = 0;
    for _ in 0..6 {
        ctx.clock.advance(Duration::from_secs(5));
        a.tick(no_progress).await.unwrap();
        freed += reaper.tick().await.unwrap().execution.leases_released;
    }
    assert_eq!(freed as usize, held_by_b, "b's leases freed");
}

/// The upgrade window ends by observation, not by the clock alone: a
/// consumer of the code before sessions still registered long after the
/// raise (its deployment, rebalancer and reaper included, kept running) is
/// seen by the rebalancer, which records it on the stream item; every
/// session then renews each lease again, for the window from that sighting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_renew_each_lease_again_while_older_code_is_seen_after_the_window() {
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 4).await;
    let store = ctx.store(&stream);
    let home = store.layout().partition_key().to_owned();
    let rebalancer = rebalancer(&ctx.aws, &store);
    let id = ConsumerId::new("c0").unwrap();
    let mut session = ConsumerSession::new(
        store.clone(),
        ConsumerInfo::for_this_process(id, store.now()),
        TERM,
    );
    session.tick(no_progress).await.unwrap();
    rebalancer.tick().await.unwrap();
    assert_eq!(session.tick(no_progress).await.unwrap().gained.len(), 4);
    // Raised to sessions an hour ago: the window is long over.
    let since = store.now() - 3_600_000;
    ctx.aws
        .dynamodb
        .update_item()
        .table_name(&ctx.table)
        .key("pk", S(home.clone()))
        .key("sk", S("STREAM".to_owned()))
        .update_expression("SET #since = :since")
        .expression_attribute_names("#since", "sessions_since")
        .expression_attribute_values(":since", N(since.to_string()))
        .send()
        .await
        .unwrap();
    let updates = |before: &BTreeMap<String, shardkeeper_local::OperationCount>| {
        ctx.aws.dynamodb_requests.since(before)["UpdateItem"].requests
    };
    ctx.clock.advance(Duration::from_secs(3));
    let before = ctx.aws.dynamodb_requests.snapshot();
    session.tick(no_progress).await.unwrap();
    assert_eq!(updates(&before), 1, "the heartbeat alone");

    // A consumer of the older code (no beat counter) is still registered.
    ctx.aws
        .dynamodb
        .put_item()
        .table_name(&ctx.table)
        .item("pk", S(home.clone()))
        .item("sk", S("CONSUMER#older".to_owned()))
        .item("heartbeat", N(store.now().to_string()))
        .item(
            "active",
            aws_sdk_dynamodb::types::AttributeValue::Bool(false),
        )
        .send()
        .await
        .unwrap();
    rebalancer.tick().await.unwrap();
    let state = store.stream_item().state().await.unwrap().unwrap();
    assert_eq!(state.older_seen, Some(store.now()), "the rebalancer saw it");
    // The session looks again within five minutes, and renews each lease.
    let mut renewed = false;
    for _ in 0..110 {
        ctx.clock.advance(Duration::from_secs(3));
        let before = ctx.aws.dynamodb_requests.snapshot();
        session.tick(no_progress).await.unwrap();
        if updates(&before) == 1 + 4 {
            renewed = true;
            break;
        }
    }
    assert!(renewed, "a heartbeat and a renewal a lease again");
}
