//! Reading Kinesis shards: the reads a shard worker makes (GetShardIterator,
//! GetRecords, SubscribeToShard) behind a trait, and the record source a
//! shard pipeline reads a Kinesis shard with. [`SdkReads`] is the
//! implementation on the AWS SDK client; tests plug in a fake to show what
//! the local servers cannot (read throttling, duplicate subscriptions,
//! `MillisBehindLatest`).
//!
//! - `source`: the Kinesis record source of a pipeline, one of the two
//!   below, and what both keep.
//! - `polling`: reading a shard by GetRecords, and its back-off.
//! - `fanout`: reading a shard through an enhanced fan-out subscription,
//!   pumped into a channel; resubscribing.
//! - `start`: where a read starts, and a LATEST start's pin.
//! - `sdk`: the reads on the SDK client.

mod fanout;
mod polling;
mod sdk;
mod source;
mod start;

pub use sdk::SdkReads;
pub(crate) use source::{KinesisSource, ReadSettings};

use crate::state::{EpochMillis, ShardId, StateError, StreamAddress};
use bytes::Bytes;
use std::future::Future;
use std::pin::Pin;

/// The future a read returns.
pub type ReadFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ReadError>> + Send + 'a>>;

/// Where a read of a shard starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IteratorStart {
    /// The oldest record in the shard.
    TrimHorizon,
    /// Records that arrive from now on.
    Latest,
    /// The first record at or after this time (ms).
    AtTimestamp(EpochMillis),
    /// The record with this sequence number.
    AtSequence(String),
    /// The record after this sequence number.
    AfterSequence(String),
}

/// One record as Kinesis delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    /// Its sequence number.
    pub sequence_number: String,
    /// Its partition key.
    pub partition_key: String,
    /// Its data (possibly a KPL aggregate).
    pub data: Bytes,
    /// When Kinesis received it (ms).
    pub arrival: Option<EpochMillis>,
}

/// The answer to one GetRecords.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordsPage {
    /// The records, in shard order.
    pub records: Vec<ReadRecord>,
    /// The iterator for the next read; `None` at the end of a closed shard.
    pub next_iterator: Option<String>,
    /// How far behind the tip of the shard the read is (ms).
    pub millis_behind_latest: Option<i64>,
}

/// One event of a SubscribeToShard subscription.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionEvent {
    /// The records, in shard order.
    pub records: Vec<ReadRecord>,
    /// Where the subscription stands (empty at the end of a closed shard).
    pub continuation: String,
    /// How far behind the tip of the shard the subscription is (ms).
    pub millis_behind_latest: Option<i64>,
    /// The shard's children: sent when the shard is closed.
    pub child_shards: Vec<ShardId>,
}

impl SubscriptionEvent {
    /// The shard is read to its end: Kinesis sends the children with no
    /// continuation, or (after the last records of a closed shard) an event
    /// with no records.
    pub fn is_shard_end(&self) -> bool {
        !self.child_shards.is_empty() && (self.continuation.is_empty() || self.records.is_empty())
    }
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The shard iterator is older than five minutes (or otherwise expired).
    #[error("the shard iterator expired")]
    ExpiredIterator,
    /// The shard's read limits were exceeded (`ProvisionedThroughputExceededException` and the like),
    /// or Kinesis failed on its side: the shard backs off alone.
    #[error("{operation} of the shard is throttled: {code}")]
    Throttled {
        /// The call: `GetRecords` or `SubscribeToShard`.
        operation: &'static str,
        /// The error code.
        code: String,
    },
    /// Another subscription of this enhanced fan-out consumer to this shard
    /// is still open (Kinesis allows one, and a new one only 5 s after the last).
    #[error("a subscription to the shard with this consumer is still open: {0}")]
    SubscriptionInUse(String),
    /// The enhanced fan-out consumer subscribed with is gone from Kinesis
    /// (deregistered under the pool): its pool entry must be retired.
    #[error("the enhanced fan-out consumer is gone: {0}")]
    ConsumerGone(String),
    /// Anything else.
    #[error(transparent)]
    Failed(#[from] crate::Error),
}

impl From<StateError> for ReadError {
    fn from(e: StateError) -> Self {
        ReadError::Failed(e.into())
    }
}

impl From<ReadError> for crate::Error {
    /// A read error the worker cannot handle itself, as the crate's error.
    fn from(e: ReadError) -> Self {
        let sdk = match e {
            ReadError::Failed(e) => return e,
            ReadError::Throttled { operation, code } => StateError::Throttled {
                service: crate::state::Service::Kinesis,
                operation,
                attempts: 1,
                message: code,
            },
            // Only GetRecords takes an iterator; only a subscription can be
            // in use.
            ReadError::ExpiredIterator => StateError::Sdk {
                service: crate::state::Service::Kinesis,
                operation: "GetRecords",
                code: Some("ExpiredIteratorException".to_owned()),
                message: e.to_string(),
            },
            ReadError::SubscriptionInUse(why) => StateError::Sdk {
                service: crate::state::Service::Kinesis,
                operation: "SubscribeToShard",
                code: Some("ResourceInUseException".to_owned()),
                message: why,
            },
            ReadError::ConsumerGone(why) => StateError::Sdk {
                service: crate::state::Service::Kinesis,
                operation: "SubscribeToShard",
                code: Some("ResourceNotFoundException".to_owned()),
                message: why,
            },
        };
        sdk.into()
    }
}

/// The reads of one stream's shards.
pub trait KinesisReads: Send + Sync + std::fmt::Debug {
    /// A shard iterator at `start`.
    fn shard_iterator<'a>(
        &'a self,
        stream: &'a StreamAddress,
        shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, String>;

    /// One GetRecords of `stream` with `iterator`, at most `limit` records.
    fn get_records<'a>(
        &'a self,
        stream: &'a StreamAddress,
        iterator: &'a str,
        limit: i32,
    ) -> ReadFuture<'a, RecordsPage>;

    /// A SubscribeToShard subscription of the enhanced fan-out consumer
    /// `consumer_arn` to `shard`, from `start`.
    fn subscribe<'a>(
        &'a self,
        consumer_arn: &'a str,
        shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, Box<dyn Subscription>>;
}

/// An open SubscribeToShard subscription.
pub trait Subscription: Send {
    /// The next event; `None` when Kinesis ended the subscription (it does
    /// after 5 minutes, or at the end of a closed shard).
    fn next_event(&mut self) -> ReadFuture<'_, Option<SubscriptionEvent>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's error names the call a read error came from.
    #[test]
    fn a_read_error_keeps_the_call_it_came_from() {
        let operation = |e: ReadError| match crate::Error::from(e).as_state() {
            Some(StateError::Throttled { operation, .. } | StateError::Sdk { operation, .. }) => {
                *operation
            }
            other => panic!("{other:?}"),
        };
        let throttled = |operation| ReadError::Throttled {
            operation,
            code: "LimitExceededException".to_owned(),
        };
        assert_eq!(operation(throttled("SubscribeToShard")), "SubscribeToShard");
        assert_eq!(operation(throttled("GetRecords")), "GetRecords");
        assert_eq!(
            operation(ReadError::SubscriptionInUse("open".to_owned())),
            "SubscribeToShard"
        );
        assert_eq!(
            operation(ReadError::ConsumerGone("gone".to_owned())),
            "SubscribeToShard"
        );
        assert_eq!(operation(ReadError::ExpiredIterator), "GetRecords");
    }
}
