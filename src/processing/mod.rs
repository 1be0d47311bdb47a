//! Record processing for event-source-mapped handlers: users write a handler
//! for one record and get the stream semantics (order, de-duplication,
//! bounded retries, parking, deadline, de-aggregation) from the processor.

mod handler;
mod kinesis;
mod options;
mod outcome;
mod parking;
mod record;

pub use handler::{json, HandlerError, JsonHandler, RecordHandler};
pub use kinesis::KinesisProcessor;
pub use options::{FailureMode, Parking, ProcessingOptions};
pub use outcome::{BatchReport, RecordError, RecordFailure};
pub use record::StreamRecord;
