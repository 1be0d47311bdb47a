//! The environment variables the functions read: their names, and reading
//! them (a blank variable is an unset one).

use super::ConfigError;

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
/// Seconds without a heartbeat before a consumer is dead (default: the
/// lease term plus 5; at least the term plus a heartbeat interval).
pub const HEARTBEAT_TIMEOUT_SECONDS: &str = "SHARDKEEPER_HEARTBEAT_TIMEOUT_SECONDS";
/// Lease term in seconds given by an assignment (default 10).
pub const LEASE_TERM_SECONDS: &str = "SHARDKEEPER_LEASE_TERM_SECONDS";
/// Claims per tick; 0 = as many as balance needs (default 0).
pub const MAX_MOVES_PER_TICK: &str = "SHARDKEEPER_MAX_MOVES_PER_TICK";
/// `true` (default): once lease counts are balanced, the rebalancer moves
/// leases by the handlers' load per shard; `false`: counts only.
pub const BALANCE_LOAD: &str = "SHARDKEEPER_BALANCE_LOAD";
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
/// functions use [`PROCESSOR_BUCKETS`](super::PROCESSOR_BUCKETS). A group laid out already keeps its own.
pub const BUCKETS: &str = "SHARDKEEPER_BUCKETS";

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

/// The least time between two checkpoints of a shard while records are
/// processed, in seconds (default 5; 0: after every batch).
pub const CHECKPOINT_SECONDS: &str = "SHARDKEEPER_CHECKPOINT_SECONDS";
/// How many records of different keys a processor or a shard worker runs
/// at once (`ProcessingOptions::concurrency`; default 1: one after another).
pub const CONCURRENCY: &str = "SHARDKEEPER_CONCURRENCY";

/// A required environment variable; a missing or empty one is an [`Error::Config`](crate::Error::Config) naming it.
pub fn required_var(var: &'static str) -> crate::Result<String> {
    optional_var(var)?.ok_or(ConfigError::Missing { var }.into())
}

/// An optional environment variable (unset or empty is `None`); one that is
/// not valid UTF-8 is an [`Error::Config`](crate::Error::Config) naming it.
pub fn optional_var(var: &'static str) -> crate::Result<Option<String>> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(ConfigError::Malformed {
            var,
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".to_owned(),
        }
        .into()),
    }
}

/// Variables read through a lookup (variable name to value); unset and
/// blank are the same.
pub(super) struct Vars<F: Fn(&str) -> Option<String>>(pub(super) F);

impl<F: Fn(&str) -> Option<String>> Vars<F> {
    pub(super) fn get(&self, var: &'static str) -> Option<String> {
        (self.0)(var).filter(|v| !v.trim().is_empty())
    }

    pub(super) fn required(&self, var: &'static str) -> Result<String, ConfigError> {
        self.get(var).ok_or(ConfigError::Missing { var })
    }

    pub(super) fn number(&self, var: &'static str, default: u64) -> Result<u64, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| ConfigError::Malformed {
                var,
                value: v.clone(),
                reason: "not a whole non-negative number".to_owned(),
            }),
        }
    }

    /// `true` or `false` (either case), `default` when unset.
    #[cfg(feature = "worker")]
    pub(super) fn flag(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(ConfigError::Malformed {
                var,
                value: v,
                reason: "not true or false".to_owned(),
            }),
        }
    }

    pub(super) fn positive(&self, var: &'static str, default: u64) -> Result<u64, ConfigError> {
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

/// Failed attempts after which an event-source-mapped processor parks a
/// record (default 3).
pub const MAX_ATTEMPTS: &str = "SHARDKEEPER_MAX_ATTEMPTS";
/// The Kinesis stream (name or ARN) a processor parks records in; unset:
/// parked-record items in the state table, kept 14 days.
pub const DEAD_LETTER_STREAM: &str = "SHARDKEEPER_DEAD_LETTER_STREAM";
