//! [`StreamsClient`] for the AWS SDK's DynamoDB Streams client. Each
//! request is sent once, the SDK's retries off for it whatever the client's:
//! the reader's retry policy is the one budget (`StreamReader`'s
//! `call`).

use crate::ddb_streams::client::{ChangesPage, ShardPage, StreamsClient, StreamsIteratorStart};
use crate::ddb_streams::error::StreamsError;
use crate::state::{SequenceNumber, ShardSpec, StateError};
use aws_sdk_dynamodbstreams::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodbstreams::types::{Shard, ShardIteratorType};
use std::future::Future;

fn streams_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    err: SdkError<E, R>,
) -> StreamsError {
    let code = err.code().map(str::to_owned);
    StreamsError::from_code(code.as_deref(), DisplayErrorContext(&err).to_string())
}

/// The configuration of a request sent once: no SDK retries.
fn sent_once() -> aws_sdk_dynamodbstreams::config::Builder {
    aws_sdk_dynamodbstreams::config::Builder::default()
        .retry_config(aws_sdk_dynamodbstreams::config::retry::RetryConfig::disabled())
}

fn invalid(e: StateError) -> StreamsError {
    StreamsError::Other {
        code: None,
        message: format!("DescribeStream returned a shard that cannot be used: {e}"),
    }
}

fn shard_spec(shard: &Shard) -> Result<ShardSpec, StateError> {
    let id = shard.shard_id().unwrap_or_default();
    let parents: Vec<&str> = shard.parent_shard_id().into_iter().collect();
    let mut spec = ShardSpec::new(id)?.with_parents(&parents)?;
    let range = shard.sequence_number_range();
    spec.starting_sequence = range
        .and_then(|r| r.starting_sequence_number())
        .map(SequenceNumber::new)
        .transpose()?;
    spec.ending_sequence = range
        .and_then(|r| r.ending_sequence_number())
        .map(SequenceNumber::new)
        .transpose()?;
    Ok(spec)
}

impl StreamsClient for aws_sdk_dynamodbstreams::Client {
    fn describe_stream(
        &self,
        stream_arn: &str,
        exclusive_start_shard_id: Option<&str>,
    ) -> impl Future<Output = Result<ShardPage, StreamsError>> + Send {
        let req = self
            .describe_stream()
            .stream_arn(stream_arn)
            .set_exclusive_start_shard_id(exclusive_start_shard_id.map(str::to_owned));
        async move {
            let out = req
                .customize()
                .config_override(sent_once())
                .send()
                .await
                .map_err(streams_error)?;
            let Some(description) = out.stream_description() else {
                return Ok(ShardPage::default());
            };
            Ok(ShardPage {
                shards: description
                    .shards()
                    .iter()
                    .map(shard_spec)
                    .collect::<Result<_, _>>()
                    .map_err(invalid)?,
                last_evaluated_shard_id: description.last_evaluated_shard_id().map(str::to_owned),
            })
        }
    }

    fn get_shard_iterator(
        &self,
        stream_arn: &str,
        shard_id: &str,
        start: &StreamsIteratorStart,
    ) -> impl Future<Output = Result<Option<String>, StreamsError>> + Send {
        let req = self
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard_id)
            .shard_iterator_type(ShardIteratorType::from(start.iterator_type()))
            .set_sequence_number(start.sequence_number().map(|s| s.as_str().to_owned()));
        async move {
            let out = req
                .customize()
                .config_override(sent_once())
                .send()
                .await
                .map_err(streams_error)?;
            Ok(out.shard_iterator)
        }
    }

    fn get_records(
        &self,
        iterator: &str,
        limit: Option<i32>,
    ) -> impl Future<Output = Result<ChangesPage, StreamsError>> + Send {
        let req = self.get_records().shard_iterator(iterator).set_limit(limit);
        async move {
            let out = req
                .customize()
                .config_override(sent_once())
                .send()
                .await
                .map_err(streams_error)?;
            Ok(ChangesPage {
                records: out.records.unwrap_or_default(),
                next_iterator: out.next_shard_iterator,
            })
        }
    }
}
