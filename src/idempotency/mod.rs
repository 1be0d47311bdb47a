//! Idempotency by content: a record whose key (a function of its payload)
//! was completed before is not handled again, whatever its position. It
//! catches what position de-duplication cannot: a producer's retry that
//! wrote the same payload under a new sequence number (docs/PROCESSING.md,
//! "Idempotency by content").
//!
//! - [`idempotent`] wraps a handler; its builder chooses the [`Claim`], the
//!   expiry, the payload validation and what a repeat does.
//! - `table`: where entries live ([`IdempotencyTable`]) and their I/O.
//! - `entry`: an entry as read; `known`: what this process knows of
//!   entries; `adapter`: the handler that decides; `error`: why a record
//!   failed.
//!
//! ```no_run
//! use shardkeeper::idempotency::{idempotent, Claim, IdempotencyTable};
//! use shardkeeper::processing::StreamRecord;
//! use shardkeeper::state::{StateStore, StoreConfig};
//! use shardkeeper::KinesisProcessor;
//!
//! #[derive(serde::Deserialize)]
//! struct Payment { payment_id: String, cents: u64 }
//!
//! # async fn run() -> Result<(), shardkeeper::Error> {
//! let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let store = StateStore::new(aws_sdk_dynamodb::Client::new(&aws), StoreConfig::new("billing", "payments")?);
//! let handler = idempotent(
//!     IdempotencyTable::in_state(&store),
//!     |record: &StreamRecord| record.json::<Payment>().ok().map(|p| p.payment_id),
//!     |record: StreamRecord| async move {
//!         let payment: Payment = record.json()?;
//!         // ... charge it ...
//!         Ok::<u64, shardkeeper::processing::RecordError>(payment.cents)
//!     },
//! )
//! .claim(Claim::AtCompletion)
//! .validate(|record: &StreamRecord| record.data.to_vec());
//! KinesisProcessor::new(handler).with_store(store).run().await
//! # }
//! ```

mod adapter;
mod entry;
mod error;
mod known;
mod table;

pub use error::IdempotencyError;
pub use table::IdempotencyTable;

use crate::processing::StreamRecord;
use known::Known;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// How a record's key is held against a duplicate handled at the same time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Claim {
    /// Claimed in progress before the call (one conditional write), until
    /// the invocation's deadline: a duplicate at the same time elsewhere
    /// waits for it to finish (when it can within its own time) or fails
    /// with [`IdempotencyError::InProgress`]; the handler never runs twice
    /// at once. Then completed (a second write). Lambda Powertools'
    /// protocol: two writes a record.
    #[default]
    BeforeRun,
    /// Not claimed: the batch's keys are read in `BatchGetItem`s before its
    /// records, and the completion is written on condition that none was
    /// (one write a record). Two duplicates handled at the same moment, on
    /// two shards or two lanes, may both run; one completion is written.
    /// Staged with [`crate::processing::stage_effect`] effects, the other's
    /// transaction is refused and its effects are never applied, so the
    /// effects are applied once.
    AtCompletion,
}

/// How long a completion is kept by default: an hour, as Powertools.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(3600);

/// The key of a record, or `None`.
type KeyFn = dyn Fn(&StreamRecord) -> Option<String> + Send + Sync;
/// The bytes of a record that are validated.
type ValidateFn = dyn Fn(&StreamRecord) -> Vec<u8> + Send + Sync;
/// What a repeat does with the stored result.
type RepeatFn<T> = dyn Fn(&StreamRecord, T) + Send + Sync;

/// A handler made idempotent by content (see [`idempotent`]).
pub struct Idempotent<F, T> {
    table: IdempotencyTable,
    key: Arc<KeyFn>,
    handler: F,
    claim: Claim,
    expires: Duration,
    validate: Option<Arc<ValidateFn>>,
    on_repeat: Option<Arc<RepeatFn<T>>>,
    known: Known,
    _result: PhantomData<fn() -> T>,
}

/// Wraps `handler` (`f(record)` returning `Result<T, E>`, `T` any
/// serde result, `()` for none) so that a record whose `key` was completed
/// within the expiry is not handled again: the handler's result stored then
/// is handed to [`Idempotent::on_repeat`] instead. A record `key` finds no
/// key in fails with [`IdempotencyError::NoKey`].
pub fn idempotent<K, F, Fut, T, E>(table: IdempotencyTable, key: K, handler: F) -> Idempotent<F, T>
where
    K: Fn(&StreamRecord) -> Option<String> + Send + Sync + 'static,
    F: Fn(StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send,
    T: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
    E: Into<crate::processing::HandlerError>,
{
    Idempotent {
        table,
        key: Arc::new(key),
        handler,
        claim: Claim::default(),
        expires: DEFAULT_EXPIRY,
        validate: None,
        on_repeat: None,
        known: Known::default(),
        _result: PhantomData,
    }
}

impl<F, T> Idempotent<F, T> {
    /// How a key is held against a duplicate handled at the same time
    /// (default [`Claim::BeforeRun`]).
    pub fn claim(mut self, claim: Claim) -> Self {
        self.claim = claim;
        self
    }

    /// How long a completion keeps a key's duplicates from running (default
    /// [`DEFAULT_EXPIRY`]).
    pub fn expires_after(mut self, expiry: Duration) -> Self {
        self.expires = expiry;
        self
    }

    /// Validates a repeat: the SHA-256 of `part(record)` is stored with the
    /// completion, and a repeat whose part hashes otherwise fails with
    /// [`IdempotencyError::PayloadMismatch`] (a key reused for another
    /// payload is a bug to see, not a duplicate to drop).
    pub fn validate(
        mut self,
        part: impl Fn(&StreamRecord) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.validate = Some(Arc::new(part));
        self
    }

    /// Called with a repeat and the result stored by its first completion
    /// (by default a repeat does nothing).
    pub fn on_repeat(mut self, f: impl Fn(&StreamRecord, T) + Send + Sync + 'static) -> Self {
        self.on_repeat = Some(Arc::new(f));
        self
    }
}
