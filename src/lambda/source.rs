//! Event sources: how an event's JSON becomes units of work, and what the
//! event source mapping reads back.

use crate::processing::outcome::BatchReport;
use crate::processing::unit::Unit;
use bytes::Bytes;
use std::sync::Arc;

/// One kind of event-source-mapping event.
pub trait EventSource: Send + Sync + 'static {
    /// What the handler returns to the event source mapping.
    type Response: serde::Serialize + Send + 'static;

    /// Reads the event, its JSON text as the runtime received it: where its
    /// records come from, and each record's item identifier and unit of
    /// work (records may keep slices of `event`, not copies). An error is
    /// for an event that is not UTF-8 JSON of this kind, or a record whose
    /// item identifier cannot be found.
    fn units(event: &Bytes) -> crate::Result<EventUnits>;

    /// The batch item failures of a report.
    fn response(report: &BatchReport) -> Self::Response;
}

/// An event read into units of work. An event-source-mapped batch holds
/// records of one shard of one stream.
#[derive(Debug, Clone)]
pub struct EventUnits {
    /// The stream's ARN (`eventSourceARN`), if the event gives it.
    pub stream: Option<String>,
    /// The shard (Kinesis: from `eventID`; DynamoDB Streams events do not
    /// name it).
    pub shard: Option<String>,
    /// Each record's item identifier (shared with its record's sequence
    /// number where they are the same text) and its unit.
    pub items: Vec<(Arc<str>, Unit)>,
    /// Where the event names no shard (DynamoDB Streams): each record's
    /// sequence number and event id, for those that have one (a record's
    /// event id is what names it in its stream then).
    pub event_ids: Vec<(Arc<str>, Arc<str>)>,
    /// KPL aggregates holding a user record whose partition key is not the
    /// aggregate's own: at a ParallelizationFactor above 1, Lambda lanes
    /// records by the aggregate's key, so one user key aggregated under two
    /// outer keys may run in two lanes at once, out of order (reported in
    /// the `MixedKeyAggregates` metric).
    pub mixed_key_aggregates: u64,
}

/// The sequence number of a record too malformed to read otherwise (what
/// its failure is reported as): `kinesis.sequenceNumber` of a Kinesis
/// record, `dynamodb.SequenceNumber` of a DynamoDB Streams one.
pub(crate) fn sequence_of_malformed(record: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct RecordId {
        #[serde(alias = "dynamodb")]
        kinesis: SequenceOnly,
    }
    #[derive(serde::Deserialize)]
    struct SequenceOnly {
        #[serde(rename = "sequenceNumber", alias = "SequenceNumber")]
        sequence_number: String,
    }
    serde_json::from_str::<RecordId>(record)
        .ok()
        .map(|id| id.kinesis.sequence_number)
}
