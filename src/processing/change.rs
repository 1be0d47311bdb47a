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
    /// A new item. With the `KEYS_ONLY` and `OLD_IMAGE` view types the
    /// stream carries no new image: `new` is decoded from the item's keys
    /// (use a `T` whose other fields are optional).
    Insert {
        /// The item as written.
        new: T,
    },
    /// A changed item (`old` needs the `NEW_AND_OLD_IMAGES` or `OLD_IMAGE`
    /// view type; `new` is decoded from the keys as for `Insert` when the
    /// view type carries no new image).
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
        /// True if DynamoDB's time to live removed it (the record's user
        /// identity is the service `dynamodb.amazonaws.com`), not a caller.
        expired: bool,
    },
}

/// One stream record's parts, as an event source mapping's event and the
/// DynamoDB Streams API both give them: what [`Change::from_parts`] decodes.
#[derive(Debug, Clone)]
pub struct ChangeParts<'a, I> {
    /// `INSERT`, `MODIFY` or `REMOVE`.
    pub event_name: &'a str,
    /// The record's sequence number (for errors).
    pub sequence_number: &'a str,
    /// The stream's view type (`KEYS_ONLY`, `NEW_IMAGE`, `OLD_IMAGE`,
    /// `NEW_AND_OLD_IMAGES`), if the record names it.
    pub view: Option<&'a str>,
    /// The item's key attributes.
    pub keys: Option<I>,
    /// The item before the change.
    pub old: Option<I>,
    /// The item after the change.
    pub new: Option<I>,
    /// Removed by DynamoDB's time to live.
    pub expired: bool,
}

/// True for the user identity DynamoDB gives a deletion by time to live.
pub fn is_ttl_deletion(identity_type: &str, principal: &str) -> bool {
    identity_type == "Service" && principal == "dynamodb.amazonaws.com"
}

/// Decodes one image (`which` is `old`, `new` or `keys`) into `T`.
fn decode_image<T: DeserializeOwned>(
    item: impl Into<serde_dynamo::Item>,
    which: &str,
    seq: &str,
) -> Result<T, RecordError> {
    serde_dynamo::from_item(item)
        .map_err(|e| RecordError::payload(seq, format!("{which} image: {e}")))
}

fn non_empty(item: &serde_dynamo::Item) -> Option<serde_dynamo::Item> {
    (!item.is_empty()).then(|| item.clone())
}

impl<T: DeserializeOwned> Change<T> {
    /// Decodes an event source mapping's stream record into a typed change.
    pub fn from_record(record: &EventRecord) -> Result<Self, RecordError> {
        let view = record
            .change
            .stream_view_type
            .as_ref()
            .map(|v| v.to_string());
        let expired = record
            .user_identity
            .as_ref()
            .is_some_and(|u| is_ttl_deletion(&u.type_, &u.principal_id));
        Change::from_parts(ChangeParts {
            event_name: &record.event_name,
            sequence_number: record.change.sequence_number.as_deref().unwrap_or(""),
            view: view.as_deref(),
            keys: non_empty(&record.change.keys),
            old: non_empty(&record.change.old_image),
            new: non_empty(&record.change.new_image),
            expired,
        })
    }

    /// The change a record makes, decoded into `T`; an image that does not
    /// decode, or one the event needs and the stream's view type left out
    /// (and the keys cannot stand in for), is an error naming the record.
    pub fn from_parts<I: Into<serde_dynamo::Item>>(
        parts: ChangeParts<'_, I>,
    ) -> Result<Self, RecordError> {
        let seq = parts.sequence_number;
        let view = parts.view.unwrap_or("unknown");
        let old = parts.old.map(|i| decode_image(i, "old", seq)).transpose()?;
        let new = match parts.new {
            Some(i) => Some(decode_image(i, "new", seq)?),
            // The view type carries no new image: the keys stand in for it.
            None if matches!(view, "KEYS_ONLY" | "OLD_IMAGE") && parts.event_name != "REMOVE" => {
                match parts.keys {
                    Some(keys) => Some(decode_image(keys, "new (from the keys)", seq)?),
                    None => None,
                }
            }
            None => None,
        };
        let missing = |what: &str| {
            RecordError::payload(
                seq,
                format!(
                    "{} has no {what} image (stream view type {view})",
                    parts.event_name
                ),
            )
        };
        match parts.event_name {
            "INSERT" => Ok(Change::Insert {
                new: new.ok_or_else(|| missing("new"))?,
            }),
            "MODIFY" => Ok(Change::Modify {
                old,
                new: new.ok_or_else(|| missing("new"))?,
            }),
            "REMOVE" => Ok(Change::Remove {
                old,
                expired: parts.expired,
            }),
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
