//! Record processing: users write a [`RecordHandler`] for one record (or one
//! typed payload, or one typed item change, or a run of records at once)
//! and get the stream semantics from the processing [`Core`]: order,
//! checkpoint de-duplication, bounded retries, parking, a stop-by instant,
//! progress. Every mode runs the core: the event-source-mapped processors
//! ([`crate::lambda`]), the shard worker ([`crate::consumer::ShardWorker`])
//! and the DynamoDB Streams reader ([`crate::ddb_streams::StreamReader`]);
//! each supplies its units and a [`CheckpointSink`].
//!
//! - The core: `core` (the loop, and the batch in progress), `sink` (where a
//!   mode keeps its positions, as the core sees it), `unit` (a record as the
//!   core receives it, a record the DynamoDB Streams reader read handed over
//!   decoded).
//! - `base64`: the payloads' encoding, with errors that say what is wrong.
//! - The user contract: `handler` (the trait, `json`), `record`, `context`
//!   (the invocation a handler call runs in), `handler_metrics` (a
//!   handler's own metrics in the invocation's EMF document), `labels` (a
//!   handler call's record on the lines it logs), `outcome` (reports and record
//!   errors), `options`, `parking`, `panic` (a handler's panic as its call's
//!   error).
//!
//! Typed DynamoDB changes, which a handler here receives, are decoded in
//! their own room (`crate::change`); their items are re-exported here.
//!
//! ```no_run
//! use shardkeeper::lambda::KinesisProcessor;
//! use shardkeeper::processing::{json, StreamRecord};
//! use shardkeeper::state::{StateStore, StoreConfig};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String, amount_cents: u64 }
//!
//! # async fn run() -> Result<(), shardkeeper::Error> {
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

pub(crate) mod base64;
mod context;
pub(crate) mod core;
pub(crate) mod effects;
pub(crate) mod handler;
pub(crate) mod handler_metrics;
pub(crate) mod labels;
pub(crate) mod options;
pub(crate) mod outcome;
pub(crate) mod panic;
pub(crate) mod parking;
pub(crate) mod record;
pub(crate) mod redact;
pub(crate) mod sink;
pub(crate) mod state_time;
pub(crate) mod unit;

pub use crate::change::{
    changes, from_image_json, is_ttl_deletion, Change, ChangeHandler, ChangeKind, ChangeParts,
    ChangeRecord, Image, Keys,
};
pub use context::RecordContext;
pub use core::Core;
#[cfg(any(feature = "worker", feature = "ddb-streams"))]
pub(crate) use core::Ran;
pub use effects::{stage_effect, EffectError, MAX_EFFECT_BYTES, MAX_EFFECT_ITEMS};
pub use handler::{json, HandlerError, JsonHandler, RecordHandler};
pub use handler_metrics::add_metric;
pub use options::{FailureMode, Parking, ProcessingOptions};
pub use outcome::{BatchReport, RecordError, RecordFailure};
pub use record::StreamRecord;
pub use sink::{CheckpointSink, NoCheckpoints};
pub use unit::Unit;
