//! The size of a fleet of shard workers whose runs end (Lambda invocations):
//! how many the group wants, how many stay long enough, how many to start
//! now. Pure, no I/O; the rebalancer starts them.
//!
//! - A worker is counted as **staying** while it heartbeats (active, or
//!   waiting for an enhanced fan-out consumer of the pool) and its run ends
//!   more than [`FleetConfig::lead`] from now. Its end is read as the time left at its last heartbeat (its
//!   `ends` minus its heartbeat time, both on its own clock) less how long
//!   that heartbeat has been seen unchanged, so clocks that differ do not
//!   matter.
//! - The group **wants** enough workers for its open shards
//!   ([`FleetConfig::shards_per_worker`]) and for its load (the handlers'
//!   busy time reported by every heartbeating worker, over
//!   [`FleetConfig::target_busy`]), no more than one per open shard, within
//!   [`FleetConfig::min_workers`] and [`FleetConfig::max_workers`], and no
//!   more than an enhanced fan-out pool serves
//!   ([`FleetConfig::efo_pool_size`]: each worker reads through one of its
//!   consumers, and one without waits).
//! - Workers started and not registered yet count as **starting** until
//!   they register or [`FleetConfig::start_timeout`] passes.
//! - The plan starts `wanted - staying - starting` workers. So a worker's
//!   replacement runs before it drains, and a fleet larger than wanted
//!   shrinks as runs end (each hands its shards to the workers that stay).

use crate::group::Ages;
use crate::state::{ConsumerId, EpochMillis, GroupSnapshot};
use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

/// How a fleet is sized.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetConfig {
    /// The fewest workers kept running (default 1).
    pub min_workers: usize,
    /// The most workers kept running (default 64).
    pub max_workers: usize,
    /// The most open shards one worker is planned for (default 32).
    pub shards_per_worker: usize,
    /// The handler load one worker is planned for, in thousandths of its
    /// time (default 700).
    pub target_busy: u32,
    /// A worker whose run ends sooner than this no longer counts as staying,
    /// so its replacement starts (default 60 s: a worker's drain, a start
    /// and two rebalancer ticks, with room).
    pub lead: Duration,
    /// A start not registered within this is given up (default 30 s).
    pub start_timeout: Duration,
    /// The heartbeat timeout: a consumer silent this long is not live.
    pub heartbeat_timeout: Duration,
    /// The size of the enhanced fan-out pool the workers read through, if
    /// they do: no more workers are wanted than it has consumers.
    pub efo_pool_size: Option<usize>,
}

/// Setters, for a configuration built from its default (the struct is
/// `#[non_exhaustive]`: a field added later breaks no caller).
impl FleetConfig {
    /// Sets [`FleetConfig::min_workers`](Self::min_workers).
    pub fn min_workers(mut self, min_workers: usize) -> Self {
        self.min_workers = min_workers;
        self
    }

    /// Sets [`FleetConfig::max_workers`](Self::max_workers).
    pub fn max_workers(mut self, max_workers: usize) -> Self {
        self.max_workers = max_workers;
        self
    }

    /// Sets [`FleetConfig::shards_per_worker`](Self::shards_per_worker).
    pub fn shards_per_worker(mut self, shards_per_worker: usize) -> Self {
        self.shards_per_worker = shards_per_worker;
        self
    }

    /// Sets [`FleetConfig::target_busy`](Self::target_busy).
    pub fn target_busy(mut self, target_busy: u32) -> Self {
        self.target_busy = target_busy;
        self
    }

    /// Sets [`FleetConfig::lead`](Self::lead).
    pub fn lead(mut self, lead: Duration) -> Self {
        self.lead = lead;
        self
    }

    /// Sets [`FleetConfig::start_timeout`](Self::start_timeout).
    pub fn start_timeout(mut self, start_timeout: Duration) -> Self {
        self.start_timeout = start_timeout;
        self
    }

    /// Sets [`FleetConfig::heartbeat_timeout`](Self::heartbeat_timeout).
    pub fn heartbeat_timeout(mut self, heartbeat_timeout: Duration) -> Self {
        self.heartbeat_timeout = heartbeat_timeout;
        self
    }

    /// Sets [`FleetConfig::efo_pool_size`](Self::efo_pool_size).
    pub fn efo_pool_size(mut self, efo_pool_size: Option<usize>) -> Self {
        self.efo_pool_size = efo_pool_size;
        self
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            min_workers: 1,
            max_workers: 64,
            shards_per_worker: 32,
            target_busy: 700,
            lead: Duration::from_secs(60),
            start_timeout: Duration::from_secs(30),
            heartbeat_timeout: Duration::from_secs(15),
            efo_pool_size: None,
        }
    }
}

/// What the fleet planner (`plan_fleet`) decided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FleetPlan {
    /// Workers the group wants.
    pub wanted: usize,
    /// Live workers whose runs end later than the lead.
    pub staying: usize,
    /// Workers started and not registered yet.
    pub starting: usize,
    /// Workers to start now.
    pub start: usize,
}

/// How many workers to start (see the module docs).
///
/// Public only with the `testing` feature (see the `group` module's documentation).
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub fn plan_fleet(
    snapshot: &GroupSnapshot,
    ages: &Ages,
    open_shards: usize,
    starting: usize,
    config: &FleetConfig,
) -> FleetPlan {
    // Heartbeating workers, active or waiting for an EFO consumer (a
    // draining one ends within the lead, so it does not stay).
    let staying = snapshot
        .consumers
        .iter()
        .filter(|c| !c.info.standalone && ages.heartbeat(c.id()) < config.heartbeat_timeout)
        .filter(|c| ages.time_left(c).is_none_or(|left| left > config.lead))
        .count();
    let busy: u32 = snapshot
        .consumers
        .iter()
        .filter(|c| !c.info.standalone && ages.heartbeat(c.id()) < config.heartbeat_timeout)
        .filter_map(|c| c.info.busy.map(u32::from))
        .sum();
    let by_shards = open_shards.div_ceil(config.shards_per_worker.max(1));
    let by_load = busy.div_ceil(config.target_busy.max(1)) as usize;
    let most = config
        .max_workers
        .max(config.min_workers)
        .min(config.efo_pool_size.unwrap_or(usize::MAX));
    let wanted = by_shards
        .max(by_load)
        .min(open_shards)
        .max(config.min_workers)
        .min(most);
    FleetPlan {
        wanted,
        staying,
        starting,
        start: wanted.saturating_sub(staying + starting),
    }
}

/// The rebalancer's memory of the workers it started: each start counts as
/// starting until a consumer it has not seen before registers, or the start
/// times out.
#[derive(Debug, Clone, Default)]
pub struct Starts {
    pending: VecDeque<EpochMillis>,
    seen: BTreeSet<ConsumerId>,
}

impl Starts {
    /// Notes the consumers of `snapshot` (at `now`, a monotonic reading in
    /// ms): each one not seen before ends the oldest pending start; starts
    /// older than `timeout` are given up. Returns how many are starting.
    pub fn observe(
        &mut self,
        snapshot: &GroupSnapshot,
        now: EpochMillis,
        timeout: Duration,
    ) -> usize {
        for consumer in &snapshot.consumers {
            if self.seen.insert(consumer.id().clone()) {
                self.pending.pop_front();
            }
        }
        let present: BTreeSet<&ConsumerId> = snapshot.consumers.iter().map(|c| c.id()).collect();
        self.seen.retain(|c| present.contains(c));
        let oldest = now - timeout.as_millis() as EpochMillis;
        self.pending.retain(|at| *at > oldest);
        self.pending.len()
    }

    /// Notes `count` workers started at `now`.
    pub fn started(&mut self, count: usize, now: EpochMillis) {
        self.pending.extend(std::iter::repeat_n(now, count));
    }
}
