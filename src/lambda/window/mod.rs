//! Tumbling windows: aggregate a shard's records over a time window, with
//! the state carried between invocations by Lambda, and act once on the
//! final invoke of each window; for Kinesis and for DynamoDB Streams, as
//! Lambda runs windows on both.
//!
//! - `mod.rs`: the processor and its handler.
//! - `source`: what differs by stream (the event's records, the answer).
//! - `run`: one invocation: the fold over the records, the final action,
//!   the state's size.
//! - `park`: a fold or an action that keeps failing, counted and parked.

mod park;
mod run;
mod source;

pub use source::WindowSource;

use crate::metrics::Metric;
use crate::processing::handler::HandlerError;
use crate::processing::options::ProcessingOptions;
use crate::processing::outcome::RecordError;
use crate::processing::parking::{park_at_limit, AtLimit};
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use crate::state::{RecordKey, SequenceNumber, ShardId, StateStore};
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
/// deploy) is logged once, as an error, and replaced by a fresh one
/// (counted in `WindowStatesDropped`). A failure of `on_window` fails the
/// invocation (Lambda retries it with the same state); `on_window` runs at
/// most once per invocation.
///
/// With a state store ([`WindowProcessor::with_store`]) failures are
/// bounded as the batch processors bound them ([`ProcessingOptions`]:
/// `max_attempts`, `parking`): a record whose fold failed `max_attempts`
/// times is parked and left out of the window's state, and the window goes
/// on; a window whose action failed `max_attempts` times is parked (its
/// state as the parked record's data, keyed by the window: it is not put
/// back on a stream) and closed, where Lambda would hold the shard until
/// the action succeeds.
pub struct WindowProcessor<Src, S, A, F> {
    fold: A,
    on_window: F,
    store: Option<StateStore>,
    options: ProcessingOptions,
    _s: std::marker::PhantomData<fn() -> (Src, S)>,
}

/// Tumbling windows over a Kinesis shard's records (KPL aggregates
/// de-aggregated): a [`WindowProcessor`].
pub type KinesisWindowProcessor<S, A, F> = WindowProcessor<crate::lambda::Kinesis, S, A, F>;

/// Tumbling windows over a DynamoDB Streams shard's records (each record's
/// text in `data`, as an event-source-mapped processor's: decode it with
/// [`crate::processing::Change::from_event_json`]): a [`WindowProcessor`].
pub type DynamoDbWindowProcessor<S, A, F> =
    WindowProcessor<crate::lambda::DynamoDbStreams, S, A, F>;

/// What one window invocation set aside (for its metrics).
#[derive(Debug, Default)]
struct SetAside {
    records_parked: u64,
    actions_parked: u64,
    states_dropped: u64,
    /// The event's stream, for the metrics' dimension.
    stream: Option<String>,
}

impl<Src, S, A, F, Fut, E> WindowProcessor<Src, S, A, F>
where
    Src: WindowSource,
    S: Serialize + DeserializeOwned + Default + Clone + Send,
    A: Fn(&mut S, StreamRecord) -> Result<(), E> + Send + Sync,
    F: Fn(S, WindowInfo) -> Fut + Send + Sync,
    Fut: Future<Output = Result<(), HandlerError>> + Send,
    E: Into<HandlerError>,
{
    /// A window processor from a fold and a final action.
    pub fn new(fold: A, on_window: F) -> Self {
        WindowProcessor {
            fold,
            on_window,
            store: None,
            options: ProcessingOptions::default(),
            _s: std::marker::PhantomData,
        }
    }

    /// Counts the attempts of failing folds and actions in `store`, and
    /// parks them there or where [`WindowProcessor::with_options`]
    /// says, after `max_attempts`.
    pub fn with_store(mut self, store: StateStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Sets `max_attempts`, `parking`, `consumer` and `log_values` (the
    /// other options are the batch processors').
    pub fn with_options(mut self, options: ProcessingOptions) -> Self {
        self.options = options;
        self
    }

    /// The Lambda handler.
    pub async fn handle(
        &self,
        event: LambdaEvent<Box<RawValue>>,
    ) -> crate::Result<Src::WindowResponse> {
        let context = crate::processing::RecordContext::of(&event.context);
        let (ran, handler_metrics) = crate::processing::handler_metrics::collecting(
            context.scope(Box::pin(self.run(event.payload.get()))),
        )
        .await;
        let (response, set_aside) = ran?;
        let group = self
            .store
            .as_ref()
            .map_or("-", |s| s.config().group.as_str());
        let dimensions = crate::metrics::Dimensions {
            function: crate::metrics::function_name(),
            group,
            stream: crate::metrics::stream_dimension(set_aside.stream.as_deref()),
        };
        let now = crate::state::EpochMillis::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or_default();
        let mut metrics = vec![
            Metric::count("RecordsParked", set_aside.records_parked as f64),
            Metric::count("WindowActionsParked", set_aside.actions_parked as f64),
            Metric::count("WindowStatesDropped", set_aside.states_dropped as f64),
        ];
        metrics.extend(handler_metrics);
        crate::metrics::emit(now, &dimensions, &metrics);
        Ok(response)
    }

    /// Processes one time-window event (its JSON text).
    pub async fn process(&self, event_json: &str) -> crate::Result<Src::WindowResponse> {
        Ok(Box::pin(self.run(event_json)).await?.0)
    }
}

/// The stream ARN a time-window event names beside its records.
#[derive(serde::Deserialize)]
struct EventArn {
    #[serde(rename = "eventSourceARN")]
    arn: Option<String>,
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

    /// A state that no longer decodes is counted (`WindowStatesDropped`),
    /// not only logged.
    #[test]
    fn a_state_that_does_not_decode_is_counted() {
        let processor = KinesisWindowProcessor::new(
            |count: &mut u64, _: StreamRecord| -> Result<(), HandlerError> {
                *count += 1;
                Ok(())
            },
            |_: u64, _: WindowInfo| async { Ok(()) },
        );
        let event = serde_json::json!({
            "Records": [],
            "window": { "start": "2026-11-21T05:00:00Z", "end": "2026-11-21T05:01:00Z" },
            "state": { STATE_KEY: "\"not a number\"" },
            "shardId": "shardId-000000000000",
            "eventSourceARN": "arn:aws:kinesis:us-east-1:000000000000:stream/s",
            "isFinalInvokeForWindow": false,
            "isWindowTerminatedEarly": false,
        })
        .to_string();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (_, set_aside) = rt.block_on(processor.run(&event)).unwrap();
        assert_eq!(set_aside.states_dropped, 1);
        assert_eq!(
            set_aside.stream.as_deref(),
            Some("arn:aws:kinesis:us-east-1:000000000000:stream/s")
        );
    }

    #[test]
    fn the_size_sent_counts_escapes() {
        let state = r#"{"a":"b"}"#;
        let sent = r#"{"shardkeeper":"{\"a\":\"b\"}"}"#;
        assert_eq!(sent_size(state), sent.len());
        let unescaped = format!(r#"{{"{STATE_KEY}":"{state}"}}"#);
        assert_eq!(sent.len(), unescaped.len() + 4, "one backslash per quote");
    }
}
