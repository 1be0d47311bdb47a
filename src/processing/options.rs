//! How a processor treats failures.

use crate::state::StreamAddress;
use std::time::Duration;

/// What a failure does to the rest of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Stop at the first failure and report it: nothing after it is
    /// processed, so order is kept (the default).
    #[default]
    StopAtFirstFailure,
    /// Process every record and report every failure (for handlers that do
    /// not need order; the event source mapping re-delivers from the first
    /// failure, so later successes may run again).
    ReportAllFailures,
}

/// Where poison records go once they failed `max_attempts` times.
#[derive(Debug, Clone, Default)]
pub enum Parking {
    /// Never park: a failing record is reported until the event source
    /// mapping gives up on it (its own retry limit and on-failure destination).
    #[default]
    Disabled,
    /// As a parked-record item in the state table, kept for `ttl`.
    StateTable {
        /// How long the parked record is kept.
        ttl: Duration,
    },
    /// To a dead-letter Kinesis stream, as a JSON envelope with the record
    /// and the error.
    DeadLetterStream {
        /// Kinesis client.
        client: aws_sdk_kinesis::Client,
        /// The dead-letter stream (a name, or an ARN for one of another account).
        stream: StreamAddress,
    },
}

/// Processor settings.
#[derive(Debug, Clone)]
pub struct ProcessingOptions {
    /// Stop at the first failure (default) or report all.
    pub mode: FailureMode,
    /// Failed attempts after which a record is parked (needs the state store
    /// to count attempts across invocations).
    pub max_attempts: u32,
    /// Where parked records go.
    pub parking: Parking,
    /// How long attempt counters live.
    pub attempts_ttl: Duration,
    /// Stop this long before the Lambda deadline and report the rest (with
    /// less time than this left, half of what is left).
    pub deadline_margin: Duration,
    /// Commit progress during a batch at least this often (a timeout or a
    /// crash then repeats at most this much work of the batch).
    pub checkpoint_every: Duration,
    /// Also commit progress after this many records (`None`: by time only).
    pub checkpoint_records: Option<u64>,
    /// How long an event-source-mapped batch's checkpoint lives: a retry of
    /// the batch later than this repeats its records (never skips one).
    pub checkpoint_ttl: Duration,
    /// Whose progress, attempts and parked records an event source
    /// mapping's batches are (`None`: the invoked function's name, from the
    /// invocation context). Two consumers of one stream never share them;
    /// give each of two mappings of one function on one stream a name of
    /// its own. At most 256 bytes, no `#`.
    pub consumer: Option<String>,
}

impl Default for ProcessingOptions {
    fn default() -> Self {
        ProcessingOptions {
            mode: FailureMode::StopAtFirstFailure,
            max_attempts: 3,
            parking: Parking::Disabled,
            attempts_ttl: Duration::from_secs(2 * 24 * 3600),
            deadline_margin: Duration::from_millis(1500),
            checkpoint_every: Duration::from_secs(1),
            checkpoint_records: None,
            checkpoint_ttl: Duration::from_secs(2 * 24 * 3600),
            consumer: None,
        }
    }
}
