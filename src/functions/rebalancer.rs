//! The lease-rebalancer: discover shards, plan, apply; one tick at a time.

use super::fleet::{Fleet, FleetTick};
use super::ticker::{run_ticks, InvocationSummary};
use crate::config::TickTiming;
use crate::discovery::{discover_shards, DiscoveryReport};
use crate::group::ActionKind;
use crate::group::{execute, ExecutionReport};
use crate::group::{held_by, live_consumers, plan_rebalance, RebalanceConfig, Sightings};
use crate::metrics::{emit_for, Metric};
use crate::state::{GroupPart, StateStore};
use crate::Result;
use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use lambda_runtime::LambdaEvent;
use std::collections::BTreeMap;

/// The rebalancer of one group on one stream.
#[derive(Debug, Clone)]
pub struct Rebalancer {
    /// The group's state.
    pub store: StateStore,
    /// Kinesis, for shard discovery ([`Rebalancer::new`] makes it the
    /// library's own client of the one given: see
    /// [`own_kinesis_client`](crate::state::own_kinesis_client)).
    pub kinesis: aws_sdk_kinesis::Client,
    /// Planner settings.
    pub config: RebalanceConfig,
    /// Write CloudWatch EMF metrics to standard output after each tick.
    pub emit_metrics: bool,
    /// What the rebalancer has seen of leases, heartbeats and claims (kept
    /// across ticks and invocations).
    pub sightings: Sightings,
    /// The fleet of shard workers it keeps running, if it keeps one.
    pub fleet: Option<Fleet>,
}

/// What one rebalancer tick saw and did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RebalanceTick {
    /// Shard discovery.
    pub discovery: DiscoveryReport,
    /// Live consumers at the start of the tick.
    pub live_consumers: usize,
    /// Leasable shards.
    pub available_shards: usize,
    /// Leasable shards with no live lease at the start of the tick.
    pub unowned_shards: usize,
    /// Leases per live consumer at the start of the tick.
    pub leases_per_consumer: BTreeMap<String, usize>,
    /// What was applied.
    pub execution: ExecutionReport,
    /// Actions the planner produced.
    pub actions_planned: usize,
    /// The fleet of shard workers, when the rebalancer keeps one (and,
    /// for a bounded group, until it is finished).
    pub fleet: Option<FleetTick>,
    /// A bounded group's (a backfill's) shards not read to their end yet;
    /// `None` for a group that is not bounded. At 0 the group is finished:
    /// the fleet starts no more workers.
    pub bounded_shards_left: Option<usize>,
}

impl Rebalancer {
    /// A rebalancer of `store`'s group with `config`: no metrics written,
    /// nothing seen yet, no fleet kept.
    pub fn new(
        store: StateStore,
        kinesis: aws_sdk_kinesis::Client,
        config: RebalanceConfig,
    ) -> Self {
        let kinesis = crate::state::own_kinesis_client(&kinesis, &store.config().timeouts);
        Rebalancer {
            store,
            kinesis,
            config,
            emit_metrics: false,
            sightings: Sightings::default(),
            fleet: None,
        }
    }

    /// One tick: read the group, record new and closed shards, plan, apply.
    pub async fn tick(&self) -> Result<RebalanceTick> {
        let mut snapshot = self.store.observe_group(GroupPart::Leases).await?;
        let discovery = discover_shards(&self.store, &self.kinesis, &snapshot).await?;
        if !discovery.created.is_empty() || !discovery.closed.is_empty() {
            snapshot = self.store.observe_group(GroupPart::Leases).await?;
        }
        let ages = self
            .sightings
            .observe(&snapshot, self.store.monotonic_now());
        super::ticker::note_older_code(&self.store, &ages).await;
        let term = self.config.lease_term;
        let live = live_consumers(&snapshot, &ages, self.config.heartbeat_timeout);
        let available = snapshot.available_shards();
        let mut leases_per_consumer: BTreeMap<String, usize> =
            live.iter().map(|c| (c.to_string(), 0)).collect();
        let mut unowned = 0;
        for shard in &available {
            match held_by(shard, &ages, term).filter(|o| live.contains(o)) {
                Some(owner) => *leases_per_consumer.entry(owner.to_string()).or_default() += 1,
                None => unowned += 1,
            }
        }
        let actions = plan_rebalance(&snapshot, &ages, &self.config);
        let execution = execute(&self.store, None, &actions, term).await?;
        let bounded_shards_left = snapshot
            .stream
            .as_ref()
            .and_then(|s| s.end.as_ref())
            .map(|_| snapshot.shards.iter().filter(|s| !s.depleted).count());
        let finished = bounded_shards_left == Some(0) && !snapshot.shards.is_empty();
        let fleet = match &self.fleet {
            Some(fleet) if !finished => Some(
                fleet
                    .tick(&self.store, &snapshot, &ages, available.len())
                    .await,
            ),
            _ => None,
        };
        let tick = RebalanceTick {
            discovery,
            live_consumers: live.len(),
            available_shards: available.len(),
            unowned_shards: unowned,
            leases_per_consumer,
            execution,
            actions_planned: actions.len(),
            fleet,
            bounded_shards_left,
        };
        if self.emit_metrics {
            tick.emit_metrics(&self.store);
        }
        Ok(tick)
    }
}

impl RebalanceTick {
    /// Claims plus forced takes applied.
    pub fn moves(&self) -> u64 {
        self.execution.applied(ActionKind::Claim) + self.execution.applied(ActionKind::ForceTake)
    }

    fn emit_metrics(&self, store: &StateStore) {
        let per = self.leases_per_consumer.values();
        let fleet = self.fleet.iter().flat_map(|f| {
            [
                Metric::count("WorkersWanted", f.plan.wanted as f64),
                Metric::count("WorkersStaying", f.plan.staying as f64),
                Metric::count("WorkersStarted", f.started as f64),
            ]
        });
        let bounded = self.bounded_shards_left.iter().flat_map(|left| {
            [
                Metric::count("BoundedShardsLeft", *left as f64),
                Metric::count("BoundedGroupFinished", f64::from(u8::from(*left == 0))),
            ]
        });
        emit_for(
            store,
            &fleet
                .chain(bounded)
                .chain([
                    Metric::count("ColdStart", crate::metrics::cold_start()),
                    Metric::count("LiveConsumers", self.live_consumers as f64),
                    Metric::count("AvailableShards", self.available_shards as f64),
                    Metric::count("UnownedShards", self.unowned_shards as f64),
                    Metric::count(
                        "MaxLeasesPerConsumer",
                        per.clone().max().copied().unwrap_or(0) as f64,
                    ),
                    Metric::count(
                        "MinLeasesPerConsumer",
                        per.min().copied().unwrap_or(0) as f64,
                    ),
                    Metric::count(
                        "Assignments",
                        self.execution.applied(ActionKind::Assign) as f64,
                    ),
                    Metric::count("Claims", self.execution.applied(ActionKind::Claim) as f64),
                    Metric::count("Moves", self.moves() as f64),
                    Metric::count("NewShards", self.discovery.created.len() as f64),
                    Metric::count("LostConditions", self.execution.lost_total() as f64),
                ])
                .collect::<Vec<_>>(),
        );
    }
}

/// The lease-rebalancer's Lambda handler: ticks until the deadline.
pub async fn handle_rebalance(
    rebalancer: &Rebalancer,
    timing: TickTiming,
    event: LambdaEvent<EventBridgeEvent>,
) -> crate::Result<InvocationSummary<RebalanceTick>> {
    tracing::debug!(source = %event.payload.source, detail_type = %event.payload.detail_type, "scheduled invocation");
    let run = run_ticks(event.context.deadline(), timing, || rebalancer.tick()).await;
    InvocationSummary::from_loop(run)
}
