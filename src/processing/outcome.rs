//! What happened to a batch, and why a record failed.

use serde::Serialize;

/// Why one record failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[non_exhaustive]
pub enum RecordError {
    /// The record in the event could not be read (bad base64, missing fields).
    #[error("record {index} of the event is malformed: {error}")]
    Malformed {
        /// Its position in the event.
        index: usize,
        /// The parse error.
        error: String,
    },
    /// The KPL aggregate is corrupt.
    #[error("aggregated record {sequence_number} is corrupt: {error}")]
    Aggregate {
        /// The aggregated record's sequence number.
        sequence_number: String,
        /// What is wrong with it.
        error: String,
    },
    /// The payload is not the type the handler expects.
    #[error("record {sequence_number}/{sub_sequence}: payload does not decode: {error}")]
    Payload {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
        /// The serde error.
        error: String,
    },
    /// The handler returned an error.
    #[error("record {sequence_number}/{sub_sequence}: handler failed: {error}")]
    Handler {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
        /// The handler's error.
        error: String,
    },
    /// The handler panicked on the record (an `unwrap` on an unexpected
    /// payload): counted and parked as a failure, the process goes on.
    #[error("record {sequence_number}/{sub_sequence}: handler panicked: {message}")]
    Panic {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
        /// The panic's message.
        message: String,
    },
    /// An earlier delivery of the batch died while it ran this record (its
    /// process ended: out of memory, an abort, a timeout): counted as a
    /// failed attempt, and parked with this error at `max_attempts`.
    #[error("record {sequence_number}/{sub_sequence}: an earlier delivery's process died in it")]
    ProcessDied {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
    },
    /// A tumbling window's action failed: the window is parked under this
    /// error once it failed `max_attempts` times.
    #[error("the action of the window starting {window_start} failed: {error}")]
    Window {
        /// The window's start (ms since the epoch).
        window_start: String,
        /// The action's error.
        error: String,
    },
    /// The record's effects were not written: a condition of one failed
    /// ([`stage_effect`](crate::processing::stage_effect)), and nothing of
    /// them was applied. Counted, retried and parked as a handler's error.
    #[error("record {sequence_number}/{sub_sequence}: its effects were not written: {error}")]
    Effect {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
        /// Why (the transaction's cancellation code for the effect).
        error: String,
    },
    /// Not attempted: the Lambda deadline was too close.
    #[error("record {sequence_number} not attempted: the deadline is too close")]
    Deadline {
        /// The record's sequence number.
        sequence_number: String,
    },
    /// The handler was still running at the stop-by instant and was given
    /// up (its work may be partly done; the record is delivered again).
    #[error("record {sequence_number}/{sub_sequence}: handler given up at the deadline")]
    Timeout {
        /// The record's sequence number.
        sequence_number: String,
        /// Its sub-sequence number.
        sub_sequence: u64,
    },
}

impl RecordError {
    /// A [`RecordError::Timeout`] of `record`.
    pub fn timeout(record: &crate::processing::StreamRecord) -> Self {
        RecordError::Timeout {
            sequence_number: record.sequence_number.to_string(),
            sub_sequence: record.sub_sequence,
        }
    }

    /// A [`RecordError::Panic`] of `record` with the panic's payload.
    pub(crate) fn panic(
        record: &crate::processing::StreamRecord,
        panic: &(dyn std::any::Any + Send),
    ) -> Self {
        RecordError::Panic {
            sequence_number: record.sequence_number.to_string(),
            sub_sequence: record.sub_sequence,
            message: crate::processing::panic::panic_message(panic),
        }
    }

    /// A [`RecordError::Payload`] of the record `seq` (a DynamoDB Streams
    /// record: no sub-sequence).
    pub fn payload(seq: &str, error: impl Into<String>) -> Self {
        RecordError::Payload {
            sequence_number: seq.to_owned(),
            sub_sequence: 0,
            error: error.into(),
        }
    }
}

/// A record reported back to the event source mapping for retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordFailure {
    /// The item identifier reported (the Kinesis sequence number).
    pub item_identifier: String,
    /// Why.
    pub error: RecordError,
}

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BatchReport {
    /// User records the handler processed successfully.
    pub processed: u64,
    /// User records skipped because the stored checkpoint already covers them.
    pub duplicates_skipped: u64,
    /// User records parked after too many attempts.
    pub parked: u64,
    /// Records reported back for retry, in order.
    pub failures: Vec<RecordFailure>,
    /// Records left for the retry without being attempted (after the first failure).
    pub not_attempted: u64,
    /// Checkpoints stored.
    pub checkpoints: u64,
    /// Records that were due to be parked but could not be (reported as
    /// failures instead).
    pub park_failures: u64,
    /// The arrival time (ms) of the newest record handled, when known.
    pub newest_arrival: Option<i64>,
    /// State-store operations that failed and were passed over: the batch
    /// went on without them instead of failing.
    pub state_errors: u64,
    /// True if the batch, or a part of it, ran without de-duplication (the
    /// state table failed, or the event names no stream): a retry may
    /// repeat its records.
    pub deduplication_off: bool,
    /// Payload bytes of the user records the handler processed.
    pub bytes_processed: u64,
    /// KPL aggregates in the event holding a user record whose partition
    /// key is not the aggregate's own (see the event source's
    /// `EventUnits::mixed_key_aggregates`): at a ParallelizationFactor above
    /// 1, their user keys' order is not kept.
    pub mixed_key_aggregates: u64,
    /// Effect items written with the batch's progress
    /// ([`stage_effect`](crate::processing::stage_effect)).
    pub effects_written: u64,
    /// How long each handler call took (ms).
    #[serde(skip)]
    pub handler_durations: crate::metrics::Distribution,
}
