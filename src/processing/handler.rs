//! The user's code: a handler for one record (or one typed payload).

use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::marker::PhantomData;

/// The error a handler returns: anything that can be shown.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// Processes one record. Implemented for every
/// `Fn(StreamRecord) -> impl Future<Output = Result<(), E>>`.
pub trait RecordHandler: Send + Sync + 'static {
    /// Handles one record; an error fails the record.
    fn handle(&self, record: StreamRecord)
        -> impl Future<Output = Result<(), HandlerError>> + Send;
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

/// A handler of JSON payloads of type `T` (see [`json`]).
pub struct JsonHandler<T, F> {
    f: F,
    _t: PhantomData<fn() -> T>,
}

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
    JsonHandler { f, _t: PhantomData }
}

impl<T, F, Fut, E> RecordHandler for JsonHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    fn handle(
        &self,
        record: StreamRecord,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let parsed: Result<T, RecordError> = record.json();
        let fut = parsed.map(|payload| (self.f)(payload, record));
        async move {
            match fut {
                Ok(fut) => fut.await.map_err(Into::into),
                Err(e) => Err(Box::new(e) as HandlerError),
            }
        }
    }
}
