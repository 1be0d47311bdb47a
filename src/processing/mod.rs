//! Record processing: users write a [`RecordHandler`] for one record (or one
//! typed payload, or one typed item change, or a run of records at once)
//! and get the stream semantics from the processing [`Core`]: order,
//! checkpoint de-duplication, bounded retries, parking, a stop-by instant,
//! progress. Every mode runs the core: the event-source-mapped processors
//! here ([`KinesisProcessor`], [`DynamoDbProcessor`], which also
//! de-aggregate KPL records), the shard worker
//! ([`crate::consumer::ShardWorker`]) and the DynamoDB Streams reader
//! ([`crate::ddb_streams::StreamReader`]); each supplies its units and a
//! [`CheckpointSink`].
//!
//! - The core: `core` (the loop, and the batch in progress), `sink` (where a
//!   mode keeps its positions, as the core sees it), `unit` (a record as the
//!   core receives it, a record the DynamoDB Streams reader read handed over
//!   decoded).
//! - The user contract: `handler` (the trait, `json`), `change` (typed
//!   DynamoDB changes), `change_text` (a change read from a record's JSON
//!   text in one pass), `keys` (a changed item's keys), `image` (DynamoDB
//!   images, as JSON text or SDK attribute values, decoded into a type),
//!   `number` (its numbers, read exactly),
//!   `record`, `outcome` (reports and record errors), `options`, `parking`.
//! - Event source mappings: `processor` (the Lambda handler),
//!   `batch_progress` (where a batch keeps its progress, per consumer),
//!   `prefix` (the digests that say which records it covers), `runtime`
//!   (the processor on the Lambda runtime API, each event read once from
//!   its bytes), `source` (an event kind), `kinesis`, `dynamodb`, `window` (tumbling windows),
//!   `scan` (the fields of event text found without parsing),
//!   `scan_checked` (a DynamoDB Streams event's records found in the pass
//!   that checks its JSON).
//!
//! ```no_run
//! # #![recursion_limit = "256"]
//! use shardkeeper::processing::{json, KinesisProcessor, StreamRecord};
//! use shardkeeper::state::{StateStore, StoreConfig};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String, amount_cents: u64 }
//!
//! # async fn run() -> Result<(), lambda_runtime::Error> {
//! let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let store = StateStore::new(aws_sdk_dynamodb::Client::new(&aws), StoreConfig::new("billing", "orders")?);
//! let processor = KinesisProcessor::new(json(|order: Order, record: StreamRecord| async move {
//!     println!("{} from {}: {} cents", order.order_id, record.sequence_number, order.amount_cents);
//!     Ok::<(), std::io::Error>(())
//! }))
//! .with_store(store);
//! // Each event is read once, from the bytes the runtime receives:
//! processor.run().await
//! // The processor is also a tower service; a closure works as well (after
//! // the runtime's own pass over the event):
//! // lambda_runtime::run(service_fn(|event: LambdaEvent<Box<RawValue>>| processor.handle(event))).await
//! # }
//! ```

mod batch_progress;
mod change;
mod change_text;
mod core;
mod dynamodb;
mod handler;
mod image;
mod keys;
mod kinesis;
mod number;
mod options;
mod outcome;
mod parking;
mod prefix;
mod processor;
mod record;
mod runtime;
mod scan;
mod scan_checked;
mod sink;
mod source;
mod unit;
mod window;

pub use change::{changes, is_ttl_deletion, Change, ChangeHandler, ChangeParts};
pub use core::Core;
pub(crate) use core::Ran;
pub use dynamodb::DynamoDbStreams;
pub use handler::{json, HandlerError, JsonHandler, RecordHandler};
pub use image::from_image_json;
pub use keys::Keys;
pub use kinesis::Kinesis;
pub use options::{FailureMode, Parking, ProcessingOptions};
pub use outcome::{BatchReport, RecordError, RecordFailure};
pub use processor::{BatchProcessor, DynamoDbProcessor, KinesisProcessor};
pub use record::StreamRecord;
pub use sink::{CheckpointSink, NoCheckpoints};
pub use source::{EventSource, EventUnits};
pub use unit::Unit;
pub use window::{KinesisWindowProcessor, WindowInfo, STATE_KEY};
