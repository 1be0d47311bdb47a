//! What a window processor reads and answers, by event source: the records
//! of a time-window event, and the answer Lambda takes (the state to carry,
//! the record a failure stops at).

use crate::lambda::dynamodb::DynamoDbStreams;
use crate::lambda::kinesis::Kinesis;
use crate::lambda::EventUnits;
use aws_lambda_events::event::dynamodb::TimeWindowEventResponse;
use aws_lambda_events::event::kinesis::KinesisTimeWindowEventResponse;
use aws_lambda_events::event::streams::DynamoDbBatchItemFailure;
use aws_lambda_events::time_window::TimeWindowEventResponseProperties;
use serde::Serialize;

mod sealed {
    pub trait Sealed {}
    impl Sealed for crate::lambda::kinesis::Kinesis {}
    impl Sealed for crate::lambda::dynamodb::DynamoDbStreams {}
}

/// A stream whose event source mapping can run tumbling windows: Kinesis
/// ([`Kinesis`]) and DynamoDB Streams ([`DynamoDbStreams`]), as Lambda
/// supports them on both.
pub trait WindowSource: sealed::Sealed + Send + Sync + 'static {
    /// What the window handler answers Lambda.
    type WindowResponse: Serialize + std::fmt::Debug + Send + 'static;

    /// The kind of event, for errors.
    const EVENT: &'static str;

    /// The records of a time-window event (its JSON text).
    fn window_units(event_json: &str) -> Result<EventUnits, String>;

    /// The answer: the state to carry to the window's next invocation, and
    /// the item identifier of the record a failure stopped at.
    fn window_response(failure: Option<String>, state: Option<String>) -> Self::WindowResponse;
}

impl WindowSource for Kinesis {
    type WindowResponse = KinesisTimeWindowEventResponse;
    const EVENT: &'static str = "Kinesis time-window event";

    fn window_units(event_json: &str) -> Result<EventUnits, String> {
        Kinesis::units_of(event_json)
    }

    fn window_response(failure: Option<String>, state: Option<String>) -> Self::WindowResponse {
        let mut response = KinesisTimeWindowEventResponse::default();
        // (`aws_lambda_events` names no batch item failures on a Kinesis
        // window's response: they go beside its fields.)
        if let Some(item) = failure {
            response.other.insert(
                "batchItemFailures".to_owned(),
                serde_json::json!([{ "itemIdentifier": item }]),
            );
        }
        response.time_window_event_response_properties = carried(state);
        response
    }
}

impl WindowSource for DynamoDbStreams {
    type WindowResponse = TimeWindowEventResponse;
    const EVENT: &'static str = "DynamoDB Streams time-window event";

    fn window_units(event_json: &str) -> Result<EventUnits, String> {
        DynamoDbStreams::units_of(&bytes::Bytes::copy_from_slice(event_json.as_bytes()))
    }

    fn window_response(failure: Option<String>, state: Option<String>) -> Self::WindowResponse {
        let mut response = TimeWindowEventResponse::default();
        if let Some(item) = failure {
            let mut failed = DynamoDbBatchItemFailure::default();
            failed.item_identifier = Some(item);
            response.batch_item_failures.push(failed);
        }
        response.time_window_event_response_properties = carried(state);
        response
    }
}

/// The state a response carries to the window's next invocation, under
/// [`STATE_KEY`](super::STATE_KEY) (none: the window is closed).
fn carried(state: Option<String>) -> TimeWindowEventResponseProperties {
    let mut properties = TimeWindowEventResponseProperties::default();
    if let Some(state) = state {
        properties.state.insert(super::STATE_KEY.to_owned(), state);
    }
    properties
}
