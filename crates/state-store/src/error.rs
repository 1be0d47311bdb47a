//! The one error type of the state store.

use std::fmt;

/// Everything that can go wrong in the state store.
///
/// Contention is not an error: a lost race for a free lease or a free enhanced
/// fan-out consumer is `Ok(None)` / `Ok(false)`. The one exception is
/// [`StateError::LeaseLost`]: a fenced write by a consumer that no longer holds
/// the lease, which the caller must act on (stop processing that shard).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The lease on this shard is no longer held by the caller (it was taken,
    /// handed off, released or removed): stop processing the shard.
    #[error("lease on shard {shard_id} lost: {reason}")]
    LeaseLost {
        /// The shard whose lease was lost.
        shard_id: String,
        /// What the stored lease looked like (owner and counter), for logs.
        reason: String,
    },
    /// The thing asked for does not exist in the state table.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked up.
        what: String,
    },
    /// Bad input: an invalid name, a malformed sequence number, an invalid option.
    #[error("invalid {field}: {reason}")]
    Validation {
        /// Which input was rejected.
        field: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// DynamoDB or Kinesis kept throttling past the configured number of attempts.
    #[error("{service} {operation} throttled after {attempts} attempts: {message}")]
    Throttled {
        /// `DynamoDB` or `Kinesis`.
        service: Service,
        /// The API operation, e.g. `UpdateItem`.
        operation: &'static str,
        /// How many attempts were made.
        attempts: u32,
        /// The last throttling message.
        message: String,
    },
    /// Any other error from DynamoDB or Kinesis (service error, network, timeout).
    #[error("{service} {operation} failed: {message}")]
    Sdk {
        /// `DynamoDB` or `Kinesis`.
        service: Service,
        /// The API operation, e.g. `UpdateItem`.
        operation: &'static str,
        /// The AWS error code, when the service sent one.
        code: Option<String>,
        /// The error message with its causes.
        message: String,
    },
    /// Kinesis refused to register another enhanced fan-out consumer
    /// (RegisterStreamConsumer's `LimitExceededException`, still there after
    /// the throttling retries): the stream has reached Kinesis' limit of 20
    /// enhanced fan-out consumers, counting every application's. Not
    /// transient: it lasts until consumers are deregistered or the pool is
    /// made smaller.
    #[error("Kinesis RegisterStreamConsumer refused after {attempts} attempts: the stream has reached Kinesis' limit of 20 enhanced fan-out consumers (or too many registrations run at once); lower SHARDKEEPER_EFO_POOL_SIZE or deregister other consumers of the stream: {message}")]
    EfoQuota {
        /// How many attempts were made.
        attempts: u32,
        /// The last refusal's message.
        message: String,
    },
    /// A KMS key the call needs cannot be used: the stream's encryption key
    /// for Kinesis, the function's for Lambda (`KMSDisabledException`,
    /// `KMSInvalidStateException`, `KMSAccessDeniedException`,
    /// `KMSNotFoundException`, `KMSOptInRequired`). Not transient: it lasts
    /// until the key or its policy is fixed.
    #[error("{service} {operation} failed: {} ({code}); fix the key or its key policy: {message}", kms_problem(*service, code))]
    KmsKey {
        /// `Kinesis` or `Lambda`.
        service: Service,
        /// The API operation, e.g. `GetRecords`.
        operation: &'static str,
        /// The AWS error code.
        code: String,
        /// The error message with its causes.
        message: String,
    },
    /// The state table exists but does not have the expected schema.
    #[error("table {table} has the wrong schema: {reason}")]
    WrongTableSchema {
        /// The table name.
        table: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The group's state was written by a newer version of the layout than
    /// this code reads: every function of the group must be upgraded first.
    #[error("the group's state has schema version {found}; this version reads up to {supported}: upgrade every function of the group")]
    NewerSchema {
        /// The stored version.
        found: u32,
        /// The newest this code reads.
        supported: u32,
    },
    /// The group's shard items are being moved to another bucket count (an
    /// operator's `spread`): start again once it has finished.
    #[error("the group's shard items are being moved from {from} to {to} buckets: start again once that has finished")]
    Respreading {
        /// The bucket count before.
        from: u16,
        /// The bucket count the items are moving to.
        to: u16,
    },
    /// The group's state on this table belongs to another stream of the same
    /// name (another account or region): it is left alone. Give this stream
    /// its own group (or table).
    #[error("the group's state belongs to stream {recorded}, not {found}: give this stream a group of its own")]
    OtherStream {
        /// The ARN the state was recorded for.
        recorded: String,
        /// The ARN of the stream this process reads.
        found: String,
    },
    /// Another process took this consumer id over (a newer session's
    /// heartbeat): this one must stop, and leave the leases to it.
    #[error("consumer {consumer} was taken over by another process")]
    Superseded {
        /// The consumer id.
        consumer: String,
    },
    /// The stored progress of an event-source-mapped batch moved since this
    /// delivery read or wrote it (another delivery of the batch wrote it):
    /// nothing of the write, nor of the effects with it, was applied. The
    /// batch runs again from what is stored.
    #[error("the progress of batch {key} moved since it was read: another delivery wrote it")]
    ProgressMoved {
        /// The batch's sort key.
        key: String,
    },
    /// A stored item could not be decoded (written by another tool or version).
    #[error("stored item {key} is malformed: {reason}")]
    Corrupt {
        /// The sort key of the item.
        key: String,
        /// What could not be decoded.
        reason: String,
    },
    /// Waiting for the table to become ACTIVE took longer than allowed.
    #[error("table {table} is not ACTIVE after {waited_ms} ms (status {status})")]
    TableNotActive {
        /// The table name.
        table: String,
        /// The last status seen.
        status: String,
        /// How long the store waited.
        waited_ms: u64,
    },
    /// A newly registered enhanced fan-out consumer did not become ACTIVE in time.
    #[error("EFO consumer {name} is not ACTIVE after {waited_ms} ms (status {status})")]
    EfoNotActive {
        /// The consumer name.
        name: String,
        /// The last status seen.
        status: String,
        /// How long it was waited for.
        waited_ms: u64,
    },
    /// The store was stopped with [`crate::StateStore::stop`].
    #[error("the state store was stopped")]
    Stopped,
}

/// Which AWS service an error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Amazon DynamoDB.
    DynamoDb,
    /// Amazon Kinesis Data Streams.
    Kinesis,
    /// AWS Lambda (starting shard workers).
    Lambda,
}

impl fmt::Display for Service {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Service::DynamoDb => "DynamoDB",
            Service::Kinesis => "Kinesis",
            Service::Lambda => "Lambda",
        })
    }
}

/// What is wrong with the KMS key of a [`StateError::KmsKey`], in words.
fn kms_problem(service: Service, code: &str) -> String {
    let key = match service {
        Service::Kinesis => "the stream's KMS key",
        Service::Lambda => "the function's KMS key",
        Service::DynamoDb => "the table's KMS key",
    };
    match code {
        "KMSDisabledException" => format!("{key} is disabled"),
        "KMSInvalidStateException" => format!("{key} is not in a state that allows its use"),
        "KMSAccessDeniedException" => format!("{key} may not be used by this role"),
        "KMSNotFoundException" => format!("{key} was not found"),
        "KMSOptInRequired" => format!("{key} cannot be used: the account is not subscribed to KMS"),
        _ => format!("{key} cannot be used"),
    }
}

impl StateError {
    /// A [`StateError::Validation`] of `field`.
    pub fn validation(field: &'static str, reason: impl Into<String>) -> Self {
        StateError::Validation {
            field,
            reason: reason.into(),
        }
    }

    /// A [`StateError::NotFound`] of `what`.
    pub fn not_found(what: impl Into<String>) -> Self {
        StateError::NotFound { what: what.into() }
    }

    /// `true` for [`StateError::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StateError::LeaseLost { .. })
    }

    /// `true` for [`StateError::Throttled`].
    pub fn is_throttled(&self) -> bool {
        matches!(self, StateError::Throttled { .. })
    }

    /// `true` when the same call may succeed later unchanged: throttling
    /// that outlasted the retries, an AWS internal error or unavailable
    /// service, a resource busy for a moment (see
    /// [`crate::is_transient_code`]), and failures with no AWS answer at all
    /// (connection refused or dropped, timeouts). A failure without an AWS
    /// code that no retry passes (a request the SDK could not build or the
    /// connector refused, a 4xx answer naming no error) carries the code
    /// [`crate::REFUSED_WITHOUT_CODE`] and is not transient. A missing table, a wrong
    /// schema, bad input, a denied call, an unusable KMS key, the quota of
    /// enhanced fan-out consumers or a lost lease are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            StateError::Throttled { .. } => true,
            StateError::Sdk { code: None, .. } => true,
            StateError::Sdk {
                service,
                operation,
                code: Some(code),
                ..
            } => crate::retry::is_transient_code(*service, operation, code),
            _ => false,
        }
    }
}

/// The state store's result type.
pub type Result<T, E = StateError> = std::result::Result<T, E>;
