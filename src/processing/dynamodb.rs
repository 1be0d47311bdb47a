//! DynamoDB Streams events: `DynamoDbEvent` in, typed changes to the
//! handler, `DynamoDbEventResponse` out.

use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::kinesis::RawEvent;
use crate::processing::outcome::{BatchReport, RecordError};
use crate::processing::record::StreamRecord;
use crate::processing::source::{EventSource, EventUnits};
use crate::processing::unit::Unit;
use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// DynamoDB Streams events (see [`crate::processing::DynamoDbProcessor`]).
///
/// The event does not say which stream shard a batch came from, so
/// de-duplication is per batch: the checkpoint is keyed by the batch's first
/// sequence number, which is what a whole-batch retry (timeout, crash)
/// starts from again; after a reported failure the mapping resumes at the
/// failed record and nothing before it comes back. These checkpoints expire
/// after two days (the stream keeps records for one).
#[derive(Debug, Clone, Copy)]
pub struct DynamoDbStreams;

#[derive(Deserialize)]
struct RecordId {
    dynamodb: SequenceOnly,
}

#[derive(Deserialize)]
struct SequenceOnly {
    #[serde(rename = "SequenceNumber")]
    sequence_number: String,
}

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

/// A record error naming the record's sequence number.
pub(crate) fn payload_error(seq: &str, error: String) -> RecordError {
    RecordError::Payload {
        sequence_number: seq.to_owned(),
        sub_sequence: 0,
        error,
    }
}

/// Decodes one image (`which` is `old` or `new`) into `T`.
pub(crate) fn decode_image<T: DeserializeOwned>(
    item: impl Into<serde_dynamo::Item>,
    which: &str,
    seq: &str,
) -> Result<T, RecordError> {
    serde_dynamo::from_item(item).map_err(|e| payload_error(seq, format!("{which} image: {e}")))
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

impl<T> Change<T> {
    /// The change an event (`INSERT`, `MODIFY`, `REMOVE`) with these decoded
    /// images makes; an image the event needs and the stream's view type
    /// (`view`, for the message) left out is an error naming `seq`.
    pub(crate) fn from_images(
        event_name: &str,
        old: Option<T>,
        new: Option<T>,
        seq: &str,
        view: &str,
    ) -> Result<Self, RecordError> {
        let missing = |what: &str| {
            payload_error(
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
            other => Err(payload_error(seq, format!("unknown event name {other:?}"))),
        }
    }
}

impl EventSource for DynamoDbStreams {
    type Response = DynamoDbEventResponse;

    fn units(event_json: &str) -> Result<EventUnits, String> {
        let event: RawEvent<'_> = serde_json::from_str(event_json)
            .map_err(|e| format!("not a DynamoDB Streams event: {e}"))?;
        let mut batch_key: Option<String> = None;
        let mut units = Vec::with_capacity(event.records.len());
        for (index, raw) in event.records.iter().enumerate() {
            let parsed = serde_json::from_str::<EventRecord>(raw.get())
                .map_err(|e| e.to_string())
                .and_then(|rec| match rec.change.sequence_number.clone() {
                    Some(seq) => Ok((rec, seq)),
                    None => Err("no SequenceNumber".to_owned()),
                });
            let (rec, seq) = match parsed {
                Ok(ok) => ok,
                Err(error) => {
                    let id: RecordId = serde_json::from_str(raw.get()).map_err(|_| {
                        format!("record {index} is malformed and has no sequence number: {error}")
                    })?;
                    let item = id.dynamodb.sequence_number;
                    let error = RecordError::Malformed { index, error };
                    units.push((item.clone(), Unit::Unreadable(item, error)));
                    continue;
                }
            };
            batch_key.get_or_insert_with(|| format!("batch.{seq}"));
            let record = StreamRecord {
                shard_id: Arc::from(""),
                sequence_number: seq.as_str().into(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: serde_json::to_string(&rec.change.keys)
                    .unwrap_or_default()
                    .into(),
                explicit_hash_key: None,
                data: Bytes::copy_from_slice(raw.get().as_bytes()),
                approximate_arrival: Some(
                    rec.change.approximate_creation_date_time.timestamp_millis(),
                ),
                event_source_arn: rec.event_source_arn.as_deref().map(Arc::from),
            };
            units.push((seq, Unit::Records(vec![record])));
        }
        Ok(EventUnits {
            scope: batch_key.unwrap_or_else(|| "batch.none".to_owned()),
            items: units,
        })
    }

    fn checkpoint_ttl() -> Option<Duration> {
        Some(Duration::from_secs(2 * 24 * 3600))
    }

    fn response(report: &BatchReport) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        for failure in &report.failures {
            let mut item = DynamoDbBatchItemFailure::default();
            item.item_identifier = Some(failure.item_identifier.clone());
            response.batch_item_failures.push(item);
        }
        response
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
        let fut = change.map(|change| (self.f)(change, record));
        async move {
            match fut {
                Ok(fut) => fut.await.map_err(Into::into),
                Err(e) => Err(Box::new(e) as HandlerError),
            }
        }
    }
}
