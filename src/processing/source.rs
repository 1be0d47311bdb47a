//! Event sources: how an event's JSON becomes units of work, and what the
//! event source mapping reads back.

use crate::processing::core::Unit;
use crate::processing::outcome::BatchReport;
use std::time::Duration;

/// One kind of event-source-mapping event.
pub trait EventSource: Send + Sync + 'static {
    /// What the handler returns to the event source mapping.
    type Response: serde::Serialize + Send + 'static;

    /// Reads the event: each record's item identifier and its unit of work.
    /// An error is for an event that is not of this kind, or a record whose
    /// item identifier cannot be found.
    #[doc(hidden)]
    fn units(event_json: &str) -> Result<Vec<(String, Unit)>, String>;

    /// How long checkpoints of this source live (`None`: for ever).
    fn checkpoint_ttl() -> Option<Duration>;

    /// The batch item failures of a report.
    fn response(report: &BatchReport) -> Self::Response;
}
