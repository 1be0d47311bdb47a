//! `aws_lambda_events`' types in: an event built or read with them (a
//! fixture a team already has) runs through a processor as the JSON Lambda
//! sends would, and one Kinesis record of such an event becomes the
//! [`StreamRecord`] a handler gets, for a handler's own tests.

use crate::lambda::{BatchProcessor, DynamoDbStreams, Kinesis};
use crate::processing::{BatchReport, RecordHandler, StreamRecord};
use aws_lambda_events::event::dynamodb::Event as DynamoDbEvent;
use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use bytes::Bytes;
use std::time::SystemTime;

impl<H: RecordHandler> BatchProcessor<H, Kinesis> {
    /// Processes a Kinesis event of `aws_lambda_events` (serialized once to
    /// the JSON Lambda sends, then read as any event) until `deadline`;
    /// see [`BatchProcessor::process`].
    pub async fn process_event(
        &self,
        event: &KinesisEvent,
        deadline: Option<SystemTime>,
    ) -> crate::Result<BatchReport> {
        let json = serde_json::to_vec(event).expect("an aws_lambda_events event serializes");
        self.process_bytes(Bytes::from(json), deadline).await
    }
}

impl<H: RecordHandler> BatchProcessor<H, DynamoDbStreams> {
    /// Processes a DynamoDB Streams event of `aws_lambda_events`
    /// (serialized once to the JSON Lambda sends, then read as any event)
    /// until `deadline`; see [`BatchProcessor::process`].
    pub async fn process_event(
        &self,
        event: &DynamoDbEvent,
        deadline: Option<SystemTime>,
    ) -> crate::Result<BatchReport> {
        let json = serde_json::to_vec(event).expect("an aws_lambda_events event serializes");
        self.process_bytes(Bytes::from(json), deadline).await
    }
}

impl StreamRecord {
    /// The record a handler gets for one Kinesis record of an
    /// `aws_lambda_events` event: its shard (from the event id), sequence
    /// number, partition key, payload, arrival time and stream ARN. The
    /// payload is taken as it is: a processor splits a KPL aggregate into
    /// its user records, this does not.
    pub fn from_kinesis_event_record(record: &KinesisEventRecord) -> StreamRecord {
        let shard = record
            .event_id
            .as_deref()
            .and_then(|id| id.split_once(':'))
            .map_or("", |(shard, _)| shard);
        StreamRecord {
            shard_id: shard.into(),
            sequence_number: record.kinesis.sequence_number.as_str().into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: record.kinesis.partition_key.as_str().into(),
            explicit_hash_key: None,
            data: Bytes::from(record.kinesis.data.0.clone()),
            approximate_arrival: Some(
                record
                    .kinesis
                    .approximate_arrival_timestamp
                    .0
                    .timestamp_millis(),
            ),
            event_source_arn: record.event_source_arn.as_deref().map(Into::into),
            change: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lambda::{DynamoDbProcessor, KinesisProcessor};
    use std::sync::{Arc, Mutex};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn a_kinesis_fixture_of_aws_lambda_events_runs_as_its_json_and_its_records_are_the_handlers() {
        let text = include_str!("../../events/kinesis-batch.json");
        let event: KinesisEvent = serde_json::from_str(text).unwrap();
        let seen: Arc<Mutex<Vec<StreamRecord>>> = Arc::default();
        let handler = {
            let seen = seen.clone();
            move |record: StreamRecord| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(record);
                    Ok::<(), std::io::Error>(())
                }
            }
        };
        let processor = KinesisProcessor::new(handler);
        let rt = runtime();
        let from_event = rt.block_on(processor.process_event(&event, None)).unwrap();
        let from_json = rt.block_on(processor.process(text, None)).unwrap();
        assert_eq!(from_event.processed, 3);
        assert_eq!(from_event.processed, from_json.processed);
        let seen = seen.lock().unwrap();
        for (i, record) in event.records.iter().enumerate() {
            let converted = StreamRecord::from_kinesis_event_record(record);
            let handed = &seen[i];
            assert_eq!(converted.shard_id, handed.shard_id);
            assert_eq!(converted.sequence_number, handed.sequence_number);
            assert_eq!(converted.partition_key, handed.partition_key);
            assert_eq!(converted.data, handed.data);
            assert_eq!(converted.event_source_arn, handed.event_source_arn);
            let (a, b) = (converted.approximate_arrival, handed.approximate_arrival);
            assert!(
                a.zip(b).is_some_and(|(a, b)| (a - b).abs() <= 1),
                "{a:?} {b:?}"
            );
        }
    }

    #[test]
    fn a_dynamodb_fixture_of_aws_lambda_events_runs_as_its_json() {
        let text = include_str!("../../events/dynamodb-stream.json");
        let event: DynamoDbEvent = serde_json::from_str(text).unwrap();
        let processor =
            DynamoDbProcessor::new(|_: StreamRecord| async { Ok::<(), std::io::Error>(()) });
        let rt = runtime();
        let from_event = rt.block_on(processor.process_event(&event, None)).unwrap();
        let from_json = rt.block_on(processor.process(text, None)).unwrap();
        assert_eq!(from_event.processed, event.records.len() as u64);
        assert_eq!(from_event.processed, from_json.processed);
        assert!(from_event.failures.is_empty(), "{:?}", from_event.failures);
    }

    #[test]
    fn an_arrival_time_given_as_text_is_read_and_one_that_is_no_number_fails_its_record() {
        let text = include_str!("../../events/kinesis-batch.json");
        let processor =
            KinesisProcessor::new(|_: StreamRecord| async { Ok::<(), std::io::Error>(()) });
        let rt = runtime();
        let as_text = text.replacen(
            "\"approximateArrivalTimestamp\": 1763701200.123",
            "\"approximateArrivalTimestamp\": \"1763701200.123\"",
            1,
        );
        assert_ne!(as_text, text);
        let report = rt.block_on(processor.process(&as_text, None)).unwrap();
        assert_eq!(report.processed, 3, "{report:?}");
        let broken = text.replacen(
            "\"approximateArrivalTimestamp\": 1763701200.123",
            "\"approximateArrivalTimestamp\": \"soon\"",
            1,
        );
        let report = rt.block_on(processor.process(&broken, None)).unwrap();
        assert_eq!(report.processed, 0);
        let failure = format!("{:?}", report.failures[0]);
        assert!(
            failure.contains("approximateArrivalTimestamp \\\"soon\\\" is not a number"),
            "{failure}"
        );
    }
    /// An event is input: an arrival time no record can have (negative,
    /// past the year 9999, at the edge of a float) is no arrival at all, and
    /// never overflows an age.
    #[test]
    fn an_arrival_time_no_record_can_have_is_no_arrival() {
        let text = include_str!("../../events/kinesis-batch.json");
        let processor =
            KinesisProcessor::new(|_: StreamRecord| async { Ok::<(), std::io::Error>(()) });
        let rt = runtime();
        for absurd in [
            "-1e300",
            "1e300",
            "-1",
            "\"-9.3e18\"",
            "1.7976931348623157e308",
        ] {
            let hostile = text.replace(
                "\"approximateArrivalTimestamp\": 1763701200.123",
                &format!("\"approximateArrivalTimestamp\": {absurd}"),
            );
            assert_ne!(hostile, text);
            let report = rt.block_on(processor.process(&hostile, None)).unwrap();
            assert_eq!(report.processed, 3, "{absurd}: {report:?}");
            assert_eq!(report.newest_arrival, None, "{absurd}");
        }
    }
}
