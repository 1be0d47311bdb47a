//! The shard-worker function: each invocation is one consumer instance
//! that reads the shards it is given until its deadline. Its heartbeats say
//! when it ends, so the rebalancer starts its replacement in time; some
//! time before the end it drains (its leases handed to the workers that
//! stay, at its heartbeats), and what is left at the end is released.

use crate::consumer::ConsumerSession;
use crate::consumer::{Observer, ShardWorker, WorkerConfig, WorkerReport};
use crate::metrics::{Metric, MetricValue};
use crate::processing::RecordHandler;
use crate::state::instant_now;
use crate::state::{ConsumerId, ConsumerInfo, StateStore};
use lambda_runtime::LambdaEvent;
use std::time::{Duration, SystemTime};

/// What the shard-worker function needs for every invocation: made by
/// [`WorkerFunction::from_env`], or by [`WorkerFunction::new`] and its
/// setters.
#[non_exhaustive]
pub struct WorkerFunction<F> {
    /// The group's state.
    pub store: StateStore,
    /// Kinesis.
    pub kinesis: aws_sdk_kinesis::Client,
    /// Lease term of the session.
    pub lease_term: Duration,
    /// Reading settings.
    pub config: WorkerConfig,
    /// Time kept free before the deadline.
    pub margin: Duration,
    /// How long before its end (the deadline less the margin) the consumer
    /// starts handing its leases to the workers that stay (see
    /// [`ShardWorker::drain_at`]).
    pub drain: Duration,
    /// Makes the record handler of one invocation.
    pub handler: F,
    /// Write the invocation's report as CloudWatch metrics (EMF) at its end.
    pub emit_metrics: bool,
    /// Receives every invocation's lease and checkpoint events (see
    /// [`ShardWorker::with_observer`]).
    pub observer: Option<Observer>,
}

impl<F> WorkerFunction<F> {
    /// A shard-worker function of the group of `store`, reading with
    /// `kinesis`, whose `handler` makes the record handler of each
    /// invocation; the scheduled functions' defaults for the rest (a lease
    /// term of 10 s, 2 s kept free before the deadline, a drain of 15 s,
    /// metrics written, no observer, the default [`WorkerConfig`]).
    pub fn new(store: StateStore, kinesis: aws_sdk_kinesis::Client, handler: F) -> Self {
        WorkerFunction {
            store,
            kinesis,
            lease_term: Duration::from_secs(10),
            config: WorkerConfig::default(),
            margin: Duration::from_secs(2),
            drain: Duration::from_secs(15),
            handler,
            emit_metrics: true,
            observer: None,
        }
    }

    /// Sets [`WorkerFunction::lease_term`](Self::lease_term).
    pub fn lease_term(mut self, lease_term: Duration) -> Self {
        self.lease_term = lease_term;
        self
    }

    /// Sets [`WorkerFunction::config`](Self::config).
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets [`WorkerFunction::margin`](Self::margin).
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Sets [`WorkerFunction::drain`](Self::drain).
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// Sets [`WorkerFunction::emit_metrics`](Self::emit_metrics).
    pub fn emit_metrics(mut self, emit_metrics: bool) -> Self {
        self.emit_metrics = emit_metrics;
        self
    }

    /// Sets [`WorkerFunction::observer`](Self::observer).
    pub fn observer(mut self, observer: Option<Observer>) -> Self {
        self.observer = observer;
        self
    }
}

/// How long a local emulator's invocation runs when its deadline has
/// already passed at the start (Lambda never sends one; `cargo lambda`'s
/// emulator sends ten minutes after 1970).
pub(crate) const LOCAL_RUN: Duration = Duration::from_secs(30);

/// How long an invocation with `deadline` runs from `now`: up to the
/// deadline less `margin`, or, with the deadline already past (a local
/// emulator's), [`LOCAL_RUN`], with a warning.
pub(crate) fn run_window(deadline: SystemTime, now: SystemTime, margin: Duration) -> Duration {
    match deadline.duration_since(now) {
        Ok(left) if !left.is_zero() => left.saturating_sub(margin),
        _ => {
            tracing::warn!(
                seconds = LOCAL_RUN.as_secs(),
                "the invocation's deadline lies in the past at its start (a local emulator?): running for a fixed window"
            );
            LOCAL_RUN
        }
    }
}

/// The consumer id of one invocation: the request id (letters, digits, `-`).
pub fn invocation_consumer_id(request_id: &str) -> crate::Result<ConsumerId> {
    let cleaned: String = request_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    Ok(ConsumerId::new(format!("worker-{cleaned}"))?)
}

impl<F, H> WorkerFunction<F>
where
    F: Fn() -> H,
    H: RecordHandler,
{
    /// The Lambda handler: one consumer instance until the deadline minus
    /// the margin, draining for the last [`WorkerFunction::drain`] of it.
    /// The payload is not read (a schedule's event, or the rebalancer's
    /// empty one).
    pub async fn handle(
        &self,
        event: LambdaEvent<serde_json::Value>,
    ) -> crate::Result<WorkerReport> {
        let id = invocation_consumer_id(&event.context.request_id)?;
        let left = run_window(event.context.deadline(), SystemTime::now(), self.margin);
        let mut info = ConsumerInfo::for_this_process(id, self.store.now());
        info.ends = Some(self.store.now() + crate::state::duration_millis(left));
        let session = ConsumerSession::new(self.store.clone(), info, self.lease_term);
        let started = instant_now();
        let mut worker = ShardWorker::new(
            session,
            self.store.clone(),
            self.kinesis.clone(),
            (self.handler)(),
            self.config.clone(),
        )
        .drain_at(started + left.saturating_sub(self.drain));
        if let Some(observer) = &self.observer {
            worker = worker.with_observer(observer.clone());
        }
        // Boxed: the worker's run is a large future, and each layer around
        // it would otherwise copy it onto the stack of whoever awaits this;
        // and a trait object, so that a crate spawning this handler's future
        // checks it is `Send` without going down the whole run (past its
        // default `recursion_limit`).
        let run: std::pin::Pin<
            Box<dyn std::future::Future<Output = crate::Result<&WorkerReport>> + Send + '_>,
        > = Box::pin(
            crate::processing::RecordContext::of(&event.context)
                .scope(worker.run_until(Some(started + left), || false)),
        );
        let (report, handler_metrics) = crate::processing::handler_metrics::collecting(run).await;
        let report = report?.clone();
        tracing::info!(
            request_id = %event.context.request_id,
            processed = report.shards.processed,
            checkpoints = report.shards.checkpoints,
            leases_lost = report.leases_lost,
            transient_errors = report.shards.transient_errors,
            millis_behind_latest = report.millis_behind_latest,
            "invocation done"
        );
        if self.emit_metrics {
            let mut metrics = worker_metrics(&report);
            metrics.push(Metric::count("ColdStart", crate::metrics::cold_start()));
            metrics.extend(handler_metrics);
            crate::metrics::emit_for(&self.store, &metrics);
        }
        Ok(report)
    }
}

/// The metrics of one worker invocation (dimensions `Group` and `Stream`):
/// its counters, and how far behind the stream's tip its furthest shard was.
pub fn worker_metrics(report: &WorkerReport) -> Vec<Metric> {
    let mut metrics = vec![
        Metric::count("RecordsProcessed", report.shards.processed as f64),
        Metric::count("DuplicatesSkipped", report.shards.duplicates_skipped as f64),
        Metric::count("RecordsParked", report.shards.parked as f64),
        Metric::count("Checkpoints", report.shards.checkpoints as f64),
        Metric::count("ShardsCompleted", report.shards_completed as f64),
        Metric::count("LeasesLost", report.leases_lost as f64),
        Metric::count("LeasesHandedOff", report.handed_off as f64),
        Metric::count("LeasesHeldAtStop", report.held_at_stop as f64),
        Metric::count("Polls", report.shards.polls as f64),
        Metric::count("Subscriptions", report.shards.subscriptions as f64),
        Metric::count("ReadsThrottled", report.shards.throttled as f64),
        Metric::count("TransientErrors", report.shards.transient_errors as f64),
        Metric::of(
            "BytesProcessed",
            report.shards.bytes_processed as f64,
            "Bytes",
        ),
    ];
    if !report.shards.handler_durations.is_empty() {
        metrics.push(Metric {
            name: "HandlerDuration".into(),
            value: MetricValue::Many(report.shards.handler_durations.values()),
            unit: "Milliseconds",
        });
    }
    if report.group_finished {
        metrics.push(Metric::count("BoundedGroupFinished", 1.0));
    }
    if let Some(behind) = report.millis_behind_latest {
        metrics.push(Metric::of(
            "MillisBehindLatest",
            behind as f64,
            "Milliseconds",
        ));
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_past_at_the_start_runs_the_local_window() {
        let now = SystemTime::now();
        let margin = Duration::from_secs(5);
        assert_eq!(
            run_window(now + Duration::from_secs(65), now, margin),
            Duration::from_secs(60)
        );
        assert_eq!(
            run_window(now - Duration::from_secs(1), now, margin),
            LOCAL_RUN
        );
        // cargo lambda's emulator: ten minutes after 1970.
        let emulator = SystemTime::UNIX_EPOCH + Duration::from_secs(600);
        assert_eq!(run_window(emulator, now, margin), LOCAL_RUN);
        // Less than the margin left: nothing to run.
        assert_eq!(
            run_window(now + Duration::from_secs(2), now, margin),
            Duration::ZERO
        );
    }

    #[test]
    fn a_report_becomes_its_metrics() {
        let mut report = WorkerReport {
            leases_lost: 1,
            millis_behind_latest: Some(1_500),
            ..WorkerReport::default()
        };
        report.shards.processed = 10;
        report.shards.checkpoints = 3;
        report.shards.transient_errors = 2;
        report.shards.throttled = 4;
        let metrics = worker_metrics(&report);
        let value = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.value.one())
        };
        assert_eq!(value("RecordsProcessed"), Some(10.0));
        assert_eq!(value("Checkpoints"), Some(3.0));
        assert_eq!(value("LeasesLost"), Some(1.0));
        assert_eq!(value("TransientErrors"), Some(2.0));
        assert_eq!(value("ReadsThrottled"), Some(4.0));
        assert_eq!(value("MillisBehindLatest"), Some(1_500.0));
        let idle = worker_metrics(&WorkerReport::default());
        assert!(idle.iter().all(|m| m.name != "MillisBehindLatest"));
    }
}
