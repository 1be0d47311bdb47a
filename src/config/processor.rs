//! What an event-source-mapped processor reads on top of the state store's
//! configuration: how many failed attempts park a record, and where.

use super::store::{processor_store_config, state_error};
use super::vars::{Vars, CONCURRENCY, DEAD_LETTER_STREAM, MAX_ATTEMPTS};
use crate::state::{StoreConfig, StreamAddress};
use std::time::Duration;

/// How long a parked record stays in the state table when no dead-letter
/// stream is configured.
pub const PARKED_IN_TABLE_FOR: Duration = Duration::from_secs(14 * 24 * 3600);

/// An event-source-mapped processor's configuration, from the environment
/// (`SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM`,
/// `SHARDKEEPER_BUCKETS`, [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS),
/// [`DEAD_LETTER_STREAM`](super::DEAD_LETTER_STREAM),
/// [`CONCURRENCY`](super::CONCURRENCY)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProcessorConfig {
    /// The state store: batch progress, attempts and parked records.
    pub store: StoreConfig,
    /// Failed attempts after which a record is parked (at least 1).
    pub max_attempts: u32,
    /// Where parked records go: a dead-letter stream, or (`None`) the state
    /// table for [`PARKED_IN_TABLE_FOR`].
    pub dead_letter_stream: Option<StreamAddress>,
    /// Records of different keys run at once (at least 1).
    pub concurrency: usize,
}

impl ProcessorConfig {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> crate::Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `lookup` (variable name to value).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> crate::Result<Self> {
        let store = processor_store_config(&lookup)?;
        let vars = Vars(lookup);
        let max_attempts = vars.positive(MAX_ATTEMPTS, 3)?;
        let max_attempts =
            u32::try_from(max_attempts).map_err(|_| super::ConfigError::Malformed {
                var: MAX_ATTEMPTS,
                value: max_attempts.to_string(),
                reason: format!("at most {}", u32::MAX),
            })?;
        let dead_letter_stream = vars
            .get(DEAD_LETTER_STREAM)
            .map(|s| StreamAddress::parse(&s).map_err(|e| state_error(DEAD_LETTER_STREAM, s, e)))
            .transpose()?;
        Ok(ProcessorConfig {
            store,
            max_attempts,
            dead_letter_stream,
            concurrency: vars.positive(CONCURRENCY, 1)? as usize,
        })
    }
}
