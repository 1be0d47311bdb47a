//! The errors of DynamoDB Streams calls and of the reader.

use crate::processing::{HandlerError, RecordError};
use crate::state::{is_throttling_code, StateError};

/// A failed DynamoDB Streams call, by what the caller does about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamsError {
    /// The shard iterator is older than 15 minutes (`ExpiredIteratorException`):
    /// get a new one at the last sequence number read.
    #[error("expired iterator: {0}")]
    ExpiredIterator(String),
    /// The position asked for is behind the stream's 24-hour trim horizon
    /// (`TrimmedDataAccessException`): those records are gone.
    #[error("trimmed data: {0}")]
    TrimmedData(String),
    /// Slow down (`LimitExceededException` and the other throttling codes).
    #[error("throttled: {0}")]
    Throttled(String),
    /// The stream or shard does not exist (`ResourceNotFoundException`).
    #[error("resource not found: {0}")]
    ResourceNotFound(String),
    /// Anything else (service error, network, timeout).
    #[error("{}: {message}", code.as_deref().unwrap_or("error"))]
    Other {
        /// The AWS error code, when the service sent one.
        code: Option<String>,
        /// The error message with its causes.
        message: String,
    },
}

impl StreamsError {
    /// Classifies an AWS error code.
    pub fn from_code(code: Option<&str>, message: impl Into<String>) -> Self {
        let message = message.into();
        match code {
            Some("ExpiredIteratorException") => StreamsError::ExpiredIterator(message),
            Some("TrimmedDataAccessException") => StreamsError::TrimmedData(message),
            Some("ResourceNotFoundException") => StreamsError::ResourceNotFound(message),
            Some(c) if is_throttling_code(c) => StreamsError::Throttled(message),
            _ => StreamsError::Other {
                code: code.map(str::to_owned),
                message,
            },
        }
    }

    /// `true` for [`StreamsError::Throttled`].
    pub fn is_throttled(&self) -> bool {
        matches!(self, StreamsError::Throttled(_))
    }
}

/// Everything that can go wrong while reading a DynamoDB stream.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaderError {
    /// A DynamoDB Streams call failed (throttling already retried `attempts` times).
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
    /// no sequence number) or does not fit the replica; the position does not
    /// move past it.
    #[error("shard {shard_id}: {error}")]
    Record {
        /// The shard.
        shard_id: String,
        /// What is wrong, naming the sequence number.
        #[source]
        error: RecordError,
    },
    /// The handler given to `poll` failed: the shard's records before it
    /// were committed. (From `Replica::catch_up`: a change could not be
    /// applied, and nothing of its batch was committed.)
    #[error("shard {shard_id}, record {sequence_number}: handler failed: {source}")]
    Handler {
        /// The shard.
        shard_id: String,
        /// The record the handler failed on.
        sequence_number: String,
        /// The handler's error.
        source: HandlerError,
    },
    /// An item of the table cannot be replicated (it lacks a key attribute).
    #[error("{reason}")]
    Item {
        /// What is wrong.
        reason: String,
    },
    /// The state store (positions) or DynamoDB (the replica's table) failed.
    #[error(transparent)]
    State(#[from] StateError),
}

impl ReaderError {
    /// `true` when a DynamoDB Streams call was still throttled after the retries.
    pub fn is_throttled(&self) -> bool {
        matches!(self, ReaderError::Streams { error, .. } if error.is_throttled())
    }
}
