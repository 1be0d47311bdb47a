//! Why an idempotent record failed.

use crate::state::StateError;

/// Why the idempotency adapter failed a record (the record's
/// [`HandlerError`](crate::processing::HandlerError) is this, boxed; it is
/// counted, retried and parked at its limit, as any handler error is).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdempotencyError {
    /// The key function found no idempotency key in the record.
    #[error("record {sequence_number}: no idempotency key in it")]
    NoKey {
        /// The record's sequence number.
        sequence_number: String,
    },
    /// A record with this key was completed with another payload (the hash
    /// of the validated part differs).
    #[error("idempotency key {key:?}: completed before with another payload")]
    PayloadMismatch {
        /// The idempotency key.
        key: String,
    },
    /// A call elsewhere holds this key in progress, past this invocation's
    /// time (a call that finishes sooner is waited for).
    #[error("idempotency key {key:?}: in progress elsewhere until {until_ms} (epoch ms)")]
    InProgress {
        /// The idempotency key.
        key: String,
        /// Until when the other call's claim holds.
        until_ms: u64,
    },
    /// The result stored for this key does not read as the handler's
    /// result type (the type changed since it was stored).
    #[error("idempotency key {key:?}: the stored result does not read: {error}")]
    StoredResult {
        /// The idempotency key.
        key: String,
        /// The decoding error.
        error: String,
    },
    /// The handler's result does not write as JSON.
    #[error("idempotency key {key:?}: the result does not write as JSON: {error}")]
    Result {
        /// The idempotency key.
        key: String,
        /// The encoding error.
        error: String,
    },
    /// The completion could not be staged with the record's effects (they
    /// fill the transaction).
    #[error("idempotency key {key:?}: {error}")]
    Effect {
        /// The idempotency key.
        key: String,
        /// Why staging failed.
        error: crate::processing::EffectError,
    },
    /// The table could not be read or written.
    #[error("idempotency table: {0}")]
    Table(#[from] StateError),
}
