//! Tumbling windows: aggregate a Kinesis shard's records over a time window,
//! with the state carried between invocations by Lambda, and act once on
//! the final invoke of each window.

use crate::lambda::kinesis::Kinesis;
use crate::processing::handler::HandlerError;
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
/// delivers again), so the retry resumes consistently.
///
/// The state is serialized once per invocation. Lambda carries at most
/// 1 MB of it between invocations, measured as it is sent (a JSON string,
/// escaped): a state that would pass that ends the window early, as Lambda
/// ends one itself, instead of failing the batch for ever. `on_window`
/// runs with that state and `terminated_early` set, and the window goes on
/// with a fresh state. A state that cannot be read (another shape after a
/// deploy) is logged once, as an error, and replaced by a fresh one. A
/// failure of `on_window` fails the invocation (Lambda retries it with the
/// same state); `on_window` runs at most once per invocation.
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
    ) -> crate::Result<KinesisTimeWindowEventResponse> {
        crate::processing::RecordContext::of(&event.context)
            .scope(self.process(event.payload.get()))
            .await
    }

    /// Processes one time-window event (its JSON text).
    pub async fn process(&self, event_json: &str) -> crate::Result<KinesisTimeWindowEventResponse> {
        let props: TimeWindowProperties = serde_json::from_str(event_json)
            .map_err(|e| crate::Error::Event(format!("not a Kinesis time-window event: {e}")))?;
        let mut state: S = match props.state.get(STATE_KEY) {
            Some(json) => serde_json::from_str(json).unwrap_or_else(|e| {
                tracing::error!(
                    error = %e,
                    shard = props.shard_id.as_deref().unwrap_or(""),
                    window_start = %props.window.start,
                    "the window state does not decode (a deploy changed its shape?): \
                     the window goes on with a fresh state"
                );
                S::default()
            }),
            None => S::default(),
        };
        let mut failure: Option<(String, RecordError)> = None;
        'records: for (item, unit) in Kinesis::units_of(event_json)
            .map_err(crate::Error::Event)?
            .items
        {
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
        let action = |source| crate::Error::Window {
            what: "action",
            source,
        };
        let encoded = |state: &S| {
            serde_json::to_string(state).map_err(|e| crate::Error::Window {
                what: "state",
                source: e.into(),
            })
        };
        let window = |terminated_early| WindowInfo {
            start: props.window.start,
            end: props.window.end,
            shard_id: props.shard_id.clone(),
            terminated_early,
        };
        let mut response = KinesisTimeWindowEventResponse::default();
        if let Some((item, error)) = failure {
            let logged = crate::processing::redact::LoggedError {
                error: &error,
                values: false,
            };
            tracing::warn!(item, error = %logged, "window record failed");
            response.other.insert(
                "batchItemFailures".to_owned(),
                serde_json::json!([{ "itemIdentifier": item }]),
            );
        } else if props.is_final_invoke_for_window {
            (self.on_window)(state, window(props.is_window_terminated_early))
                .await
                .map_err(action)?;
            return Ok(response);
        }
        let mut kept = encoded(&state)?;
        let sent = sent_size(&kept);
        if sent > MAX_STATE_BYTES {
            tracing::warn!(
                bytes = sent,
                max = MAX_STATE_BYTES,
                "the window state would pass what Lambda carries: the window ends early \
                 and goes on with a fresh state"
            );
            (self.on_window)(state, window(true))
                .await
                .map_err(action)?;
            kept = encoded(&S::default())?;
        }
        response
            .time_window_event_response_properties
            .state
            .insert(STATE_KEY.to_owned(), kept);
        Ok(response)
    }
}

/// The size of the state map `{"<STATE_KEY>": "<state>"}` as the response
/// sends it: the state's JSON text is a string there, escaped.
fn sent_size(state_json: &str) -> usize {
    let map = std::collections::BTreeMap::from([(STATE_KEY, state_json)]);
    serde_json::to_string(&map)
        .expect("a map of strings encodes")
        .len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_sent_counts_escapes() {
        let state = r#"{"a":"b"}"#;
        let sent = r#"{"shardkeeper":"{\"a\":\"b\"}"}"#;
        assert_eq!(sent_size(state), sent.len());
        let unescaped = format!(r#"{{"{STATE_KEY}":"{state}"}}"#);
        assert_eq!(sent.len(), unescaped.len() + 4, "one backslash per quote");
    }
}
