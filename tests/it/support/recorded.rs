//! Recorded runs: workers that record a history for the checker, the
//! records a numbered load wrote, and the part of a history from an instant
//! on, as the checker judges it.

use crate::support::common::{list_shards, rebalancer, start_group, Ctx};
use crate::support::consume::worker_running;
use shardkeeper::consumer::{ShardWorker, WorkerConfig, WorkerEvent};
use shardkeeper::functions::Rebalancer;
use shardkeeper::processing::{RecordHandler, StreamRecord};
use shardkeeper::state::{ShardId, ShardSpec, StateStore};
use shardkeeper_history::{
    recording_handler, recording_observer, History, Produced, SharedHistory,
};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A record of a numbered load: its key and its number.
pub type Key = (String, u64);

/// A started group on a stream with its rebalancer and two recording
/// workers, and the history they record.
pub struct Recorded<H> {
    pub store: StateStore,
    pub rebalancer: Rebalancer,
    pub history: SharedHistory,
    pub workers: Vec<ShardWorker<H>>,
}

/// A new group on `stream`, started as every function starts it, with two
/// recording workers configured by `config`.
pub async fn recorded(
    ctx: &Ctx,
    stream: &str,
    config: WorkerConfig,
) -> Recorded<impl RecordHandler> {
    let store = ctx.store(stream);
    start_group(ctx, &store).await;
    recorded_on(ctx, store, config)
}

/// [`recorded`] on a store of the test's making.
pub fn recorded_on(
    ctx: &Ctx,
    store: StateStore,
    config: WorkerConfig,
) -> Recorded<impl RecordHandler> {
    let history = SharedHistory::default();
    Recorded {
        rebalancer: rebalancer(&ctx.aws, &store),
        workers: workers(ctx, &store, &history, config),
        history,
        store,
    }
}

impl<H: RecordHandler> Recorded<H> {
    /// Ticks and steps until every record of `want` was processed since
    /// `since` (see [`run_until`]).
    pub async fn run_until(&mut self, ctx: &Ctx, since: Instant, want: &BTreeSet<Key>) {
        run_until(
            ctx,
            &self.rebalancer,
            &mut self.workers,
            &self.history,
            since,
            want,
        )
        .await;
    }

    /// The records processed since `since`, in processing order.
    pub fn processed_since(&self, since: Instant) -> Vec<Key> {
        processed_since(&self.history, since)
    }

    /// The history from `from` on, `produced` the records promised in it.
    pub fn since(&self, from: Instant, produced: &BTreeSet<Key>) -> History {
        since(&self.history, from, produced)
    }
}

/// Two recording workers.
pub fn workers(
    ctx: &Ctx,
    store: &StateStore,
    history: &SharedHistory,
    config: WorkerConfig,
) -> Vec<ShardWorker<impl RecordHandler>> {
    (0..2)
        .map(|i| {
            let name = format!("w{i}");
            let handler = recording_handler(history, &name, |_: StreamRecord| async {
                Ok::<(), std::io::Error>(())
            });
            worker_running(
                store,
                &ctx.aws.kinesis,
                &name,
                handler,
                Duration::from_secs(10),
                config.clone(),
            )
            .with_observer(recording_observer(history, &name))
        })
        .collect()
}

/// The records of keys `k0`..`k{keys}` numbered `per_key`.
pub fn records(keys: u32, per_key: std::ops::Range<u32>) -> BTreeSet<Key> {
    per_key
        .flat_map(|n| (0..keys).map(move |k| (format!("k{k}"), u64::from(n))))
        .collect()
}

/// The records processed since `since`, in processing order.
pub fn processed_since(history: &SharedHistory, since: Instant) -> Vec<Key> {
    history
        .lock()
        .unwrap()
        .processed
        .iter()
        .filter(|p| p.at >= since)
        .map(|p| (p.key.clone(), p.n))
        .collect()
}

/// Rebalancer ticks and worker steps (a second apart on the test's clock)
/// until every record of `want` was processed since `since` (bounded).
pub async fn run_until<H: RecordHandler>(
    ctx: &Ctx,
    rebalancer: &Rebalancer,
    workers: &mut [ShardWorker<H>],
    history: &SharedHistory,
    since: Instant,
    want: &BTreeSet<Key>,
) {
    for _ in 0..120 {
        rebalancer.tick().await.unwrap();
        for w in workers.iter_mut() {
            w.step().await.unwrap();
        }
        ctx.clock.advance(Duration::from_secs(1));
        let seen: BTreeSet<Key> = processed_since(history, since).into_iter().collect();
        if want.is_subset(&seen) {
            return;
        }
    }
}

/// The part of the history from `since` on, with `produced` as the records
/// promised in it: what the checker judges.
pub fn since(history: &SharedHistory, from: Instant, produced: &BTreeSet<Key>) -> History {
    let h = history.lock().unwrap();
    History {
        produced: produced
            .iter()
            .map(|(key, n)| Produced {
                key: key.clone(),
                n: *n,
            })
            .collect(),
        processed: h
            .processed
            .iter()
            .filter(|p| p.at >= from)
            .cloned()
            .collect(),
        spans: h
            .spans
            .iter()
            .filter(|s| s.start >= from)
            .cloned()
            .collect(),
        events: h
            .events
            .iter()
            .filter(|(_, e)| {
                let at = match e {
                    WorkerEvent::Gained { at, .. }
                    | WorkerEvent::Processing { at, .. }
                    | WorkerEvent::Stopped { at, .. } => *at,
                    WorkerEvent::Checkpointed { sent, .. } => *sent,
                };
                at >= from
            })
            .cloned()
            .collect(),
        killed: vec![],
        parents: Default::default(),
        moved_back: Vec::new(),
    }
}

pub async fn parents(ctx: &Ctx, stream: &str) -> BTreeMap<ShardId, Vec<ShardId>> {
    list_shards(&ctx.aws, stream)
        .await
        .iter()
        .map(|s| {
            let spec = ShardSpec::from_kinesis(s).unwrap();
            (spec.shard_id, spec.parents)
        })
        .collect()
}

pub fn millis_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}
