//! A session's heartbeats on a task of their own (`keep_alive`): they keep
//! the leases alive while the worker's loop is busy, never past a
//! revocation the session has not acted on, and stop when the loop stalls.
//! Real time, on the store's own clock.

use crate::support::common::{ctx, seed_shards};
use shardkeeper::consumer::ConsumerSession;
use shardkeeper::state::{Checkpoint, ConsumerId, ConsumerInfo, ShardId, StateStore, TakeFrom};
use std::time::Duration;

fn no_progress(_: &ShardId) -> Option<(Checkpoint, Option<i64>)> {
    None
}

fn session(store: &StateStore, name: &str, term: Duration) -> ConsumerSession {
    let info = ConsumerInfo::for_this_process(ConsumerId::new(name).unwrap(), store.now());
    ConsumerSession::new(store.clone(), info, term)
}

/// A session that holds `count` shards given to it.
async fn holding(store: &StateStore, name: &str, count: usize, term: Duration) -> ConsumerSession {
    let shards = seed_shards(store, count).await;
    let mut s = session(store, name, term);
    s.tick(no_progress).await.unwrap();
    for shard in &shards {
        let free = TakeFrom::Stale {
            counter: 0,
            expires: None,
            session: None,
        };
        store
            .leases()
            .give(shard, s.id(), &free, None, term)
            .await
            .unwrap()
            .unwrap();
    }
    let tick = s.tick(no_progress).await.unwrap();
    assert_eq!(tick.gained.len(), count);
    s
}

/// The pulse extends the leases' local expiry while the session's own
/// ticks do not come; once an observer took a lease (the revocation noted
/// on the consumer's item), its answers extend nothing until the session
/// acted on the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pulse_keeps_leases_alive_but_never_past_a_revocation() {
    let ctx = ctx().await;
    let store = ctx.store("pulse-revoked");
    let term = Duration::from_secs(10);
    let mut s = holding(&store, "a", 2, term).await;
    let shards: Vec<ShardId> = s.leases().map(|l| l.shard_id.clone()).collect();
    s.keep_alive(Duration::from_millis(300));
    let first = s.local_expiry(&shards[1]).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    let extended = s.local_expiry(&shards[1]).unwrap();
    assert!(extended > first, "the pulse's heartbeats extend the leases");

    // An observer takes shards[0] on the session as it sees it now (the
    // pulse may beat in between: then it tries again).
    let lease = s.lease(&shards[0]).unwrap().clone();
    let mut taken = false;
    for _ in 0..20 {
        s.alive();
        let seen = store.consumers().get(s.id()).await.unwrap().unwrap();
        let from = TakeFrom::Stale {
            counter: lease.counter,
            expires: Some(lease.expires),
            session: Some(seen.session()),
        };
        let other = ConsumerId::new("b").unwrap();
        if store
            .leases()
            .take(&shards[0], &other, &from, None, term)
            .await
            .unwrap()
            .is_some()
        {
            taken = true;
            break;
        }
    }
    assert!(taken);
    let at_take = s.local_expiry(&shards[1]).unwrap();
    tokio::time::sleep(Duration::from_millis(900)).await;
    s.alive();
    assert_eq!(
        s.local_expiry(&shards[0]).unwrap(),
        at_take,
        "the revoked lease is not extended"
    );
    assert_eq!(
        s.local_expiry(&shards[1]).unwrap(),
        at_take,
        "nothing is, until the session acts on the note"
    );
    // The session's own tick drops the revoked lease and keeps the other.
    let tick = s.tick(no_progress).await.unwrap();
    assert_eq!(tick.lost, vec![shards[0].clone()]);
    assert!(s.local_expiry(&shards[1]).unwrap() > at_take);
}

/// A loop that stops marking itself alive (a handler that never returns)
/// does not keep its leases forever: the pulse stops after three terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pulse_stops_when_the_loop_stalls() {
    let ctx = ctx().await;
    let store = ctx.store("pulse-stalled");
    let term = Duration::from_millis(400);
    let mut s = holding(&store, "a", 1, term).await;
    s.keep_alive(Duration::from_millis(50));
    let beat = |store: StateStore, id: ConsumerId| async move {
        store.consumers().get(&id).await.unwrap().unwrap().beat
    };
    let id = s.id().clone();
    let early = beat(store.clone(), id.clone()).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let later = beat(store.clone(), id.clone()).await;
    assert!(later > early, "beating while the loop was seen");
    // Three terms (1.2 s) after the loop was last seen, the beats stop.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let stopped = beat(store.clone(), id.clone()).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        beat(store.clone(), id).await,
        stopped,
        "no beat once stalled"
    );
}

/// A worker whose loop keeps its schedule heartbeats as often as before the
/// pulse: its own beats come first, and the pulse sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_schedule_sends_no_heartbeat_of_the_pulse() {
    use crate::support::common::create_stream;
    use crate::support::consume::{worker_with, Log};
    use shardkeeper::consumer::WorkerConfig;
    let ctx = ctx().await;
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let every = Duration::from_millis(300);
    let config = WorkerConfig::default()
        .renew_every(every)
        .idle_poll_interval(Duration::from_millis(50));
    let mut worker = worker_with(&store, &ctx.aws.kinesis, "a", Log::default(), config);
    ctx.aws.dynamodb_requests.start_log();
    let run = Duration::from_secs(3);
    worker
        .run_until(Some(std::time::Instant::now() + run), || false)
        .await
        .unwrap();
    let beats = ctx
        .aws
        .dynamodb_requests
        .take_log()
        .iter()
        .filter(|r| r.operation == "UpdateItem")
        .filter(|r| String::from_utf8_lossy(&r.body).contains("SET #heartbeat = :now"))
        .count();
    // One at the start, one an interval, and the leave's.
    let most = (run.as_millis() / every.as_millis()) as usize + 2;
    assert!(
        beats <= most,
        "{beats} heartbeats in {run:?} (at most {most})"
    );
}

/// The pulse gives the leases up once the worker's loop went three terms
/// unseen, so no call of the loop may outlast that: a session's call whose
/// every attempt hangs starts no attempt once the term has passed since
/// its first (before, it made all of its policy's attempts, 6, about 70 s
/// at the store's timeouts, so a hung call cost every lease). Counted in
/// attempts: each attempt here hangs past the attempt timeout (400 ms) at a
/// proxy, and the term is 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_call_whose_attempts_hang_starts_none_past_the_term() {
    use shardkeeper::state::{RetryPolicy, SdkTimeouts};
    use shardkeeper_local::{Faults, SlowRequests};
    let faulty = crate::support::faulty::Faulty::start(23).await;
    let term = Duration::from_secs(1);
    let config = faulty
        .ctx
        .store("pulse-capped")
        .config()
        .clone()
        .retry(RetryPolicy::default())
        .timeouts(SdkTimeouts::new(
            Duration::from_secs(1),
            Duration::from_millis(400),
        ));
    let store = StateStore::with_clock(
        faulty.ctx.aws.dynamodb.clone(),
        config,
        std::sync::Arc::new(faulty.ctx.clock.clone()),
    );
    let mut s = holding(&store, "a", 1, term).await;
    let shard = s.leases().next().unwrap().shard_id.clone();
    faulty
        .dynamodb
        .set_faults(Faults {
            slow: Some(SlowRequests {
                operation: "UpdateItem".into(),
                body_contains: vec!["cp_ord".into()],
                latency: Duration::from_secs(3)..=Duration::from_secs(3),
            }),
            ..Faults::none()
        })
        .unwrap();
    let failed = s
        .checkpoint(&shard, &Checkpoint::after("5").unwrap(), None)
        .await
        .unwrap_err();
    assert!(failed.is_transient(), "{failed}");
    let attempts = faulty.dynamodb.counts().slowed;
    assert!(
        (1..u64::from(RetryPolicy::default().max_attempts)).contains(&attempts),
        "{attempts} attempts"
    );
}
