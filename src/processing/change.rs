//! Typed item changes of a DynamoDB stream, and the handler adapter that
//! decodes them: one decoding path for the event-source-mapped processor and
//! the self-managed reader.

use crate::processing::handler::{call_typed, HandlerError, RecordHandler};
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use aws_lambda_events::event::dynamodb::EventRecord;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::marker::PhantomData;

/// A typed item change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<T> {
    /// A new item.
    Insert {
        /// The item as written.
        new: T,
    },
    /// A changed item (`old` needs the `NEW_AND_OLD_IMAGES` view type).
    Modify {
        /// The item before, if the stream carries it.
        old: Option<T>,
        /// The item after.
        new: T,
    },
    /// A deleted item (`old` needs an `OLD_IMAGE` or `NEW_AND_OLD_IMAGES` view type).
    Remove {
        /// The item before, if the stream carries it.
        old: Option<T>,
    },
}

/// Decodes one image (`which` is `old` or `new`) into `T`.
fn decode_image<T: DeserializeOwned>(
    item: impl Into<serde_dynamo::Item>,
    which: &str,
    seq: &str,
) -> Result<T, RecordError> {
    serde_dynamo::from_item(item)
        .map_err(|e| RecordError::payload(seq, format!("{which} image: {e}")))
}

fn image<T: DeserializeOwned>(
    item: &serde_dynamo::Item,
    which: &str,
    seq: &str,
) -> Result<Option<T>, RecordError> {
    if item.is_empty() {
        return Ok(None);
    }
    decode_image(item.clone(), which, seq).map(Some)
}

impl<T: DeserializeOwned> Change<T> {
    /// Decodes a stream record into a typed change.
    pub fn from_record(record: &EventRecord) -> Result<Self, RecordError> {
        let seq = record.change.sequence_number.as_deref().unwrap_or("");
        let old = image(&record.change.old_image, "old", seq)?;
        let new = image(&record.change.new_image, "new", seq)?;
        let view = format!("{:?}", record.change.stream_view_type);
        Change::from_images(&record.event_name, old, new, seq, &view)
    }
}

impl<T: DeserializeOwned> Change<T> {
    /// The change an event (`INSERT`, `MODIFY`, `REMOVE`) with these images
    /// (items as the DynamoDB SDK reads them) makes, decoded into `T`; an
    /// image that does not decode, or one the event needs and the stream's
    /// view type (`view`, for the message) left out, is an error naming `seq`.
    pub fn from_items<I: Into<serde_dynamo::Item>>(
        event_name: &str,
        old: Option<I>,
        new: Option<I>,
        seq: &str,
        view: &str,
    ) -> Result<Self, RecordError> {
        let old = old.map(|i| decode_image(i, "old", seq)).transpose()?;
        let new = new.map(|i| decode_image(i, "new", seq)).transpose()?;
        Change::from_images(event_name, old, new, seq, view)
    }
}

impl<T> Change<T> {
    fn from_images(
        event_name: &str,
        old: Option<T>,
        new: Option<T>,
        seq: &str,
        view: &str,
    ) -> Result<Self, RecordError> {
        let missing = |what: &str| {
            RecordError::payload(
                seq,
                format!("{event_name} has no {what} image (stream view type {view})"),
            )
        };
        match event_name {
            "INSERT" => Ok(Change::Insert {
                new: new.ok_or_else(|| missing("new"))?,
            }),
            "MODIFY" => Ok(Change::Modify {
                old,
                new: new.ok_or_else(|| missing("new"))?,
            }),
            "REMOVE" => Ok(Change::Remove { old }),
            other => Err(RecordError::payload(
                seq,
                format!("unknown event name {other:?}"),
            )),
        }
    }
}

/// A handler of typed DynamoDB Streams changes (see [`changes`]).
pub struct ChangeHandler<T, F> {
    f: F,
    _t: PhantomData<fn() -> T>,
}

/// Wraps `f(change, record)` into a record handler for DynamoDB Streams
/// batches: each record's images are decoded with `serde_dynamo` into `T`; a
/// record that does not decode fails with an error naming its sequence number.
/// `record.data` is the stream record's JSON, `record.partition_key` its keys.
pub fn changes<T, F, Fut, E>(f: F) -> ChangeHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Change<T>, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    ChangeHandler { f, _t: PhantomData }
}

impl<T, F, Fut, E> RecordHandler for ChangeHandler<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(Change<T>, StreamRecord) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<HandlerError>,
{
    fn handle(
        &self,
        record: StreamRecord,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let change = serde_json::from_slice::<EventRecord>(&record.data)
            .map_err(|e| RecordError::Malformed {
                index: 0,
                error: e.to_string(),
            })
            .and_then(|rec| Change::from_record(&rec));
        call_typed(&self.f, change, record)
    }
}
