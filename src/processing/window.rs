//! Tumbling windows: aggregate a Kinesis shard's records over a time window,
//! with the state carried between invocations by Lambda, and act once on
//! the final invoke of each window.

use crate::processing::handler::HandlerError;
use crate::processing::kinesis::Kinesis;
use crate::processing::outcome::RecordError;
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use aws_lambda_events::event::kinesis::KinesisTimeWindowEventResponse;
use aws_lambda_events::time_window::TimeWindowProperties;
use chrono::{DateTime, Utc};
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use std::future::Future;

/// The key the aggregation state is kept under in the window's state map.
pub const STATE_KEY: &str = "shardkeeper";

/// The most state Lambda carries between the invocations of a window
/// ("the state ... can't exceed 1 MB", Lambda developer guide, tumbling
/// windows).
pub const MAX_STATE_BYTES: usize = 1024 * 1024;

/// The window being aggregated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowInfo {
    /// Window start.
    pub start: DateTime<Utc>,
    /// Window end.
    pub end: DateTime<Utc>,
    /// The shard.
    pub shard_id: Option<String>,
    /// True if the window ended early (the shard ended, or the batch hit a limit).
    pub terminated_early: bool,
}

/// Aggregates records into a state `S` per tumbling window and calls
/// `on_window(state, window)` on the final invoke of each window.
///
/// `fold(&mut state, record)` is called for each record (KPL aggregates
/// de-aggregated) in order. If it fails, the batch stops there: the failed
/// record is reported in `batchItemFailures` and the state returned is the
/// state before it (before its whole KPL aggregate, which the retry
/// delivers again), so the retry resumes consistently. The state is
/// serialized once per invocation; a state over Lambda's 1 MB fails the
/// invocation with an error that says so. A failure of `on_window` fails
/// the invocation (Lambda retries the final invoke).
pub struct KinesisWindowProcessor<S, A, F> {
    fold: A,
    on_window: F,
    _s: std::marker::PhantomData<fn() -> S>,
}

impl<S, A, F, Fut, E> KinesisWindowProcessor<S, A, F>
where
    S: Serialize + DeserializeOwned + Default + Clone + Send,
    A: Fn(&mut S, StreamRecord) -> Result<(), E> + Send + Sync,
    F: Fn(S, WindowInfo) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
    E: Into<HandlerError>,
{
    /// A window processor from a fold and a final action.
    pub fn new(fold: A, on_window: F) -> Self {
        KinesisWindowProcessor {
            fold,
            on_window,
            _s: std::marker::PhantomData,
        }
    }

    /// The Lambda handler.
    pub async fn handle(
        &self,
        event: LambdaEvent<Box<RawValue>>,
    ) -> Result<KinesisTimeWindowEventResponse, lambda_runtime::Error> {
        self.process(event.payload.get()).await
    }

    /// Processes one time-window event (its JSON text).
    pub async fn process(
        &self,
        event_json: &str,
    ) -> Result<KinesisTimeWindowEventResponse, lambda_runtime::Error> {
        let props: TimeWindowProperties = serde_json::from_str(event_json)
            .map_err(|e| format!("not a Kinesis time-window event: {e}"))?;
        let mut state: S = match props.state.get(STATE_KEY) {
            Some(json) => serde_json::from_str(json)
                .map_err(|e| format!("window state does not decode: {e}"))?,
            None => S::default(),
        };
        let mut failure: Option<(String, RecordError)> = None;
        'records: for (item, unit) in Kinesis::units_of(event_json)?.items {
            let records = match unit {
                Unit::Record(record) => vec![record],
                Unit::Records(records) => records,
                Unit::Broken(_, error) | Unit::Unreadable(_, error) => {
                    failure = Some((item.to_string(), error));
                    break;
                }
            };
            // A failure rolls back the whole outer record (all of a KPL
            // aggregate's user records): the retry delivers it whole again.
            let before = state.clone();
            for record in records {
                let (seq, sub) = (record.sequence_number.clone(), record.sub_sequence);
                if let Err(e) = (self.fold)(&mut state, record) {
                    state = before;
                    let error = RecordError::Handler {
                        sequence_number: seq.to_string(),
                        sub_sequence: sub,
                        error: e.into().to_string(),
                    };
                    failure = Some((seq.to_string(), error));
                    break 'records;
                }
            }
        }
        let mut response = KinesisTimeWindowEventResponse::default();
        if let Some((item, error)) = failure {
            tracing::warn!(item, %error, "window record failed");
            response.other.insert(
                "batchItemFailures".to_owned(),
                serde_json::json!([{ "itemIdentifier": item }]),
            );
        } else if props.is_final_invoke_for_window {
            let window = WindowInfo {
                start: props.window.start,
                end: props.window.end,
                shard_id: props.shard_id.clone(),
                terminated_early: props.is_window_terminated_early,
            };
            (self.on_window)(state, window).await?;
            return Ok(response);
        }
        let kept = serde_json::to_string(&state)?;
        if kept.len() > MAX_STATE_BYTES {
            return Err(format!(
                "the window state is {} bytes once serialized; Lambda carries at most {MAX_STATE_BYTES} \
                 between invocations: fold into a smaller state",
                kept.len()
            )
            .into());
        }
        response
            .time_window_event_response_properties
            .state
            .insert(STATE_KEY.to_owned(), kept);
        Ok(response)
    }
}
