//! [`KinesisReads`] on the AWS SDK client.

use super::{
    IteratorStart, KinesisReads, ReadError, ReadFuture, ReadRecord, RecordsPage, Subscription,
    SubscriptionEvent,
};
use crate::state::{
    call_kinesis, is_throttling_code, kinesis_coded_error, kinesis_error, ForStream, RetryPolicy,
    ShardId, StateError, StreamAddress,
};
use aws_sdk_kinesis::types::error::SubscribeToShardEventStreamError;
use aws_sdk_kinesis::types::{
    Record, ShardIteratorType, StartingPosition, SubscribeToShardEventStream,
};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_smithy_types::DateTime;

/// How long a SubscribeToShard may take to answer (its events then stream
/// for up to 5 minutes).
const SUBSCRIBE_ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads through an `aws_sdk_kinesis::Client`. Each read (GetShardIterator,
/// GetRecords, SubscribeToShard) is sent once, with the SDK's own retries
/// turned off for it whatever the client's: the worker backs off the one
/// shard that is throttled or failed and goes on with the others, and reads
/// it again from its position, instead of every shard waiting out a backoff.
#[derive(Debug, Clone)]
pub struct SdkReads {
    client: aws_sdk_kinesis::Client,
}

impl SdkReads {
    /// Reads through `client`.
    pub fn new(client: aws_sdk_kinesis::Client) -> Self {
        SdkReads { client }
    }
}

/// The configuration of a read sent once: no SDK retries.
fn sent_once() -> aws_sdk_kinesis::config::Builder {
    aws_sdk_kinesis::config::Builder::default()
        .retry_config(aws_smithy_types::retry::RetryConfig::disabled())
}

fn classify(
    operation: &'static str,
    err: &(impl ProvideErrorMetadata + std::error::Error),
) -> ReadError {
    classify_code(operation, err.code(), || kinesis_error(operation, err))
}

/// A read's error by its code: an expired iterator, a subscription still
/// open, a consumer gone, throttling (the shard's throughput, or KMS
/// throttling the decryption of a stream encrypted with a customer key: the
/// shard backs off alone), or the state crate's classes (`failed`): a
/// transient failure, an unusable KMS key, another error with its code.
fn classify_code(
    operation: &'static str,
    code: Option<&str>,
    failed: impl FnOnce() -> StateError,
) -> ReadError {
    match code.unwrap_or_default() {
        "ExpiredIteratorException" => ReadError::ExpiredIterator,
        "ResourceInUseException" if operation == "SubscribeToShard" => {
            ReadError::SubscriptionInUse(failed().to_string())
        }
        "ResourceNotFoundException" if operation == "SubscribeToShard" => {
            ReadError::ConsumerGone(failed().to_string())
        }
        code if is_throttling_code(code) => ReadError::Throttled {
            operation,
            code: code.to_owned(),
        },
        _ => ReadError::from(failed()),
    }
}

/// An error that arrives inside an open subscription's event stream. Its
/// modelled variants carry no error code in their metadata, so they are
/// matched by variant and given their code: a second subscription (in use),
/// KMS throttling or an internal failure (the shard backs off and
/// subscribes again), a consumer gone from Kinesis, and a KMS key that
/// cannot be used (the run ends) are told apart from the rest.
fn classify_event_error(
    err: &aws_sdk_kinesis::error::SdkError<
        SubscribeToShardEventStreamError,
        aws_smithy_types::event_stream::RawMessage,
    >,
) -> ReadError {
    use SubscribeToShardEventStreamError as E;
    let code = match err.as_service_error() {
        Some(E::ResourceInUseException(_)) => "ResourceInUseException",
        Some(E::ResourceNotFoundException(_)) => "ResourceNotFoundException",
        Some(E::KmsThrottlingException(_)) => "KMSThrottlingException",
        // Kinesis failed on its side: the shard backs off as when throttled.
        Some(E::InternalFailureException(_)) => {
            return ReadError::Throttled {
                operation: "SubscribeToShard",
                code: "InternalFailureException".to_owned(),
            }
        }
        Some(E::KmsDisabledException(_)) => "KMSDisabledException",
        Some(E::KmsInvalidStateException(_)) => "KMSInvalidStateException",
        Some(E::KmsAccessDeniedException(_)) => "KMSAccessDeniedException",
        Some(E::KmsNotFoundException(_)) => "KMSNotFoundException",
        Some(E::KmsOptInRequired(_)) => "KMSOptInRequired",
        _ => return classify("SubscribeToShard", err),
    };
    classify_code("SubscribeToShard", Some(code), || {
        kinesis_coded_error("SubscribeToShard", code, err)
    })
}

fn record(r: Record) -> ReadRecord {
    ReadRecord {
        arrival: r
            .approximate_arrival_timestamp
            .and_then(|t| t.to_millis().ok()),
        sequence_number: r.sequence_number,
        partition_key: r.partition_key.unwrap_or_default(),
        data: r.data.into_inner().into(),
    }
}

fn iterator_type(start: &IteratorStart) -> (ShardIteratorType, Option<&str>, Option<DateTime>) {
    match start {
        IteratorStart::TrimHorizon => (ShardIteratorType::TrimHorizon, None, None),
        IteratorStart::Latest => (ShardIteratorType::Latest, None, None),
        IteratorStart::AtTimestamp(t) => (
            ShardIteratorType::AtTimestamp,
            None,
            Some(DateTime::from_millis(*t)),
        ),
        IteratorStart::AtSequence(s) => (ShardIteratorType::AtSequenceNumber, Some(s), None),
        IteratorStart::AfterSequence(s) => (ShardIteratorType::AfterSequenceNumber, Some(s), None),
    }
}

impl KinesisReads for SdkReads {
    fn shard_iterator<'a>(
        &'a self,
        stream: &'a StreamAddress,
        shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, String> {
        Box::pin(async move {
            let (kind, sequence, timestamp) = iterator_type(start);
            let req = self
                .client
                .get_shard_iterator()
                .for_stream(stream)
                .shard_id(shard.as_str())
                .shard_iterator_type(kind)
                .set_starting_sequence_number(sequence.map(str::to_owned))
                .set_timestamp(timestamp);
            let out = call_kinesis(&RetryPolicy::none(), "GetShardIterator", || {
                req.clone().customize().config_override(sent_once()).send()
            })
            .await?;
            out.shard_iterator.ok_or_else(|| {
                ReadError::from(StateError::validation(
                    "GetShardIterator answer",
                    format!("no iterator for {shard}"),
                ))
            })
        })
    }

    fn get_records<'a>(
        &'a self,
        stream: &'a StreamAddress,
        iterator: &'a str,
        limit: i32,
    ) -> ReadFuture<'a, RecordsPage> {
        Box::pin(async move {
            let out = self
                .client
                .get_records()
                .for_stream(stream)
                .shard_iterator(iterator)
                .limit(limit)
                .customize()
                .config_override(sent_once())
                .send()
                .await
                .map_err(|e| classify("GetRecords", &e))?;
            Ok(RecordsPage {
                next_iterator: out.next_shard_iterator,
                millis_behind_latest: out.millis_behind_latest,
                records: out.records.into_iter().map(record).collect(),
            })
        })
    }

    fn subscribe<'a>(
        &'a self,
        consumer_arn: &'a str,
        shard: &'a ShardId,
        start: &'a IteratorStart,
    ) -> ReadFuture<'a, Box<dyn Subscription>> {
        Box::pin(async move {
            let (kind, sequence, timestamp) = iterator_type(start);
            let position = StartingPosition::builder()
                .r#type(kind)
                .set_sequence_number(sequence.map(str::to_owned))
                .set_timestamp(timestamp)
                .build()
                .map_err(|e| StateError::validation("starting position", e.to_string()))?;
            let subscribing = self
                .client
                .subscribe_to_shard()
                .consumer_arn(consumer_arn)
                .shard_id(shard.as_str())
                .starting_position(position)
                .customize()
                .config_override(sent_once())
                .send();
            // An answer that never comes (a connection that hangs) must not
            // hold the worker: the shard backs off and subscribes again.
            let out = tokio::time::timeout(SUBSCRIBE_ANSWER_WITHIN, subscribing)
                .await
                .map_err(|_| {
                    ReadError::from(StateError::Sdk {
                        service: crate::state::Service::Kinesis,
                        operation: "SubscribeToShard",
                        code: None,
                        message: format!(
                            "no answer within {} s",
                            SUBSCRIBE_ANSWER_WITHIN.as_secs()
                        ),
                    })
                })?
                .map_err(|e| classify("SubscribeToShard", &e))?;
            Ok(Box::new(SdkSubscription(out.event_stream)) as Box<dyn Subscription>)
        })
    }
}

struct SdkSubscription(
    aws_sdk_kinesis::primitives::event_stream::EventReceiver<
        SubscribeToShardEventStream,
        SubscribeToShardEventStreamError,
    >,
);

impl Subscription for SdkSubscription {
    fn next_event(&mut self) -> ReadFuture<'_, Option<SubscriptionEvent>> {
        Box::pin(async move {
            loop {
                let event = self.0.recv().await.map_err(|e| classify_event_error(&e))?;
                match event {
                    None => return Ok(None),
                    Some(SubscribeToShardEventStream::SubscribeToShardEvent(e)) => {
                        return Ok(Some(SubscriptionEvent {
                            continuation: e.continuation_sequence_number,
                            millis_behind_latest: Some(e.millis_behind_latest),
                            child_shards: e
                                .child_shards
                                .unwrap_or_default()
                                .iter()
                                .filter_map(|c| ShardId::new(c.shard_id()).ok())
                                .collect(),
                            records: e.records.into_iter().map(record).collect(),
                        }))
                    }
                    // Event types this SDK does not know: skip them.
                    Some(_) => continue,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_kinesis::error::SdkError;
    use aws_sdk_kinesis::types::error::{
        InternalFailureException, KmsThrottlingException, ResourceInUseException,
        ResourceNotFoundException,
    };
    use aws_smithy_types::event_stream::RawMessage;

    fn in_stream(
        e: SubscribeToShardEventStreamError,
    ) -> SdkError<SubscribeToShardEventStreamError, RawMessage> {
        SdkError::service_error(e, RawMessage::invalid(None))
    }

    /// The modelled errors of SubscribeToShard's event stream
    /// (`SubscribeToShardEventStreamError`) carry no code: each variant gets
    /// the class its code has in the API reference's "Errors" section of
    /// SubscribeToShard
    /// (<https://docs.aws.amazon.com/kinesis/latest/APIReference/API_SubscribeToShard.html#API_SubscribeToShard_Errors>).
    #[test]
    fn errors_inside_the_event_stream_are_told_apart_by_variant() {
        use aws_sdk_kinesis::types::error::{
            KmsAccessDeniedException, KmsDisabledException, KmsInvalidStateException,
            KmsNotFoundException, KmsOptInRequired,
        };
        use SubscribeToShardEventStreamError as E;
        let in_use =
            || E::ResourceInUseException(ResourceInUseException::builder().message("busy").build());
        let cases: Vec<(E, &str)> = vec![
            (in_use(), "in use"),
            (
                E::KmsThrottlingException(KmsThrottlingException::builder().build()),
                "throttled",
            ),
            (
                E::InternalFailureException(InternalFailureException::builder().build()),
                "throttled",
            ),
            (
                E::ResourceNotFoundException(ResourceNotFoundException::builder().build()),
                "gone",
            ),
            (
                E::KmsDisabledException(KmsDisabledException::builder().build()),
                "KMSDisabledException",
            ),
            (
                E::KmsInvalidStateException(KmsInvalidStateException::builder().build()),
                "KMSInvalidStateException",
            ),
            (
                E::KmsAccessDeniedException(KmsAccessDeniedException::builder().build()),
                "KMSAccessDeniedException",
            ),
            (
                E::KmsNotFoundException(KmsNotFoundException::builder().build()),
                "KMSNotFoundException",
            ),
            (
                E::KmsOptInRequired(KmsOptInRequired::builder().build()),
                "KMSOptInRequired",
            ),
        ];
        for (error, expected) in cases {
            let read = classify_event_error(&in_stream(error));
            match (&read, expected) {
                (ReadError::SubscriptionInUse(_), "in use")
                | (ReadError::Throttled { .. }, "throttled")
                | (ReadError::ConsumerGone(_), "gone") => {}
                (ReadError::Failed(e), code) => match e.as_state() {
                    Some(StateError::KmsKey {
                        code: got,
                        operation: "SubscribeToShard",
                        ..
                    }) if got == code => {
                        assert!(!e.is_transient(), "{read}");
                        assert!(read.to_string().contains("stream's KMS key"), "{read}");
                    }
                    _ => panic!("{expected}: {read:?}"),
                },
                _ => panic!("{expected}: {read:?}"),
            }
        }
    }
}
