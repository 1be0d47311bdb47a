//! The CLI's errors.

use shardkeeper::group::ResetRefused;
use shardkeeper::state::StateError;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The state store failed (or a name was invalid).
    #[error(transparent)]
    State(#[from] StateError),
    /// The reset was refused; nothing was written.
    #[error("reset refused: {0}")]
    Refused(#[from] ResetRefused),
    /// An argument could not be understood.
    #[error("bad argument {name}: {message}")]
    BadArgument {
        /// The argument.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A spread was refused while consumers are live; nothing was written.
    #[error("spread refused: {0}")]
    SpreadRefused(String),
    /// A KCL application still renews or takes leases in the table to
    /// import (these lease keys moved while watched); nothing was written.
    #[error("the KCL application still renews leases ({}): stop it, then import", .0.join(", "))]
    KclRunning(Vec<String>),
    /// A backfill was refused; nothing was written.
    #[error("backfill refused: {0}")]
    BackfillRefused(String),
    /// The operator did not confirm.
    #[error("not confirmed: nothing was changed")]
    NotConfirmed,
    /// Amazon S3 failed (reading a destination's objects).
    #[error("S3 {operation}: {message}")]
    S3 {
        /// The API operation.
        operation: &'static str,
        /// The error, with its code when S3 sent one.
        message: String,
    },
    /// Terminal or file I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Anything else the library failed with.
    #[error(transparent)]
    Library(shardkeeper::Error),
}

impl From<shardkeeper::Error> for Error {
    /// The library's state and refusal errors as the CLI's own kinds, so a
    /// script matches one name whichever call failed.
    fn from(e: shardkeeper::Error) -> Self {
        match e {
            shardkeeper::Error::State(e) => Error::State(e),
            shardkeeper::Error::ResetRefused(r) => Error::Refused(r),
            other => Error::Library(other),
        }
    }
}

impl Error {
    pub(crate) fn bad(name: &'static str, message: impl Into<String>) -> Self {
        Error::BadArgument {
            name,
            message: message.into(),
        }
    }
}
