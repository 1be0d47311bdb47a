//! The three DynamoDB Streams calls a [`crate::ddb_streams::StreamReader`]
//! makes, as a trait: the SDK client implements it (`sdk.rs`), and tests put
//! a fake behind it to show what a local server cannot (shard rotation,
//! expired iterators, throttling, trimmed data).

use crate::ddb_streams::error::StreamsError;
use crate::state::{SequenceNumber, ShardSpec};
use std::fmt;
use std::future::Future;

/// Where GetShardIterator starts: the four DynamoDB Streams iterator types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamsIteratorStart {
    /// The oldest record still in the shard.
    TrimHorizon,
    /// Just after the newest record: only records written from now on.
    Latest,
    /// At this record (inclusive).
    AtSequence(SequenceNumber),
    /// Just after this record.
    AfterSequence(SequenceNumber),
}

impl StreamsIteratorStart {
    /// The API's name of the iterator type (`TRIM_HORIZON`, `LATEST`,
    /// `AT_SEQUENCE_NUMBER`, `AFTER_SEQUENCE_NUMBER`).
    pub fn iterator_type(&self) -> &'static str {
        match self {
            StreamsIteratorStart::TrimHorizon => "TRIM_HORIZON",
            StreamsIteratorStart::Latest => "LATEST",
            StreamsIteratorStart::AtSequence(_) => "AT_SEQUENCE_NUMBER",
            StreamsIteratorStart::AfterSequence(_) => "AFTER_SEQUENCE_NUMBER",
        }
    }

    /// The sequence number of the `*_SEQUENCE_NUMBER` types.
    pub fn sequence_number(&self) -> Option<&SequenceNumber> {
        match self {
            StreamsIteratorStart::AtSequence(seq) | StreamsIteratorStart::AfterSequence(seq) => {
                Some(seq)
            }
            StreamsIteratorStart::TrimHorizon | StreamsIteratorStart::Latest => None,
        }
    }
}

impl fmt::Display for StreamsIteratorStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.sequence_number() {
            Some(seq) => write!(f, "{} {seq}", self.iterator_type()),
            None => f.write_str(self.iterator_type()),
        }
    }
}

/// One page of DescribeStream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardPage {
    /// The page's shards (a DynamoDB Streams shard has at most one parent;
    /// no hash range).
    pub shards: Vec<ShardSpec>,
    /// Where the next page starts (`ExclusiveStartShardId`); `None` on the last page.
    pub last_evaluated_shard_id: Option<String>,
}

/// One GetRecords answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChangesPage {
    /// The records, oldest first.
    pub records: Vec<aws_sdk_dynamodbstreams::types::Record>,
    /// The iterator for the next call; `None` once a closed shard is read to its end.
    pub next_iterator: Option<String>,
}

/// The DynamoDB Streams calls the reader makes. Errors come back typed
/// ([`StreamsError`]); the reader retries throttling itself.
pub trait StreamsClient: Send + Sync {
    /// One page of the stream's shards, after `exclusive_start_shard_id`.
    fn describe_stream(
        &self,
        stream_arn: &str,
        exclusive_start_shard_id: Option<&str>,
    ) -> impl Future<Output = Result<ShardPage, StreamsError>> + Send;

    /// An iterator into `shard_id` at `start`; `None` when the service gives
    /// none (a closed shard read past its end).
    fn get_shard_iterator(
        &self,
        stream_arn: &str,
        shard_id: &str,
        start: &StreamsIteratorStart,
    ) -> impl Future<Output = Result<Option<String>, StreamsError>> + Send;

    /// The records at `iterator`, at most `limit` (the service's maximum,
    /// 1,000, when `None`).
    fn get_records(
        &self,
        iterator: &str,
        limit: Option<i32>,
    ) -> impl Future<Output = Result<ChangesPage, StreamsError>> + Send;
}
