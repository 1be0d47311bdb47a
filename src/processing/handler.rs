//! The user's code: a handler for one record (or one typed payload), with
//! the lifecycle hooks a self-managed consumer calls.

use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::state::{Checkpoint, ShardId};
use serde::de::DeserializeOwned;
use std::future::Future;
use std::marker::PhantomData;

/// The error a handler returns: anything that can be shown.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Processes one record: the one user contract of every mode (an
/// event-source-mapped processor, a shard worker). Implemented for every
/// `Fn(StreamRecord) -> impl Future<Output = Result<(), E>>`, and by
/// [`json`] and [`crate::processing::changes`] for typed payloads.
///
/// The lifecycle hooks are called by a shard worker only (an event source
/// mapping holds no leases); each does nothing by default. They are
/// notifications: the worker checkpoints by itself, and a hook cannot
/// delay or refuse what happened.
pub trait RecordHandler: Send + Sync + 'static {
    /// Handles one record; an error fails the record.
    fn handle(&self, record: StreamRecord)
        -> impl Future<Output = Result<(), HandlerError>> + Send;

    /// `true` if the core hands this handler runs of records through
    /// [`RecordHandler::handle_batch`] (for bulk writes) instead of one
    /// record at a time through [`RecordHandler::handle`].
    const BATCHED: bool = false;

    /// Handles a run of consecutive records of one batch at once (records
    /// the stored position covers are left out), when [`Self::BATCHED`].
    /// Returns one result per record, in order; a shorter answer means the
    /// records after its end were not attempted (they are handed over again).
    /// Each failure is mapped back to its record: it counts an attempt and
    /// may be parked, as from `handle`. In the stop-at-first-failure mode
    /// the batch stops at the first failure that is not parked: the results
    /// after it are not counted, and those records are delivered again
    /// (their side effects may repeat; make bulk writes idempotent).
    ///
    /// The default calls `handle` for each record, stopping at the first
    /// failure.
    fn handle_batch(
        &self,
        records: Vec<StreamRecord>,
    ) -> impl Future<Output = Vec<Result<(), HandlerError>>> + Send {
        async move {
            let mut results = Vec::with_capacity(records.len());
            for record in records {
                let result = self.handle(record).await;
                let failed = result.is_err();
                results.push(result);
                if failed {
                    break;
                }
            }
            results
        }
    }

    /// `true` if the core calls [`RecordHandler::before_batch`] before a
    /// batch's records.
    const PREPARES: bool = false;

    /// Called once a batch, before any of its records is handled, with the
    /// batch's records that are ready for the handler (those the stored
    /// position covers among them), when [`Self::PREPARES`]: for a handler
    /// that reads what it needs for the whole batch at once (the
    /// idempotency adapter's `BatchGetItem`). It cannot fail a record: what
    /// it could not read is read again by the record's own call.
    fn before_batch(&self, records: &[&StreamRecord]) -> impl Future<Output = ()> + Send {
        let _ = records;
        async {}
    }

    /// The worker gained `shard` and will read it after `position` (`None`:
    /// nothing checkpointed yet, it starts at the initial position).
    fn shard_gained(
        &self,
        shard: &ShardId,
        position: Option<&Checkpoint>,
    ) -> impl Future<Output = ()> + Send {
        let _ = (shard, position);
        async {}
    }

    /// The worker no longer holds `shard`: its lease was taken, handed off
    /// to a claimant, or released. Records of it may still be in flight
    /// elsewhere; nothing more of it comes to this worker.
    fn lease_lost(&self, shard: &ShardId) -> impl Future<Output = ()> + Send {
        let _ = shard;
        async {}
    }

    /// `shard` is read to its end and completed: its children may now be
    /// leased (by this worker or another).
    fn shard_ended(&self, shard: &ShardId) -> impl Future<Output = ()> + Send {
        let _ = shard;
        async {}
    }

    /// The worker is stopping (deadline or stop signal): it checkpoints
    /// every shard and, by default, releases its leases after this returns.
    fn shutdown_requested(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

impl<F, Fut, E> RecordHandler for F
where
    F: Fn(StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    fn handle(
        &self,
        record: StreamRecord,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let fut = self(record);
        async move { fut.await.map_err(Into::into) }
    }
}

/// A handler of typed values (see [`json`] and [`crate::processing::changes`]):
/// `f(value, record)` with the value `D` decodes from each record, or the
/// record failed with the decoding error. The one typed adapter; its kinds
/// are named [`JsonHandler`] and [`crate::processing::ChangeHandler`].
pub struct TypedHandler<D, F> {
    f: F,
    _d: PhantomData<fn() -> D>,
}

impl<D, F> TypedHandler<D, F> {
    pub(crate) fn new(f: F) -> Self {
        TypedHandler { f, _d: PhantomData }
    }
}

/// How a typed handler reads its value from a record.
pub trait Decode: 'static {
    /// What the handler receives.
    type Value: Send;

    /// The value of `record`, or why it has none.
    fn decode(record: &StreamRecord) -> Result<Self::Value, RecordError>;
}

/// JSON payloads of type `T`.
pub struct Json<T>(PhantomData<fn() -> T>);

impl<T: DeserializeOwned + Send + 'static> Decode for Json<T> {
    type Value = T;

    fn decode(record: &StreamRecord) -> Result<T, RecordError> {
        record.json()
    }
}

/// A handler of JSON payloads of type `T` (see [`json`]).
pub type JsonHandler<T, F> = TypedHandler<Json<T>, F>;

/// Wraps `f(payload, record)` into a record handler that parses each payload
/// as JSON into `T` first; a payload that does not parse fails its record
/// with an error naming the sequence number and the serde error.
pub fn json<T, F, Fut, E>(f: F) -> JsonHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    TypedHandler::new(f)
}

impl<D, F, Fut, E> RecordHandler for TypedHandler<D, F>
where
    D: Decode,
    F: Fn(D::Value, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    fn handle(
        &self,
        record: StreamRecord,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let fut = D::decode(&record).map(|value| (self.f)(value, record));
        async move {
            match fut {
                Ok(fut) => fut.await.map_err(Into::into),
                Err(e) => Err(Box::new(e) as HandlerError),
            }
        }
    }
}
