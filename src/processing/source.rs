//! Event sources: how an event's JSON becomes units of work, and what the
//! event source mapping reads back.

use crate::processing::outcome::BatchReport;
use crate::processing::unit::Unit;
use std::time::Duration;

/// One kind of event-source-mapping event.
pub trait EventSource: Send + Sync + 'static {
    /// What the handler returns to the event source mapping.
    type Response: serde::Serialize + Send + 'static;

    /// Reads the event: its checkpoint scope, and each record's item
    /// identifier and unit of work. An error is for an event that is not of
    /// this kind, or a record whose item identifier cannot be found.
    fn units(event_json: &str) -> Result<EventUnits, String>;

    /// How long checkpoints of this source live (`None`: for ever).
    fn checkpoint_ttl() -> Option<Duration>;

    /// The batch item failures of a report.
    fn response(report: &BatchReport) -> Self::Response;
}

/// An event read into units of work.
#[derive(Debug, Clone)]
pub struct EventUnits {
    /// The key its checkpoint and attempts are kept under: the shard for
    /// Kinesis, the batch's first sequence number for DynamoDB Streams
    /// (whose events do not name the shard).
    pub scope: String,
    /// Each record's item identifier and its unit.
    pub items: Vec<(String, Unit)>,
}
