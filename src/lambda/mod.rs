//! Event source mappings: Lambda invokes a function with a batch of a
//! stream's records, and the processors here run it through the processing
//! core ([`crate::processing`]) and answer with the records to retry. The
//! same handler runs under a shard worker or the DynamoDB Streams reader.
//!
//! - The processors: `processor` ([`KinesisProcessor`],
//!   [`DynamoDbProcessor`], [`BatchProcessor`]), `runtime` (the processor on
//!   the Lambda runtime API, each event read once from its bytes), `window`
//!   (tumbling windows).
//! - Events: `source` (an event kind: its units and what the mapping reads
//!   back), `kinesis`, `dynamodb`.
//! - Progress: `batch_progress` (where a batch keeps its progress, per
//!   consumer), `prefix` (the digests that say which records it covers).
//!
//! ```no_run
//! # #![recursion_limit = "256"]
//! use shardkeeper::lambda::KinesisProcessor;
//! use shardkeeper::processing::{json, StreamRecord};
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
//! # }
//! ```

mod batch_progress;
mod dynamodb;
mod kinesis;
mod prefix;
mod processor;
mod runtime;
mod source;
mod window;

pub use dynamodb::DynamoDbStreams;
pub use kinesis::Kinesis;
pub use processor::{BatchProcessor, DynamoDbProcessor, KinesisProcessor};
pub use source::{EventSource, EventUnits};
pub use window::{KinesisWindowProcessor, WindowInfo, STATE_KEY};
