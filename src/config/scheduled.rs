//! What the heartbeat-reaper and lease-rebalancer functions read at init:
//! tick timing, lease and planner settings, the EFO pool, where new shards
//! start, and the fleet of shard workers.

use super::store::{buckets, store_config};
use super::vars::*;
use super::ConfigError;
use crate::consumer::{EfoPool, WorkerConfig, MAX_EFO_CONSUMERS};
#[cfg(feature = "fleet")]
use crate::group::{FleetConfig, ReapConfig, RebalanceConfig};
use crate::pipeline::InitialPosition;
use crate::state::{Buckets, StoreConfig};
use std::time::Duration;

/// When the scheduled functions tick within one invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TickTiming {
    /// Time between tick starts.
    pub tick: Duration,
    /// Time kept free before the deadline: no tick starts later than deadline - margin - tick.
    pub margin: Duration,
}

/// Everything the heartbeat-reaper and lease-rebalancer functions read at init.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScheduledConfig {
    /// Which state: table, group, stream.
    pub store: StoreConfig,
    /// Tick timing.
    pub timing: TickTiming,
    /// Lease term of assignments.
    pub lease_term: Duration,
    /// The rebalancer's planner settings.
    #[cfg(feature = "fleet")]
    pub rebalance: RebalanceConfig,
    /// The reaper's planner settings.
    #[cfg(feature = "fleet")]
    pub reap: ReapConfig,
    /// Enhanced fan-out consumers the shard workers share (0: they poll).
    pub efo_pool_size: usize,
    /// Where a shard worker starts a shard with no checkpoint.
    pub initial_position: InitialPosition,
    /// The bucket count a new group is laid out with; `None`: chosen from the
    /// stream's open shards at start.
    pub buckets: Option<Buckets>,
    /// How long before its end a shard-worker invocation drains.
    pub drain: Duration,
    /// The shard-worker function the rebalancer starts workers of.
    pub worker_function: Option<String>,
    /// How the rebalancer sizes the fleet of shard workers.
    #[cfg(feature = "fleet")]
    pub fleet: FleetConfig,
    /// The least time between two checkpoints of a shard while records are
    /// processed ([`CHECKPOINT_SECONDS`]).
    pub checkpoint_every: Duration,
    /// Records of different keys a shard worker runs at once, and whether
    /// it steps its shards at once (above 1; [`CONCURRENCY`]).
    pub concurrency: usize,
}

/// Reads [`INITIAL_POSITION`] (unset: `TRIM_HORIZON`).
fn initial_position(value: Option<String>) -> Result<InitialPosition, ConfigError> {
    let Some(value) = value else {
        return Ok(InitialPosition::TrimHorizon);
    };
    let text = value.trim();
    let malformed = |reason: &str| ConfigError::Malformed {
        var: INITIAL_POSITION,
        value: value.clone(),
        reason: reason.to_owned(),
    };
    match text {
        "TRIM_HORIZON" => Ok(InitialPosition::TrimHorizon),
        "LATEST" => Ok(InitialPosition::Latest),
        _ => match text.strip_prefix("AT_TIMESTAMP:") {
            Some(ms) => ms
                .parse()
                .map(InitialPosition::AtTimestamp)
                .map_err(|_| malformed("AT_TIMESTAMP: needs epoch milliseconds")),
            None => Err(malformed(
                "one of TRIM_HORIZON, LATEST, AT_TIMESTAMP:<epoch ms>",
            )),
        },
    }
}

/// The variable that set the hand-off timeout, which a forced take no
/// longer waits for (it waits for the lease term).
const HANDOFF_TIMEOUT_SECONDS: &str = "SHARDKEEPER_HANDOFF_TIMEOUT_SECONDS";

/// [`HEARTBEAT_TIMEOUT_SECONDS`] (default: the lease term plus 5 s). A
/// timeout shorter than the term plus a worker's heartbeat interval is
/// refused: a consumer whose tick runs a little late would be judged dead
/// while it still holds its leases.
fn heartbeat_timeout<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
    lease_term: Duration,
) -> Result<Duration, ConfigError> {
    let default = lease_term.as_secs() + 5;
    let timeout = Duration::from_secs(vars.positive(HEARTBEAT_TIMEOUT_SECONDS, default)?);
    let least = lease_term + WorkerConfig::default().renew_every;
    if timeout < least {
        return Err(ConfigError::Malformed {
            var: HEARTBEAT_TIMEOUT_SECONDS,
            value: timeout.as_secs().to_string(),
            reason: format!(
                "at least the lease term plus a heartbeat interval ({} s): a consumer whose tick \
                 runs late would be judged dead while it holds its leases",
                least.as_secs_f64().ceil()
            ),
        });
    }
    Ok(timeout)
}

/// [`EFO_POOL_SIZE`]: 0 (poll) to Kinesis' limit of consumers per stream.
fn efo_pool_size<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<usize, ConfigError> {
    match vars.number(EFO_POOL_SIZE, 0)? {
        n if n <= MAX_EFO_CONSUMERS as u64 => Ok(n as usize),
        n => Err(ConfigError::Malformed {
            var: EFO_POOL_SIZE,
            value: n.to_string(),
            reason: format!("Kinesis allows at most {MAX_EFO_CONSUMERS} per stream"),
        }),
    }
}

impl ScheduledConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> crate::Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (variable name to value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> crate::Result<Self> {
        Ok(Self::read(&Vars(lookup))?)
    }

    // Without `fleet` the planners' settings are read and checked, not kept.
    #[cfg_attr(not(feature = "fleet"), allow(unused_variables))]
    fn read<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Self, ConfigError> {
        let store = store_config(vars)?;
        let secs = Duration::from_secs;
        let lease_term = secs(vars.positive(LEASE_TERM_SECONDS, 10)?);
        let heartbeat_timeout = heartbeat_timeout(vars, lease_term)?;
        if vars.get(HANDOFF_TIMEOUT_SECONDS).is_some() {
            tracing::warn!(
                "{HANDOFF_TIMEOUT_SECONDS} is no longer read: a claimed lease that its owner \
                 neither hands over nor heartbeats moves once its term has passed"
            );
        }
        let moves = vars.number(MAX_MOVES_PER_TICK, 0)?;
        let balance_load = vars.flag(BALANCE_LOAD, true)?;
        let drain = secs(vars.number(DRAIN_SECONDS, 15)?);
        let efo_pool_size = efo_pool_size(vars)?;
        Ok(ScheduledConfig {
            store,
            timing: TickTiming {
                tick: secs(vars.positive(TICK_SECONDS, 5)?),
                margin: Duration::from_millis(vars.number(DEADLINE_MARGIN_MS, 2000)?),
            },
            lease_term,
            #[cfg(feature = "fleet")]
            rebalance: RebalanceConfig {
                lease_term,
                heartbeat_timeout,
                max_moves_per_tick: (moves > 0).then_some(moves as usize),
                balance_load,
            },
            #[cfg(feature = "fleet")]
            reap: ReapConfig {
                heartbeat_timeout,
                lease_term,
                efo_idle_timeout: secs(vars.positive(EFO_IDLE_TIMEOUT_SECONDS, 900)?),
                retention: secs(3600 * vars.positive(RETENTION_HOURS, 24)?),
            },
            initial_position: initial_position(vars.get(INITIAL_POSITION))?,
            buckets: buckets(vars)?,
            drain,
            worker_function: vars.get(WORKER_FUNCTION),
            #[cfg(feature = "fleet")]
            fleet: FleetConfig {
                min_workers: vars.number(MIN_WORKERS, 1)? as usize,
                max_workers: vars.positive(MAX_WORKERS, 64)? as usize,
                shards_per_worker: vars.positive(SHARDS_PER_WORKER, 32)? as usize,
                // The drain, a start, and room for ticks and a slow start.
                lead: drain + Duration::from_secs(45),
                heartbeat_timeout,
                efo_pool_size: (efo_pool_size > 0).then_some(efo_pool_size),
                ..FleetConfig::default()
            },
            efo_pool_size,
            checkpoint_every: secs(vars.number(CHECKPOINT_SECONDS, 5)?),
            concurrency: vars.positive(CONCURRENCY, 1)? as usize,
        })
    }

    /// The shard worker's settings: the defaults, reading with enhanced
    /// fan-out from a pool named after the group (`:` becomes `-`, which
    /// consumer names allow) when its size is not 0.
    pub fn worker_config(&self) -> WorkerConfig {
        let prefix = self.store.group.as_str().replace(':', "-");
        WorkerConfig {
            initial_position: self.initial_position,
            enhanced_fan_out: (self.efo_pool_size > 0)
                .then(|| EfoPool::new(&prefix, self.efo_pool_size)),
            checkpoint_every: self.checkpoint_every,
            processing: WorkerConfig::default()
                .processing
                .concurrency(self.concurrency),
            ..WorkerConfig::default()
        }
    }
}
