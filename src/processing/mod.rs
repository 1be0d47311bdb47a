//! Record processing for event-source-mapped handlers: users write a handler
//! for one record (or one typed payload, or one typed item change) and get
//! the stream semantics from the processor: order, checkpoint
//! de-duplication, bounded retries, parking, the deadline, KPL de-aggregation.

mod core;
mod dynamodb;
mod handler;
mod kinesis;
mod options;
mod outcome;
mod parking;
mod processor;
mod record;
mod source;
mod window;

pub use dynamodb::{changes, Change, ChangeHandler, DynamoDbStreams};
pub use handler::{json, HandlerError, JsonHandler, RecordHandler};
pub use kinesis::Kinesis;
pub use options::{FailureMode, Parking, ProcessingOptions};
pub use outcome::{BatchReport, RecordError, RecordFailure};
pub use processor::{BatchProcessor, DynamoDbProcessor, KinesisProcessor};
pub use record::StreamRecord;
pub use source::EventSource;
pub use window::{KinesisWindowProcessor, WindowInfo, STATE_KEY};
