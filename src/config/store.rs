//! The state store's configuration: its table, group, stream and bucket
//! count, as every function reads them.

use super::vars::{Vars, BUCKETS, GROUP, STREAM, TABLE};
use super::ConfigError;
use crate::state::{Buckets, StateError, StoreConfig, StreamArn, DEFAULT_TABLE};

/// The processing functions' bucket count when [`BUCKETS`] is unset: their
/// group is never read whole on a schedule, so many buckets cost nothing
/// but an operator's listing of parked records.
pub const PROCESSOR_BUCKETS: u16 = 32;

/// The state store's table, group, stream and buckets from
/// `SHARDKEEPER_TABLE`, `SHARDKEEPER_GROUP`, `SHARDKEEPER_STREAM` and
/// `SHARDKEEPER_BUCKETS` (for the processing functions).
pub fn store_config_from_env() -> crate::Result<StoreConfig> {
    processor_store_config(|k: &str| std::env::var(k).ok())
}

/// [`store_config_from_env`] through `lookup` (variable name to value).
pub fn processor_store_config(
    lookup: impl Fn(&str) -> Option<String>,
) -> crate::Result<StoreConfig> {
    let vars = Vars(lookup);
    let buckets =
        buckets(&vars)?.unwrap_or_else(|| Buckets::new(PROCESSOR_BUCKETS).expect("a power of two"));
    Ok(store_config(&vars)?.buckets(buckets))
}

/// Reads [`BUCKETS`], if set.
pub(super) fn buckets<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
) -> Result<Option<Buckets>, ConfigError> {
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

pub(super) fn store_config<F: Fn(&str) -> Option<String>>(
    vars: &Vars<F>,
) -> Result<StoreConfig, ConfigError> {
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

pub(super) fn state_error(var: &'static str, value: String, e: StateError) -> ConfigError {
    ConfigError::Malformed {
        var,
        value,
        reason: e.to_string(),
    }
}
