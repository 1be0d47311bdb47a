//! The heartbeat-reaper: plan and apply the clean-up; one tick at a time.

use super::ticker::{run_ticks, InvocationSummary};
use crate::config::TickTiming;
use crate::group::{execute, ExecutionReport};
use crate::group::{missed_its_heartbeat, plan_reap, ReapConfig, Sightings};

/// How often the reaper reads the group's shards when no consumer is to be
/// reaped: how long a removal past retention may wait.
const SHARDS_EVERY: Duration = Duration::from_secs(60);
use crate::group::{Action, ActionKind};
use crate::metrics::{emit_for, Metric};
use crate::state::{GroupPart, StateStore};
use crate::Result;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;
use std::time::Duration;

/// The reaper of one group on one stream.
#[derive(Debug, Clone)]
pub struct Reaper {
    /// The group's state.
    pub store: StateStore,
    /// Kinesis, to deregister idle EFO consumers ([`Reaper::new`] makes it
    /// the library's own client of the one given: see
    /// [`own_kinesis_client`](crate::state::own_kinesis_client)).
    pub kinesis: aws_sdk_kinesis::Client,
    /// Planner settings.
    pub config: ReapConfig,
    /// Write CloudWatch EMF metrics to standard output after each tick.
    pub emit_metrics: bool,
    /// What the reaper has seen of heartbeats and EFO consumers (kept across ticks and invocations).
    pub sightings: Sightings,
}

/// What one reaper tick did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReapTick {
    /// What was applied.
    pub execution: ExecutionReport,
}

impl Reaper {
    /// A reaper of `store`'s group with `config`: no metrics written,
    /// nothing seen yet.
    pub fn new(store: StateStore, kinesis: aws_sdk_kinesis::Client, config: ReapConfig) -> Self {
        let kinesis = crate::state::own_kinesis_client(&kinesis, &store.config().timeouts);
        Reaper {
            store,
            kinesis,
            config,
            emit_metrics: false,
            sightings: Sightings::default(),
        }
    }

    /// One tick: read the group, plan the clean-up, apply it. A plan that
    /// removes state past retention is made again with the stream's own
    /// retention when that is longer than the configured one (read then,
    /// one DescribeStreamSummary): a closed shard's state outlives its
    /// records, so discovery never finds a listed shard without state. A
    /// stream that is gone keeps the configured retention; one whose
    /// retention cannot be read now has its removals wait a tick.
    pub async fn tick(&self) -> Result<ReapTick> {
        // The consumers every tick; the shards only to free a dead
        // consumer's leases, and every `SHARDS_EVERY` for the removals
        // past retention.
        let home = self.store.observe_group(GroupPart::Home).await?;
        let at = self.store.monotonic_now();
        let ages = self.sightings.observe_home(&home, at);
        super::ticker::note_older_code(&self.store, &ages).await;
        let dead = home
            .consumers
            .iter()
            .any(|c| missed_its_heartbeat(c.id(), &ages, &self.config));
        let due = self
            .sightings
            .shards_seen_at()
            .is_none_or(|t| at - t >= crate::state::duration_millis(SHARDS_EVERY));
        let (snapshot, ages) = if dead || due {
            let snapshot = self.store.observe_group(GroupPart::Group).await?;
            let ages = self
                .sightings
                .observe(&snapshot, self.store.monotonic_now());
            (snapshot, ages)
        } else {
            (home, ages)
        };
        let now = self.store.now();
        let mut actions = plan_reap(&snapshot, &ages, now, &self.config);
        let past_retention = |a: &Action| {
            matches!(
                a,
                Action::RemoveShard { .. } | Action::RemoveScopedShard { .. }
            )
        };
        if actions.iter().any(past_retention) {
            let config = &self.store.config();
            match crate::state::kinesis_stream_summary(&self.kinesis, &config.stream, &config.retry)
                .await
            {
                Ok(stream) if stream.retention > self.config.retention => {
                    let config = self.config.clone().retention(stream.retention);
                    actions = plan_reap(&snapshot, &ages, now, &config);
                }
                Ok(_) => {}
                // The stream is gone: nothing lists its shards again.
                Err(crate::state::StateError::NotFound { .. }) => {}
                // Not known now: the removals wait for a tick that knows,
                // the rest of the clean-up goes on.
                Err(e) => {
                    tracing::warn!(error = %e, "the stream's retention is not known: removals past retention wait");
                    actions.retain(|a| !past_retention(a));
                }
            }
        }
        let execution = execute(&self.store, Some(&self.kinesis), &actions, Duration::ZERO).await?;
        let tick = ReapTick { execution };
        if self.emit_metrics {
            tick.emit_metrics(&self.store);
        }
        Ok(tick)
    }
}

impl ReapTick {
    fn emit_metrics(&self, store: &StateStore) {
        let e = &self.execution;
        emit_for(
            store,
            &[
                Metric::count(
                    "ReapedConsumers",
                    e.applied(ActionKind::ReapConsumer) as f64,
                ),
                Metric::count("LeasesReleased", e.leases_released as f64),
                Metric::count(
                    "EfoReleased",
                    (e.efo_released + e.applied(ActionKind::ReleaseEfo)) as f64,
                ),
                Metric::count("EfoDeregistered", e.efo_deregistered.len() as f64),
                Metric::count("ShardsRemoved", e.applied(ActionKind::RemoveShard) as f64),
                Metric::count("LostConditions", e.lost_total() as f64),
                Metric::count("ColdStart", crate::metrics::cold_start()),
            ],
        );
    }
}

/// The heartbeat-reaper's Lambda handler: ticks until the deadline.
pub async fn handle_reap(
    reaper: &Reaper,
    timing: TickTiming,
    event: LambdaEvent<EventBridgeEvent>,
) -> crate::Result<InvocationSummary<ReapTick>> {
    tracing::debug!(source = %event.payload.source, "scheduled invocation");
    let run = run_ticks(event.context.deadline(), timing, || reaper.tick()).await;
    InvocationSummary::from_loop(run)
}
