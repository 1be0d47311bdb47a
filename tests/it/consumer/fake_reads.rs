//! What the local Kinesis server cannot show, against a fake behind the
//! worker's read trait: read throttling, `MillisBehindLatest`, a refused
//! (duplicate) subscription, and a shard end the SDK could not decode. The
//! leases, checkpoints and shard listing are still the real servers'.

use crate::support::common::{create_stream, ctx, Ctx};
use crate::support::consume::{eager, logging, Log};
use bytes::Bytes;
use shardkeeper::consumer::retrieval::{
    IteratorStart, KinesisReads, ReadError, ReadFuture, ReadRecord, RecordsPage, Subscription,
    SubscriptionEvent,
};
use shardkeeper::consumer::EfoPool;
use shardkeeper::consumer::StandaloneSession;
use shardkeeper::consumer::{ShardWorker, WorkerConfig};
use shardkeeper::state::{ConsumerId, ConsumerInfo, ShardId, StateError, StreamAddress};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One shard's records, and the misbehaviour to show.
#[derive(Debug, Default)]
struct Shard {
    records: Vec<ReadRecord>,
    /// The shard is closed: reading past its last record ends it.
    closed: bool,
    /// GetRecords answers to throttle before serving.
    throttle: u32,
    /// Subscriptions to refuse as duplicates before serving.
    refuse: u32,
    /// Subscriptions to fail transiently (a 500, or no answer in time)
    /// before serving.
    fail_subscriptions: u32,
    /// GetRecords calls still to fail with this AWS error code.
    fail: Vec<&'static str>,
    /// At the end of the closed shard, a subscription fails the way an
    /// event without a continuation fails to decode.
    undecodable_end: bool,
    millis_behind: i64,
    /// Subscriptions asked for while one was still open.
    overlapping: u32,
    /// When each GetRecords was served, and the bytes it returned.
    served: Vec<(std::time::Instant, usize)>,
    open: Option<Arc<AtomicBool>>,
}

#[derive(Debug, Clone, Default)]
struct FakeReads(Arc<Mutex<Shard>>);

const PER_EVENT: usize = 3;

fn records(keys: u32, per_key: u32) -> Vec<ReadRecord> {
    let mut out = Vec::new();
    for n in 0..per_key {
        for k in 0..keys {
            out.push(ReadRecord {
                sequence_number: (1000 + out.len()).to_string(),
                partition_key: format!("k{k}"),
                data: Bytes::from(n.to_string()),
                arrival: Some(1_800_000_000_000),
            });
        }
    }
    out
}

impl Shard {
    fn index(&self, start: &IteratorStart) -> usize {
        let at = |s: &str| {
            self.records
                .iter()
                .position(|r| r.sequence_number == s)
                .unwrap_or(self.records.len())
        };
        match start {
            IteratorStart::TrimHorizon | IteratorStart::AtTimestamp(_) => 0,
            IteratorStart::Latest => self.records.len(),
            IteratorStart::AtSequence(s) => at(s),
            IteratorStart::AfterSequence(s) => at(s) + 1,
        }
    }
}

impl KinesisReads for FakeReads {
    fn shard_iterator<'a>(
        &'a self,
        _stream: &'a StreamAddress,
        _shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, String> {
        let i = self.0.lock().unwrap().index(start);
        Box::pin(async move { Ok(format!("it-{i}")) })
    }

    fn get_records<'a>(
        &'a self,
        _stream: &'a StreamAddress,
        iterator: &'a str,
        limit: i32,
    ) -> ReadFuture<'a, RecordsPage> {
        let mut shard = self.0.lock().unwrap();
        let answer = if shard.throttle > 0 {
            shard.throttle -= 1;
            Err(ReadError::Throttled {
                operation: "GetRecords",
                code: "ProvisionedThroughputExceededException".into(),
            })
        } else if !shard.fail.is_empty() {
            let code = shard.fail.remove(0);
            Err(ReadError::from(StateError::Sdk {
                service: shardkeeper::state::Service::Kinesis,
                operation: "GetRecords",
                code: Some(code.into()),
                message: format!("{code}: injected"),
            }))
        } else {
            let i: usize = iterator.trim_start_matches("it-").parse().unwrap();
            let end = (i + limit as usize).min(shard.records.len());
            let bytes = shard.records[i..end].iter().map(|r| r.data.len()).sum();
            shard.served.push((std::time::Instant::now(), bytes));
            Ok(RecordsPage {
                records: shard.records[i..end].to_vec(),
                next_iterator: (!shard.closed || end < shard.records.len())
                    .then(|| format!("it-{end}")),
                millis_behind_latest: Some(shard.millis_behind),
            })
        };
        Box::pin(async move { answer })
    }

    fn subscribe<'a>(
        &'a self,
        _consumer_arn: &'a str,
        _shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, Box<dyn Subscription>> {
        let mut shard = self.0.lock().unwrap();
        let answer = if shard
            .open
            .as_ref()
            .is_some_and(|o| o.load(Ordering::SeqCst))
        {
            shard.overlapping += 1;
            Err(ReadError::SubscriptionInUse("still open".into()))
        } else if shard.refuse > 0 {
            shard.refuse -= 1;
            Err(ReadError::SubscriptionInUse("refused".into()))
        } else if shard.fail_subscriptions > 0 {
            shard.fail_subscriptions -= 1;
            Err(ReadError::from(StateError::Sdk {
                service: shardkeeper::state::Service::Kinesis,
                operation: "SubscribeToShard",
                code: None,
                message: "no answer within 10 s".into(),
            }))
        } else {
            let open = Arc::new(AtomicBool::new(true));
            shard.open = Some(open.clone());
            Ok(Box::new(FakeSubscription {
                shard: self.0.clone(),
                next: shard.index(start),
                open,
            }) as Box<dyn Subscription>)
        };
        Box::pin(async move { answer })
    }
}

struct FakeSubscription {
    shard: Arc<Mutex<Shard>>,
    next: usize,
    open: Arc<AtomicBool>,
}

impl Drop for FakeSubscription {
    fn drop(&mut self) {
        self.open.store(false, Ordering::SeqCst);
    }
}

impl Subscription for FakeSubscription {
    fn next_event(&mut self) -> ReadFuture<'_, Option<SubscriptionEvent>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let shard = self.shard.lock().unwrap();
            let end = (self.next + PER_EVENT).min(shard.records.len());
            let batch = shard.records[self.next..end].to_vec();
            self.next = end;
            let at_end = shard.closed && batch.is_empty();
            if at_end && shard.undecodable_end {
                return Err(ReadError::from(StateError::Sdk {
                    service: shardkeeper::state::Service::Kinesis,
                    operation: "SubscribeToShard",
                    code: None,
                    message: "failed to unmarshall SubscribeToShardEvent: continuation_sequence_number was not specified".into(),
                }));
            }
            Ok(Some(SubscriptionEvent {
                continuation: if at_end {
                    String::new()
                } else {
                    shard
                        .records
                        .get(end.saturating_sub(1))
                        .map(|r| r.sequence_number.clone())
                        .unwrap_or_default()
                },
                millis_behind_latest: Some(shard.millis_behind),
                child_shards: if at_end {
                    vec![ShardId::new("shardId-000000000009").unwrap()]
                } else {
                    Vec::new()
                },
                records: batch,
            }))
        })
    }
}

/// The eager configuration, reading with an EFO pool of one when `efo`, and
/// subscriptions renewed every 40 ms.
fn fake_config(efo: bool) -> WorkerConfig {
    eager()
        .enhanced_fan_out(
            efo.then(|| EfoPool::new("fake", 1).poll_interval(Duration::from_millis(20))),
        )
        .subscription_lifetime(Duration::from_millis(40))
}

/// A standalone worker on a real one-shard stream (its shard listing, its
/// checkpoints and EFO pool are the real servers') that reads through `fake`.
async fn reading_through(
    ctx: &Ctx,
    fake: &FakeReads,
    log: Log,
    config: WorkerConfig,
) -> ShardWorker<impl shardkeeper::processing::RecordHandler> {
    let stream = create_stream(&ctx.aws, 1).await;
    let store = ctx.store(&stream);
    let info = ConsumerInfo::for_this_process(ConsumerId::new("solo").unwrap(), store.now());
    let reader = StandaloneSession::new(store.clone(), ctx.aws.kinesis.clone(), info);
    ShardWorker::standalone(
        reader,
        store,
        ctx.aws.kinesis.clone(),
        logging("solo", log),
        config,
    )
    .with_reads(Arc::new(fake.clone()))
}

/// Steps until `done` or 2,000 steps (10 ms apart when nothing was read).
async fn run<H: shardkeeper::processing::RecordHandler>(
    w: &mut ShardWorker<H>,
    done: impl Fn(&ShardWorker<H>) -> bool,
) {
    for _ in 0..2_000 {
        if done(w) {
            return;
        }
        if !w.step().await.unwrap() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_reads_back_off_lose_nothing_and_report_millis_behind_latest() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(4, 5);
        shard.throttle = 2;
        shard.millis_behind = 42_000;
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(false)).await;
    run(&mut w, |w| w.report().shards.processed == 20).await;
    crate::support::consume::check(&log, 4, 5);
    assert_eq!(w.report().shards.throttled, 2, "{:?}", w.report());
    assert_eq!(w.report().millis_behind_latest, Some(42_000));
    let behind = w.millis_behind_latest();
    assert_eq!(behind.values().copied().collect::<Vec<_>>(), vec![42_000]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_read_backs_off_its_shard_and_loses_nothing_but_a_refusal_stops_the_worker() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(4, 5);
        shard.fail = vec!["InternalFailure", "ServiceUnavailable"];
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(false)).await;
    // Every step succeeds (`run` unwraps them) through both failures.
    run(&mut w, |w| w.report().shards.processed == 20).await;
    crate::support::consume::check(&log, 4, 5);
    assert_eq!(w.report().shards.transient_errors, 2, "{:?}", w.report());
    assert_eq!(w.report().shards.throttled, 0);

    // An error that will not pass is the caller's to see.
    fake.0.lock().unwrap().fail = vec!["AccessDeniedException"];
    let mut refused = None;
    for _ in 0..500 {
        match w.step().await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    let e = refused.expect("the refusal came back");
    assert!(!e.is_transient(), "{e}");
    assert!(e.to_string().contains("AccessDeniedException"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_is_retried_and_subscriptions_never_overlap() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(3, 10);
        shard.refuse = 1;
        shard.millis_behind = 7;
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(true)).await;
    run(&mut w, |w| w.report().shards.processed == 30).await;
    crate::support::consume::check(&log, 3, 10);
    let report = w.report().clone();
    assert_eq!(report.shards.subscriptions_refused, 1, "{report:?}");
    assert!(
        report.shards.subscriptions >= 2,
        "subscriptions end after their lifetime and are renewed: {report:?}"
    );
    assert_eq!(
        report.shards.polls, 0,
        "read by subscription only: {report:?}"
    );
    assert_eq!(fake.0.lock().unwrap().overlapping, 0);
    assert_eq!(report.millis_behind_latest, Some(7));
}

/// A subscription that fails transiently (an internal error, or no answer
/// in time) backs its shard off and subscribes again, as a failed poll
/// does; the worker's step goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_that_fails_transiently_is_made_again_without_failing_the_worker() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(3, 10);
        shard.fail_subscriptions = 2;
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(true)).await;
    run(&mut w, |w| w.report().shards.processed == 30).await;
    crate::support::consume::check(&log, 3, 10);
    assert_eq!(fake.0.lock().unwrap().fail_subscriptions, 0);
    assert_eq!(w.report().shards.polls, 0, "{:?}", w.report());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_end_the_subscription_cannot_decode_is_found_by_one_poll() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(2, 4);
        shard.closed = true;
        shard.undecodable_end = true;
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(true)).await;
    run(&mut w, |w| w.report().shards_completed == 1).await;
    crate::support::consume::check(&log, 2, 4);
    let report = w.report();
    assert_eq!(report.shards_completed, 1, "{report:?}");
    assert!(report.shards.polls >= 1, "{report:?}");
    assert!(w.shards().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_shard_read_by_subscription_completes_at_its_end() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    {
        let mut shard = fake.0.lock().unwrap();
        shard.records = records(2, 4);
        shard.closed = true;
    }
    let log: Log = Arc::default();
    let mut w = reading_through(&ctx, &fake, log.clone(), fake_config(true)).await;
    run(&mut w, |w| w.report().shards_completed == 1).await;
    crate::support::consume::check(&log, 2, 4);
    assert_eq!(w.report().shards_completed, 1, "{:?}", w.report());
    assert_eq!(w.report().shards.polls, 0, "{:?}", w.report());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_is_paced_to_the_shard_read_rate() {
    let ctx = ctx().await;
    let fake = FakeReads::default();
    fake.0.lock().unwrap().records = records(4, 3);
    let log: Log = Arc::default();
    // 4 one-byte records per GetRecords at 16 bytes/s: 250 ms apart at least.
    let config = fake_config(false).max_records(4).read_bytes_per_second(16);
    let mut w = reading_through(&ctx, &fake, log.clone(), config).await;
    run(&mut w, |w| w.report().shards.processed == 12).await;
    crate::support::consume::check(&log, 4, 3);
    let served = fake.0.lock().unwrap().served.clone();
    assert!(served.len() >= 3, "{served:?}");
    for pair in served.windows(2) {
        let ((at, bytes), (next, _)) = (pair[0], pair[1]);
        let least = Duration::from_secs_f64(bytes as f64 / 16.0);
        assert!(
            next - at >= least,
            "{bytes} bytes at 16 B/s, yet the next read came after {:?}",
            next - at
        );
    }
}
