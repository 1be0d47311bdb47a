//! The errors of DynamoDB Streams calls, by what the caller does about them.

use crate::state::{is_server_fault_code, is_throttling_code};

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

    /// `true` when the same call may succeed later: throttling, an expired
    /// iterator (take a new one), the service's own failures, and failures
    /// with no AWS answer at all.
    pub fn is_transient(&self) -> bool {
        match self {
            StreamsError::Throttled(_) | StreamsError::ExpiredIterator(_) => true,
            StreamsError::Other { code: None, .. } => true,
            StreamsError::Other {
                code: Some(code), ..
            } => is_server_fault_code(code),
            _ => false,
        }
    }
}
