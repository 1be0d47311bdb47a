//! Event-source-mapped processing driven as Lambda drives it (the emulator
//! in `support::lambda_esm`): random schedules of batch sizes,
//! parallelization factors 1 to 10, bisection, invocations killed part-way
//! and poison records, each checked against the contract; and the scope of
//! ESM checkpoints (apart from leases, per stream).

use crate::support::common::{create_stream, ctx, stream_arn, Ctx};
use crate::support::esm::{kinesis_event, read_shard};
use crate::support::lambda_esm::{self, Completions, EsmConfig, EsmRecord};
use aws_sdk_kinesis::primitives::Blob;
use serde::Deserialize;
use shardkeeper::processing::{json, Parking, ProcessingOptions, RecordHandler, StreamRecord};
use shardkeeper::state::{Checkpoint, ConsumerId, ShardId, ShardScope, ShardSpec};
use shardkeeper::KinesisProcessor;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Deserialize)]
struct Message {
    n: u32,
    poison: bool,
}

/// A stream of one shard holding `count` records over `keys` partition
/// keys; every `poison_every`-th record (if any) always fails.
async fn records(
    ctx: &Ctx,
    count: u32,
    keys: u32,
    poison_every: Option<u32>,
) -> (String, String, Vec<EsmRecord>) {
    let stream = create_stream(&ctx.aws, 1).await;
    let arn = stream_arn(&ctx.aws, &stream).await;
    let mut shard = String::new();
    for n in 0..count {
        let poison = poison_every.is_some_and(|p| n % p == p - 1);
        let out = ctx
            .aws
            .kinesis
            .put_record()
            .stream_name(&stream)
            .partition_key(format!("k{}", n % keys))
            .data(Blob::new(format!("{{\"n\":{n},\"poison\":{poison}}}")))
            .send()
            .await
            .unwrap();
        shard = out.shard_id().to_owned();
    }
    let records = read_shard(ctx, &stream, &shard)
        .await
        .into_iter()
        .map(|r| EsmRecord {
            sequence: r.sequence_number().to_owned(),
            key: r.partition_key().unwrap_or_default().to_owned(),
            record: r,
        })
        .collect();
    (arn, shard, records)
}

/// A handler that may be killed before each record (as the emulator says),
/// fails poison records, and notes every completion.
fn handler(completions: Completions) -> impl RecordHandler {
    json(move |message: Message, record: StreamRecord| {
        let completions = completions.clone();
        async move {
            lambda_esm::kill_point().await;
            tokio::task::yield_now().await;
            if message.poison {
                return Err(format!("poison record {}", message.n));
            }
            completions.lock().unwrap().push((
                record.partition_key.to_string(),
                record.sequence_number.to_string(),
            ));
            Ok(())
        }
    })
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The property run: every schedule keeps the contract. The default is a
/// short run for CI; `SHARDKEEPER_ESM_SCHEDULES` (and `SHARDKEEPER_ESM_SEED`,
/// the first seed) set a longer one (docs/RELIABILITY.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_lambda_schedule_skips_a_record_or_breaks_key_order() {
    let ctx = ctx().await;
    let (arn, shard, records) = records(&ctx, 48, 6, Some(13)).await;
    let first = env_u64("SHARDKEEPER_ESM_SEED", 1);
    let schedules = env_u64("SHARDKEEPER_ESM_SCHEDULES", 10);
    for seed in first..first + schedules {
        let mut rng = fastrand::Rng::with_seed(seed);
        let config = EsmConfig {
            batch_size: rng.usize(1..=10),
            parallelization: rng.usize(1..=10),
            bisect: rng.bool(),
            max_retries: 20,
            kill_chance: 0.3,
            seed,
        };
        let options = ProcessingOptions {
            max_attempts: 2,
            parking: Parking::StateTable {
                ttl: Duration::from_secs(3600),
            },
            checkpoint_records: rng.bool().then(|| rng.u64(1..=4)),
            ..ProcessingOptions::default()
        };
        let completions: Completions = Arc::default();
        let store = ctx.store("esm-schedules");
        let processor = KinesisProcessor::new(handler(completions.clone()))
            .with_store(store.clone())
            .with_options(options.clone());
        let run = lambda_esm::run(&processor, &arn, &shard, &records, &config).await;
        let parked: BTreeSet<String> = store
            .list_parked()
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.key.sequence.to_string())
            .collect();
        let problems = lambda_esm::check(&records, &completions.lock().unwrap(), &parked, &run);
        assert!(
            problems.is_empty(),
            "seed {seed}: {config:?}, {:?} checkpoint records: {problems:#?}",
            options.checkpoint_records
        );
        assert_eq!(
            parked.len(),
            3,
            "seed {seed}: the poison records are parked"
        );
    }
}

/// With a parallelization factor above 1, a batch of one lane completes
/// while an earlier record of another lane is still failing: the failing
/// record is retried and completed, never skipped. (A per-shard checkpoint
/// skips it: the later batch's progress covers its sequence number.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_lane_is_never_skipped_at_parallelization_above_one() {
    let ctx = ctx().await;
    let (arn, shard, records) = records(&ctx, 12, 4, None).await;
    let completions: Completions = Arc::default();
    let fail_once: Arc<Mutex<BTreeSet<String>>> =
        Arc::new(Mutex::new([records[0].sequence.clone()].into()));
    let handler = {
        let completions = completions.clone();
        json(move |_: Message, record: StreamRecord| {
            let (completions, fail_once) = (completions.clone(), fail_once.clone());
            async move {
                if fail_once.lock().unwrap().remove(&*record.sequence_number) {
                    return Err("not yet".to_owned());
                }
                completions.lock().unwrap().push((
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                ));
                Ok(())
            }
        })
    };
    let store = ctx.store("esm-lanes");
    let processor = KinesisProcessor::new(handler).with_store(store);
    let config = EsmConfig {
        batch_size: 3,
        parallelization: 4,
        bisect: false,
        max_retries: 5,
        kill_chance: 0.0,
        seed: 7,
    };
    let run = lambda_esm::run(&processor, &arn, &shard, &records, &config).await;
    let problems = lambda_esm::check(
        &records,
        &completions.lock().unwrap(),
        &BTreeSet::new(),
        &run,
    );
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        completions
            .lock()
            .unwrap()
            .iter()
            .any(|(_, seq)| *seq == records[0].sequence),
        "the record that failed first is completed"
    );
}

/// ESM checkpoints live in their own sort-key family: a shard worker's lease
/// and checkpoint on the same group and stream neither hide records from
/// the processor nor are touched by it, and the shard stays leasable.
#[tokio::test]
async fn esm_checkpoints_never_read_or_write_a_lease() {
    let ctx = ctx().await;
    let (arn, shard, records) = records(&ctx, 6, 2, None).await;
    let store = ctx.store("esm-and-leases");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone())).with_store(store.clone());
    let raw: Vec<_> = records.iter().map(|r| r.record.clone()).collect();
    processor
        .process(&kinesis_event(&arn, &shard, &raw[..2]).to_string(), None)
        .await
        .unwrap();

    // A consumer of the same group leases the shard and checkpoints far ahead.
    let id = ShardId::new(&shard).unwrap();
    store
        .ensure_shard(&ShardScope::Group, &ShardSpec::new(&shard).unwrap())
        .await
        .unwrap();
    let me = ConsumerId::new("worker").unwrap();
    let lease = store
        .acquire_lease(&id, &me, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the shard is leasable");
    store
        .checkpoint(
            &lease,
            &Checkpoint::after(&records[5].sequence).unwrap(),
            None,
        )
        .await
        .unwrap();

    // The mapping's next batch is handled whole.
    let report = processor
        .process(&kinesis_event(&arn, &shard, &raw[2..]).to_string(), None)
        .await
        .unwrap();
    assert_eq!((report.processed, report.duplicates_skipped), (4, 0));
    let state = store.get_shard(&ShardScope::Group, &id).await.unwrap();
    assert_eq!(state.owner, Some(me));
    assert_eq!(state.checkpoint.unwrap().to_string(), records[5].sequence);
    assert_eq!(completions.lock().unwrap().len(), 6);
}

/// One function mapped to two streams: the same shard id and sequence
/// numbers under another stream ARN are other records.
#[tokio::test]
async fn two_streams_never_share_checkpoints() {
    let ctx = ctx().await;
    let (arn, shard, records) = records(&ctx, 4, 2, None).await;
    let store = ctx.store("esm-two-streams");
    let completions: Completions = Arc::default();
    let processor = KinesisProcessor::new(handler(completions.clone())).with_store(store);
    let raw: Vec<_> = records.iter().map(|r| r.record.clone()).collect();
    let other = format!("{arn}-other");
    for stream in [&arn, &other] {
        let report = processor
            .process(&kinesis_event(stream, &shard, &raw).to_string(), None)
            .await
            .unwrap();
        assert_eq!(
            (report.processed, report.duplicates_skipped),
            (4, 0),
            "{stream}"
        );
    }
    // A retry of the first stream's batch is still de-duplicated.
    let report = processor
        .process(&kinesis_event(&arn, &shard, &raw).to_string(), None)
        .await
        .unwrap();
    assert_eq!((report.processed, report.duplicates_skipped), (0, 4));
}

/// Progress is committed during the batch: an invocation killed part-way
/// (Lambda's timeout) leaves what it completed checkpointed, and the retry
/// of the same batch repeats at most the work since the last checkpoint
/// (here, with a checkpoint after every record, nothing).
#[tokio::test]
async fn a_killed_invocation_keeps_what_it_checkpointed() {
    let ctx = ctx().await;
    let (arn, shard, records) = records(&ctx, 8, 2, None).await;
    let raw: Vec<_> = records.iter().map(|r| r.record.clone()).collect();
    let event = kinesis_event(&arn, &shard, &raw).to_string();
    let completions: Completions = Arc::default();
    let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let killed = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (completions, calls, killed) = (completions.clone(), calls.clone(), killed.clone());
        json(move |_: Message, record: StreamRecord| {
            let (completions, calls, killed) = (completions.clone(), calls.clone(), killed.clone());
            async move {
                // The first invocation dies as it starts its sixth record.
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 5 {
                    killed.notify_one();
                    std::future::pending::<()>().await;
                }
                completions.lock().unwrap().push((
                    record.partition_key.to_string(),
                    record.sequence_number.to_string(),
                ));
                Ok::<(), std::io::Error>(())
            }
        })
    };
    let options = ProcessingOptions {
        checkpoint_records: Some(1),
        ..ProcessingOptions::default()
    };
    let processor = KinesisProcessor::new(handler)
        .with_store(ctx.store("esm-killed"))
        .with_options(options);
    tokio::select! {
        _ = processor.process(&event, None) => panic!("the invocation was to be killed"),
        _ = killed.notified() => {}
    }
    // Lambda retries the whole batch.
    let report = processor.process(&event, None).await.unwrap();
    assert_eq!((report.duplicates_skipped, report.processed), (5, 3));
    let seen: Vec<String> = completions
        .lock()
        .unwrap()
        .iter()
        .map(|(_, s)| s.clone())
        .collect();
    let all: Vec<String> = records.iter().map(|r| r.sequence.clone()).collect();
    assert_eq!(seen, all, "each record once, in order");
}
