//! A self-managed DynamoDB Streams reader (no event source mapping) and the
//! replica recipe built on it.
//!
//! [`StreamReader`] discovers a stream's shard tree, reads each shard from
//! its saved position (kept in the state store, one item per shard), a
//! child only after its parent is read to its end, and hands out
//! [`crate::processing::ChangeRecord`]s that decode into the same [`crate::processing::Change`] the event-source
//! handlers get; [`StreamReader::poll`] runs them through the processing
//! core with the same handler an event source mapping runs. A position moves only when the caller commits what it
//! accepted. [`build_replica`] keeps a copy of a table in memory: position,
//! scan, then the stream from the position.
//!
//! ```no_run
//! use shardkeeper::ddb_streams::{ReaderConfig, StreamReader};
//! use shardkeeper::processing::{changes, Change, StreamRecord};
//! use shardkeeper::state::{StateStore, StoreConfig};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { id: String, status: String }
//!
//! # async fn run(stream_arn: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//! let store = StateStore::new(aws_sdk_dynamodb::Client::new(&aws), StoreConfig::new("billing", "orders")?);
//! let streams = aws_sdk_dynamodbstreams::Client::new(&aws);
//! let mut reader = StreamReader::new(streams, store, stream_arn, ReaderConfig::default());
//! // The same handler value runs under a `DynamoDbProcessor` (event source mapping).
//! let handler = changes(|change: Change<Order>, _record: StreamRecord| async move {
//!     match change {
//!         Change::Insert { new } | Change::Modify { new, .. } => println!("{} is {}", new.id, new.status),
//!         Change::Remove { old, .. } => println!("removed {:?}", old.map(|o| o.id)),
//!     }
//!     Ok::<(), std::io::Error>(())
//! });
//! // A task of its own (the reader's future can be spawned from your crate
//! // at its default `recursion_limit`).
//! let reading = tokio::spawn(async move {
//!     loop {
//!         // Each shard is handled in order; its position is saved once its records are accepted.
//!         reader.poll(&handler).await?;
//!     }
//!     # #[allow(unreachable_code)]
//!     Ok::<(), shardkeeper::Error>(())
//! });
//! reading.await??;
//! # Ok(())
//! # }
//! ```

mod accept;
mod batch;
mod calls;
mod client;
mod config;
mod discover;
mod error;
mod position;
mod reader;
pub mod replica;
mod sdk;
mod source;
mod tree;

pub use batch::{Batch, Discovery, PollReport, ReaderStats, ShardBatch, TrimmedShard};
pub use client::{ChangesPage, ShardPage, StreamsClient, StreamsIteratorStart};
pub use config::{OnTrimmed, ReaderConfig};
pub use error::StreamsError;
pub use reader::StreamReader;
pub use replica::{build_replica, scan_table, ItemKey, KeyValue, Replica, ReplicaReport};
pub use tree::{diff_shards, readable, ShardDiff};
