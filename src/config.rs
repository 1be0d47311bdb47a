//! Configuration of the scheduled functions from environment variables.
//!
//! A missing or malformed variable fails at init with an error that names it.

use crate::consumer::{EfoPool, MAX_EFO_CONSUMERS};
use crate::consumer::{InitialPosition, WorkerConfig};
use crate::group::RebalanceConfig;
use crate::group::{FleetConfig, ReapConfig};
use crate::state::{schema::DEFAULT_TABLE, Buckets, StateError, StoreConfig, StreamArn};
use std::time::Duration;

/// A configuration error: which variable, and what is wrong with it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("environment variable {var} is required but not set")]
    Missing {
        /// The variable.
        var: &'static str,
    },
    /// A variable is set to something unusable.
    #[error("environment variable {var}={value:?} is invalid: {reason}")]
    Malformed {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why it is unusable.
        reason: String,
    },
}

/// State table name (default `shardkeeper-state`).
pub const TABLE: &str = "SHARDKEEPER_TABLE";
/// Consumer group (required).
pub const GROUP: &str = "SHARDKEEPER_GROUP";
/// The Kinesis stream (required): its name, or its ARN for a stream another
/// account shares (the ARN's region must be the function's `AWS_REGION`).
pub const STREAM: &str = "SHARDKEEPER_STREAM";
/// Seconds between ticks within one invocation (default 5).
pub const TICK_SECONDS: &str = "SHARDKEEPER_TICK_SECONDS";
/// Milliseconds kept free before the Lambda deadline (default 2000).
pub const DEADLINE_MARGIN_MS: &str = "SHARDKEEPER_DEADLINE_MARGIN_MS";
/// Seconds without a heartbeat before a consumer is dead (default 10).
pub const HEARTBEAT_TIMEOUT_SECONDS: &str = "SHARDKEEPER_HEARTBEAT_TIMEOUT_SECONDS";
/// Lease term in seconds given by an assignment (default 10).
pub const LEASE_TERM_SECONDS: &str = "SHARDKEEPER_LEASE_TERM_SECONDS";
/// Seconds a claim may stay unhonoured before a forced take (default 10).
pub const HANDOFF_TIMEOUT_SECONDS: &str = "SHARDKEEPER_HANDOFF_TIMEOUT_SECONDS";
/// Claims and forced takes per tick; 0 = as many as balance needs (default 0).
pub const MAX_MOVES_PER_TICK: &str = "SHARDKEEPER_MAX_MOVES_PER_TICK";
/// Enhanced fan-out consumers the shard workers share (0, the default: they poll; at most 20).
pub const EFO_POOL_SIZE: &str = "SHARDKEEPER_EFO_POOL_SIZE";
/// Seconds an EFO consumer may stay free before it is deregistered (default 900).
pub const EFO_IDLE_TIMEOUT_SECONDS: &str = "SHARDKEEPER_EFO_IDLE_TIMEOUT_SECONDS";
/// Where the shard worker starts a shard that has no checkpoint (and is no
/// child of another): `TRIM_HORIZON` (default), `LATEST`, or
/// `AT_TIMESTAMP:<epoch ms>`.
pub const INITIAL_POSITION: &str = "SHARDKEEPER_INITIAL_POSITION";

/// How many buckets (partition keys) a new group's shard items are spread
/// over: a power of two up to 1024. Unset, the scheduled functions choose
/// from the stream's open shard count at start, and the processing
/// functions use [`PROCESSOR_BUCKETS`]. A group laid out already keeps its own.
pub const BUCKETS: &str = "SHARDKEEPER_BUCKETS";

/// The processing functions' bucket count when [`BUCKETS`] is unset: their
/// group is never read whole on a schedule, so many buckets cost nothing
/// but an operator's listing of parked records.
pub const PROCESSOR_BUCKETS: u16 = 32;

/// Seconds before its end a shard-worker invocation starts handing its
/// leases to the workers that stay (default 15).
pub const DRAIN_SECONDS: &str = "SHARDKEEPER_DRAIN_SECONDS";
/// The shard-worker function the rebalancer starts workers of (name or
/// ARN); unset: it starts none (the workers are started otherwise).
pub const WORKER_FUNCTION: &str = "SHARDKEEPER_WORKER_FUNCTION";
/// The fewest shard workers the rebalancer keeps running (default 1).
pub const MIN_WORKERS: &str = "SHARDKEEPER_MIN_WORKERS";
/// The most shard workers the rebalancer keeps running (default 64).
pub const MAX_WORKERS: &str = "SHARDKEEPER_MAX_WORKERS";
/// The most open shards one shard worker is planned for (default 32).
pub const SHARDS_PER_WORKER: &str = "SHARDKEEPER_SHARDS_PER_WORKER";

/// The stream's retention in hours (default 24).
pub const RETENTION_HOURS: &str = "SHARDKEEPER_RETENTION_HOURS";

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
pub struct ScheduledConfig {
    /// Which state: table, group, stream.
    pub store: StoreConfig,
    /// Tick timing.
    pub timing: TickTiming,
    /// Lease term of assignments.
    pub lease_term: Duration,
    /// The rebalancer's planner settings.
    pub rebalance: RebalanceConfig,
    /// The reaper's planner settings.
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
    pub fleet: FleetConfig,
}

/// A required environment variable; a missing or empty one is a [`ConfigError`] naming it.
pub fn required_var(var: &'static str) -> Result<String, ConfigError> {
    optional_var(var)?.ok_or(ConfigError::Missing { var })
}

/// An optional environment variable (unset or empty is `None`); one that is
/// not valid UTF-8 is a [`ConfigError`] naming it.
pub fn optional_var(var: &'static str) -> Result<Option<String>, ConfigError> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(ConfigError::Malformed {
            var,
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".to_owned(),
        }),
    }
}

struct Vars<F: Fn(&str) -> Option<String>>(F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    fn get(&self, var: &'static str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    fn required(&self, var: &'static str) -> Result<String, ConfigError> {
        self.get(var).ok_or(ConfigError::Missing { var })
    }

    fn number(&self, var: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| ConfigError::Malformed {
                var,
                value: v.clone(),
                reason: "not a whole non-negative number".to_owned(),
            }),
        }
    }

    fn positive(&self, var: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.number(var, default)? {
            0 => Err(ConfigError::Malformed {
                var,
                value: "0".to_owned(),
                reason: "must be greater than 0".to_owned(),
            }),
            n => Ok(n),
        }
    }
}

/// The state store's table, group, stream and buckets from
/// `SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM` and
/// `SHARDKEEPER_BUCKETS` (for the processing functions).
pub fn store_config_from_env() -> Result<StoreConfig, ConfigError> {
    processor_store_config(|k: &str| std::env::var(k).ok())
}

/// [`store_config_from_env`] through `lookup` (variable name to value).
pub fn processor_store_config(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<StoreConfig, ConfigError> {
    let vars = Vars(lookup);
    let buckets =
        buckets(&vars)?.unwrap_or_else(|| Buckets::new(PROCESSOR_BUCKETS).expect("a power of two"));
    Ok(store_config(&vars)?.buckets(buckets))
}

/// Reads [`BUCKETS`], if set.
fn buckets<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<Option<Buckets>, ConfigError> {
    let Some(value) = vars.get(BUCKETS) else {
        return Ok(None);
    };
    let count = value
        .trim()
        .parse::<u16>()
        .map_err(|_| ConfigError::Malformed {
            var: BUCKETS,
            value: value.clone(),
            reason: format!("a power of two from 1 to {}", Buckets::MAX),
        })?;
    Buckets::new(count)
        .map(Some)
        .map_err(|e| state_error(BUCKETS, value.clone(), e))
}

fn store_config<F: Fn(&str) -> Option<String>>(vars: &Vars<F>) -> Result<StoreConfig, ConfigError> {
    let group = vars.required(GROUP)?;
    let stream = vars.required(STREAM)?;
    if let Ok(arn) = StreamArn::new(&stream) {
        // Kinesis answers for its own region only (an ARN of another region
        // is sent to the client's region, which has no such stream).
        if let Some(region) = vars.get("AWS_REGION").filter(|r| r != arn.region()) {
            return Err(ConfigError::Malformed {
                var: STREAM,
                value: stream.clone(),
                reason: format!(
                    "the stream is in {}, these functions in {region}: deploy them in the stream's region",
                    arn.region()
                ),
            });
        }
    }
    let table = vars.get(TABLE).unwrap_or_else(|| DEFAULT_TABLE.to_owned());
    StoreConfig::new(&group, &stream)
        .map_err(|e| match e {
            StateError::Validation {
                field: "consumer group",
                ..
            } => state_error(GROUP, group.clone(), e),
            e => state_error(STREAM, stream.clone(), e),
        })?
        .table(&table)
        .map_err(|e| state_error(TABLE, table.clone(), e))
}

fn state_error(var: &'static str, value: String, e: StateError) -> ConfigError {
    ConfigError::Malformed {
        var,
        value,
        reason: e.to_string(),
    }
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

impl ScheduledConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (variable name to value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let vars = Vars(lookup);
        let store = store_config(&vars)?;
        let secs = Duration::from_secs;
        let heartbeat_timeout = secs(vars.positive(HEARTBEAT_TIMEOUT_SECONDS, 10)?);
        let lease_term = secs(vars.positive(LEASE_TERM_SECONDS, 10)?);
        let moves = vars.number(MAX_MOVES_PER_TICK, 0)?;
        let drain = secs(vars.number(DRAIN_SECONDS, 15)?);
        Ok(ScheduledConfig {
            store,
            timing: TickTiming {
                tick: secs(vars.positive(TICK_SECONDS, 5)?),
                margin: Duration::from_millis(vars.number(DEADLINE_MARGIN_MS, 2000)?),
            },
            lease_term,
            rebalance: RebalanceConfig {
                lease_term,
                heartbeat_timeout,
                handoff_timeout: secs(vars.positive(HANDOFF_TIMEOUT_SECONDS, 10)?),
                max_moves_per_tick: (moves > 0).then_some(moves as usize),
            },
            reap: ReapConfig {
                heartbeat_timeout,
                efo_idle_timeout: secs(vars.positive(EFO_IDLE_TIMEOUT_SECONDS, 900)?),
                retention: secs(3600 * vars.positive(RETENTION_HOURS, 24)?),
            },
            initial_position: initial_position(vars.get(INITIAL_POSITION))?,
            buckets: buckets(&vars)?,
            drain,
            worker_function: vars.get(WORKER_FUNCTION),
            fleet: FleetConfig {
                min_workers: vars.number(MIN_WORKERS, 1)? as usize,
                max_workers: vars.positive(MAX_WORKERS, 64)? as usize,
                shards_per_worker: vars.positive(SHARDS_PER_WORKER, 32)? as usize,
                // The drain, a start, and room for ticks and a slow start.
                lead: drain + Duration::from_secs(45),
                heartbeat_timeout,
                ..FleetConfig::default()
            },
            efo_pool_size: match vars.number(EFO_POOL_SIZE, 0)? {
                n if n <= MAX_EFO_CONSUMERS as u64 => n as usize,
                n => {
                    return Err(ConfigError::Malformed {
                        var: EFO_POOL_SIZE,
                        value: n.to_string(),
                        reason: format!("Kinesis allows at most {MAX_EFO_CONSUMERS} per stream"),
                    })
                }
            },
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
            ..WorkerConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> Result<ScheduledConfig, ConfigError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ScheduledConfig::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_and_overrides() {
        let c = config(&[(GROUP, "billing"), (STREAM, "orders")]).unwrap();
        assert_eq!(c.store.table, "shardkeeper-state");
        assert_eq!(c.timing.tick, Duration::from_secs(5));
        assert_eq!(c.lease_term, Duration::from_secs(10));
        assert_eq!(c.rebalance.max_moves_per_tick, None);
        assert_eq!(c.reap.retention, Duration::from_secs(86_400));
        let c = config(&[
            (GROUP, "billing"),
            (STREAM, "orders"),
            (TABLE, "my-state"),
            (MAX_MOVES_PER_TICK, "2"),
            (TICK_SECONDS, "10"),
        ])
        .unwrap();
        assert_eq!(c.store.table, "my-state");
        assert_eq!(c.rebalance.max_moves_per_tick, Some(2));
        assert_eq!(c.timing.tick, Duration::from_secs(10));
        assert!(
            c.worker_config().enhanced_fan_out.is_none(),
            "polls by default"
        );
    }

    #[test]
    fn the_initial_position_is_read_and_checked() {
        let base = [(GROUP, "billing"), (STREAM, "orders")];
        let at = |v: &str| {
            let mut vars = base.to_vec();
            vars.push((INITIAL_POSITION, v));
            config(&vars)
        };
        assert_eq!(
            config(&base).unwrap().worker_config().initial_position,
            InitialPosition::TrimHorizon
        );
        assert_eq!(
            at("LATEST").unwrap().worker_config().initial_position,
            InitialPosition::Latest
        );
        assert_eq!(
            at("AT_TIMESTAMP:1700000000000").unwrap().initial_position,
            InitialPosition::AtTimestamp(1_700_000_000_000)
        );
        for bad in ["latest", "AT_TIMESTAMP:soon", "NOW"] {
            let err = at(bad).unwrap_err().to_string();
            assert!(err.contains("SHARDKEEPER_INITIAL_POSITION"), "{err}");
        }
    }

    #[test]
    fn the_efo_pool_size_turns_on_enhanced_fan_out_within_the_kinesis_limit() {
        let c = config(&[(GROUP, "billing"), (STREAM, "orders"), (EFO_POOL_SIZE, "3")]).unwrap();
        let pool = c.worker_config().enhanced_fan_out.unwrap();
        assert_eq!((pool.prefix.as_str(), pool.size), ("billing", 3));
        let err = config(&[
            (GROUP, "billing"),
            (STREAM, "orders"),
            (EFO_POOL_SIZE, "21"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("SHARDKEEPER_EFO_POOL_SIZE") && err.contains("20"),
            "{err}"
        );
    }

    #[test]
    fn missing_and_malformed_variables_are_named() {
        assert_eq!(
            config(&[(STREAM, "orders")]).unwrap_err(),
            ConfigError::Missing { var: GROUP }
        );
        let err = config(&[(GROUP, "g"), (STREAM, "orders"), (TICK_SECONDS, "soon")]).unwrap_err();
        assert!(
            err.to_string()
                .contains("SHARDKEEPER_TICK_SECONDS=\"soon\""),
            "{err}"
        );
        let err =
            config(&[(GROUP, "g"), (STREAM, "orders"), (LEASE_TERM_SECONDS, "0")]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Malformed {
                var: LEASE_TERM_SECONDS,
                ..
            }
        ));
        let err = config(&[(GROUP, "a#b"), (STREAM, "orders")]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { var: GROUP, .. }),
            "{err}"
        );
        let err = config(&[(GROUP, "g"), (STREAM, "bad stream")]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Malformed { var: STREAM, .. }),
            "{err}"
        );
    }

    #[test]
    fn the_stream_is_a_name_or_an_arn_of_the_functions_region() {
        let arn = "arn:aws:kinesis:eu-west-1:210987654321:stream/orders";
        let by_arn = config(&[(GROUP, "g"), (STREAM, arn), ("AWS_REGION", "eu-west-1")]).unwrap();
        assert_eq!(by_arn.store.stream.arn().map(|a| a.as_str()), Some(arn));
        assert_eq!(by_arn.store.stream.name().as_str(), "orders");
        let by_name = config(&[(GROUP, "g"), (STREAM, "orders")]).unwrap();
        assert_eq!(by_name.store.stream.arn(), None);
        assert_eq!(
            by_name.store.stream.name(),
            by_arn.store.stream.name(),
            "one state for both"
        );
        let elsewhere = config(&[(GROUP, "g"), (STREAM, arn), ("AWS_REGION", "us-east-1")]);
        match elsewhere.unwrap_err() {
            ConfigError::Malformed { var, reason, .. } => {
                assert_eq!(var, STREAM);
                assert!(
                    reason.contains("eu-west-1") && reason.contains("us-east-1"),
                    "{reason}"
                );
            }
            other => panic!("{other}"),
        }
        let err = config(&[
            (GROUP, "g"),
            (STREAM, "arn:aws:kinesis:eu-west-1:42:stream/orders"),
        ])
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Malformed { var: STREAM, reason, .. } if reason.contains("12 digits")),
            "{err}"
        );
    }

    #[test]
    fn the_bucket_count_is_a_power_of_two_or_chosen_later() {
        let base = [(GROUP, "g"), (STREAM, "orders")];
        assert_eq!(config(&base).unwrap().buckets, None);
        let set = config(&[base[0], base[1], (BUCKETS, "64")]).unwrap();
        assert_eq!(set.buckets, Some(Buckets::new(64).unwrap()));
        for bad in ["0", "48", "2048", "many"] {
            let err = config(&[base[0], base[1], (BUCKETS, bad)]).unwrap_err();
            assert!(
                matches!(err, ConfigError::Malformed { var: BUCKETS, .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("power of two"), "{err}");
        }
        let lookup = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let processors = processor_store_config(lookup(&[(GROUP, "g"), (STREAM, "orders")]));
        assert_eq!(processors.unwrap().buckets.count(), PROCESSOR_BUCKETS);
        let chosen =
            processor_store_config(lookup(&[(GROUP, "g"), (STREAM, "orders"), (BUCKETS, "8")]));
        assert_eq!(chosen.unwrap().buckets.count(), 8);
    }
}
