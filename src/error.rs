//! The one error of the crate's public functions.
//!
//! Every fallible public function returns [`Error`] (through [`Result`]).
//! Its variants keep the detail types as sources: [`StateError`] for the
//! state table and AWS calls, [`ConfigError`] for the environment,
//! [`StreamsError`] for DynamoDB Streams calls, [`RecordError`] for one
//! record. `?` turns each detail type into an [`Error`].
//!
//! Two kinds of public function speak a detail type instead, because a
//! caller handles it where it happens:
//! - decoders of one record or its parts: a record's decoders
//!   (`StreamRecord::json`, `ChangeRecord::change`, `Change::from_parts`, …)
//!   return [`RecordError`], which the core reports per record;
//!   `from_image_json` and `Keys` return serde's error, as `serde_json` does;
//!   `kpl::deaggregate` returns [`KplError`];
//! - the I/O seams a test or an adapter implements: `KinesisReads` returns
//!   `ReadError`, `StreamsClient` [`StreamsError`].

use crate::config::ConfigError;
#[cfg(feature = "ddb-streams")]
use crate::ddb_streams::StreamsError;
use crate::kpl::KplError;
use crate::processing::{HandlerError, RecordError};
use crate::state::StateError;

/// What a public function of this crate failed with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The state table, or an AWS call made through the state store's
    /// clients, failed. Its classes (lease lost, throttled, transient) are
    /// [`Error::is_lease_lost`], [`Error::is_throttled`] and
    /// [`Error::is_transient`].
    #[error(transparent)]
    State(#[from] StateError),
    /// A configuration variable is missing or malformed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The Lambda event cannot be read as a batch of this processor's
    /// source: not JSON, another kind of event, or a record whose sequence
    /// number cannot be found. Nothing of it was processed.
    #[error("the event cannot be read: {0}")]
    Event(String),
    /// The Lambda Runtime API failed (the process cannot get its next
    /// invocation or post an answer).
    #[error("the Lambda runtime failed: {0}")]
    Runtime(#[source] lambda_runtime::Error),
    #[cfg(feature = "ddb-streams")]
    /// A DynamoDB Streams call failed (throttling already retried
    /// `attempts` times).
    #[error("DynamoDB Streams {operation} failed after {attempts} attempt(s): {error}")]
    Streams {
        /// `DescribeStream`, `GetShardIterator` or `GetRecords`.
        operation: &'static str,
        /// Attempts made.
        attempts: u32,
        /// What failed.
        #[source]
        error: StreamsError,
    },
    /// Records of the shard were trimmed before they were read, and the
    /// reader is configured to stop (`OnTrimmed::Fail`) rather than restart
    /// at the trim horizon.
    #[error("shard {shard_id}: records after {position} were trimmed before they were read")]
    TrimmedData {
        /// The shard.
        shard_id: String,
        /// The position that could not be read from.
        position: String,
    },
    /// A record could not be read (an unknown attribute type or event name,
    /// no sequence number) or does not fit the replica (`Replica::apply`);
    /// the position does not move past it, and nothing of its batch was
    /// committed.
    #[error("shard {shard_id}: {error}")]
    Record {
        /// The shard.
        shard_id: String,
        /// What is wrong, naming the sequence number.
        #[source]
        error: RecordError,
    },
    /// The handler given to the DynamoDB Streams reader failed: the shard's
    /// records before it were committed.
    #[error("shard {shard_id}, record {sequence_number}: handler failed: {source}")]
    Handler {
        /// The shard.
        shard_id: String,
        /// The record the handler failed on.
        sequence_number: String,
        /// The handler's error.
        source: HandlerError,
    },
    /// An item of a table cannot be replicated (it lacks a key attribute).
    #[error("{reason}")]
    Item {
        /// What is wrong.
        reason: String,
    },
    /// A tumbling window's action at the window's end failed, or its state
    /// could not be encoded: the invocation fails and Lambda retries it.
    #[error("the window's {what} failed: {source}")]
    Window {
        /// `action` or `state`.
        what: &'static str,
        /// The action's or the encoder's error.
        source: HandlerError,
    },
    /// The operator's reset was refused; nothing was written.
    #[cfg(feature = "fleet")]
    #[error("reset refused: {0}")]
    ResetRefused(#[from] crate::group::ResetRefused),
    /// An event-source-mapped batch's first record failed (its failure is
    /// the lowest): the invocation fails as a whole, a function error, so
    /// Lambda retries the batch from that record whether or not the
    /// mapping has `ReportBatchItemFailures` (a mapping without it takes a
    /// response listing failures for a success, and drops the batch).
    #[error("the batch's first record {item_identifier} failed: {error}")]
    BatchFailed {
        /// The record's item identifier (its sequence number).
        item_identifier: String,
        /// Why it failed.
        error: RecordError,
    },
    /// A KPL aggregate could not be read.
    #[error(transparent)]
    Kpl(#[from] KplError),
}

/// A result whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The state store's error, when this is one.
    pub fn as_state(&self) -> Option<&StateError> {
        match self {
            Error::State(e) => Some(e),
            _ => None,
        }
    }

    /// `true` when the lease of the work was lost to another holder (a
    /// fenced write was refused): stop working on it, and do not retry.
    pub fn is_lease_lost(&self) -> bool {
        self.as_state().is_some_and(StateError::is_lease_lost)
    }

    /// `true` when a call was still throttled after its retries.
    pub fn is_throttled(&self) -> bool {
        match self {
            Error::State(e) => e.is_throttled(),
            #[cfg(feature = "ddb-streams")]
            Error::Streams { error, .. } => error.is_throttled(),
            _ => false,
        }
    }

    /// `true` when the same call may succeed if tried again later
    /// (throttling, timeouts, the service's own errors).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::State(e) => e.is_transient(),
            #[cfg(feature = "ddb-streams")]
            Error::Streams { error, .. } => error.is_transient(),
            _ => false,
        }
    }

    /// The name Lambda reports as the invocation's `errorType`.
    fn kind(&self) -> &'static str {
        match self {
            Error::State(_) => "State",
            Error::Config(_) => "Config",
            Error::Event(_) => "Event",
            Error::Runtime(_) => "Runtime",
            #[cfg(feature = "ddb-streams")]
            Error::Streams { .. } => "Streams",
            Error::TrimmedData { .. } => "TrimmedData",
            Error::Record { .. } => "Record",
            Error::Handler { .. } => "Handler",
            Error::Item { .. } => "Item",
            Error::Window { .. } => "Window",
            #[cfg(feature = "fleet")]
            Error::ResetRefused(_) => "ResetRefused",
            Error::BatchFailed { .. } => "BatchFailed",
            Error::Kpl(_) => "Kpl",
        }
    }
}

impl From<Error> for lambda_runtime::Diagnostic {
    /// The invocation error Lambda records: `errorType` is
    /// `shardkeeper::<variant>`, `errorMessage` the error with its causes.
    fn from(error: Error) -> Self {
        lambda_runtime::Diagnostic {
            error_type: format!("shardkeeper::{}", error.kind()),
            error_message: error.to_string(),
        }
    }
}
