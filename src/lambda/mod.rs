//! Event source mappings: Lambda invokes a function with a batch of a
//! stream's records, and the processors here run it through the processing
//! core ([`crate::processing`]) and answer with the records to retry. The
//! same handler runs under a shard worker or the DynamoDB Streams reader.
//!
//! - The processors: `processor` ([`KinesisProcessor`],
//!   [`DynamoDbProcessor`], [`BatchProcessor`]), `runtime` (the processor on
//!   the Lambda runtime API, each event read once from its bytes), `window`
//!   (tumbling windows, Kinesis and DynamoDB Streams).
//! - Events: `source` (an event kind: its units and what the mapping reads
//!   back), `kinesis`, `dynamodb`; `events` (`aws_lambda_events`' events and
//!   records in: `process_event`, `StreamRecord::from_kinesis_event_record`).
//! - Progress: `batch_progress` (where a batch keeps its progress, per
//!   consumer), `prefix` (the digests that say which records it covers).
//!
//! The example in [`crate::processing`] runs a typed handler under a
//! [`KinesisProcessor`].

mod batch_progress;
mod dynamodb;
mod events;
mod kinesis;
mod prefix;
mod processor;
mod runtime;
mod source;
mod summary;
mod window;

pub use dynamodb::DynamoDbStreams;
pub use kinesis::Kinesis;
pub use processor::{BatchProcessor, DynamoDbProcessor, KinesisProcessor};
pub use source::{EventSource, EventUnits};
pub use window::{
    DynamoDbWindowProcessor, KinesisWindowProcessor, WindowInfo, WindowProcessor, WindowSource,
    STATE_KEY,
};
