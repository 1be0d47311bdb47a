//! Configuration of the functions from environment variables. A missing or
//! malformed variable fails at init with an error that names it.
//!
//! The variables and how they are read are in `vars`, the state store's
//! table, group, stream and buckets in `store`, what the scheduled
//! functions read on top in `scheduled`, and what the event-source-mapped
//! processors read on top in `processor`.

mod processor;
#[cfg(feature = "worker")]
mod scheduled;
mod store;
#[cfg(all(test, feature = "fleet"))]
mod tests;
mod vars;

pub use processor::{ProcessorConfig, PARKED_IN_TABLE_FOR};
#[cfg(feature = "worker")]
pub use scheduled::{ScheduledConfig, TickTiming};
pub use store::{processor_store_config, store_config_from_env, PROCESSOR_BUCKETS};
pub use vars::{
    optional_var, required_var, BALANCE_LOAD, BUCKETS, CHECKPOINT_SECONDS, CONCURRENCY,
    DEADLINE_MARGIN_MS, DEAD_LETTER_STREAM, DRAIN_SECONDS, EFO_IDLE_TIMEOUT_SECONDS, EFO_POOL_SIZE,
    GROUP, HEARTBEAT_TIMEOUT_SECONDS, INITIAL_POSITION, LEASE_TERM_SECONDS, MAX_ATTEMPTS,
    MAX_MOVES_PER_TICK, MAX_WORKERS, MIN_WORKERS, RETENTION_HOURS, SHARDS_PER_WORKER, STREAM,
    TABLE, TICK_SECONDS, WORKER_FUNCTION,
};

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
