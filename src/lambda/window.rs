//! Tumbling windows: aggregate a Kinesis shard's records over a time window,
//! with the state carried between invocations by Lambda, and act once on
//! the final invoke of each window.

use crate::lambda::kinesis::Kinesis;
use crate::metrics::Metric;
use crate::processing::handler::HandlerError;
use crate::processing::options::ProcessingOptions;
use crate::processing::outcome::RecordError;
use crate::processing::parking::{park_at_limit, AtLimit};
use crate::processing::record::StreamRecord;
use crate::processing::unit::Unit;
use crate::state::{RecordKey, SequenceNumber, ShardId, StateStore};
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
/// deploy) is logged once, as an error, and replaced by a fresh one
/// (counted in `WindowStatesDropped`). A failure of `on_window` fails the
/// invocation (Lambda retries it with the same state); `on_window` runs at
/// most once per invocation.
///
/// With a state store ([`KinesisWindowProcessor::with_store`]) failures are
/// bounded as the batch processors bound them ([`ProcessingOptions`]:
/// `max_attempts`, `parking`): a record whose fold failed `max_attempts`
/// times is parked and left out of the window's state, and the window goes
/// on; a window whose action failed `max_attempts` times is parked (its
/// state as the parked record's data, keyed by the window: it is not put
/// back on a stream) and closed, where Lambda would hold the shard until
/// the action succeeds.
pub struct KinesisWindowProcessor<S, A, F> {
    fold: A,
    on_window: F,
    store: Option<StateStore>,
    options: ProcessingOptions,
    _s: std::marker::PhantomData<fn() -> S>,
}

/// What one window invocation set aside (for its metrics).
#[derive(Debug, Default)]
struct SetAside {
    records_parked: u64,
    actions_parked: u64,
    states_dropped: u64,
    /// The event's stream, for the metrics' dimension.
    stream: Option<String>,
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
            store: None,
            options: ProcessingOptions::default(),
            _s: std::marker::PhantomData,
        }
    }

    /// Counts the attempts of failing folds and actions in `store`, and
    /// parks them there or where [`KinesisWindowProcessor::with_options`]
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
    ) -> crate::Result<KinesisTimeWindowEventResponse> {
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
    pub async fn process(&self, event_json: &str) -> crate::Result<KinesisTimeWindowEventResponse> {
        Ok(Box::pin(self.run(event_json)).await?.0)
    }

    /// Counts a failed attempt of `record` (kept under `key`) and parks it
    /// at `max_attempts`; `true` if it was parked. Without a store nothing
    /// is counted.
    async fn give_up(
        &self,
        key: Option<RecordKey>,
        record: &StreamRecord,
        error: &RecordError,
    ) -> bool {
        let (Some(store), Some(key)) = (&self.store, key) else {
            return false;
        };
        let attempt = crate::processing::RecordContext::current()
            .map(|c| c.request_id)
            .filter(|id| !id.is_empty());
        let at_limit = park_at_limit(
            store,
            &self.options,
            &key,
            record,
            error,
            attempt.as_deref(),
            None,
        )
        .await;
        match at_limit {
            AtLimit::Parked(_) => true,
            AtLimit::Below => false,
            AtLimit::Uncounted(e) => {
                tracing::warn!(error = %e, "the attempt could not be counted");
                false
            }
            AtLimit::ParkFailed(e) => {
                tracing::error!(error = %e, "parking failed; the failure is reported");
                false
            }
        }
    }

    /// [`KinesisWindowProcessor::process`], with what it set aside.
    async fn run(
        &self,
        event_json: &str,
    ) -> crate::Result<(KinesisTimeWindowEventResponse, SetAside)> {
        let mut set_aside = SetAside::default();
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
                set_aside.states_dropped += 1;
                S::default()
            }),
            None => S::default(),
        };
        let mut units = Kinesis::units_of(event_json).map_err(crate::Error::Event)?;
        if units.stream.is_none() {
            // A final invoke holds no records: the event's own ARN.
            units.stream = serde_json::from_str::<EventArn>(event_json)
                .ok()
                .and_then(|e| e.arn);
        }
        set_aside.stream = units.stream.clone();
        let consumer = self.consumer();
        let shard = props.shard_id.clone().or(units.shard.clone());
        let key_of = |record: &StreamRecord| -> Option<RecordKey> {
            Some(RecordKey {
                consumer: Some(consumer.clone()),
                source: Some(units.stream.clone()?),
                shard_id: Some(ShardId::new(shard.as_deref()?).ok()?),
                event_id: None,
                sequence: SequenceNumber::new(&record.sequence_number).ok()?,
                sub_sequence: record.sub_sequence,
            })
        };
        let mut failure: Option<(String, RecordError)> = None;
        'records: for (item, unit) in units.items.iter().cloned() {
            let records = match unit {
                Unit::Record(record) => vec![record],
                Unit::Records(records) => records,
                Unit::Broken(record, error) => {
                    if self.give_up(key_of(&record), &record, &error).await {
                        set_aside.records_parked += 1;
                        continue;
                    }
                    failure = Some((item.to_string(), error));
                    break;
                }
                Unit::Unreadable(_, error) => {
                    failure = Some((item.to_string(), error));
                    break;
                }
            };
            // A failure rolls back the whole outer record (all of a KPL
            // aggregate's user records): the retry delivers it whole again.
            // A user record parked instead is left out: the ones before it
            // are folded again on the state from before the outer record.
            let before = state.clone();
            let mut left_out = Vec::new();
            let mut i = 0;
            while i < records.len() {
                let record = &records[i];
                if left_out.contains(&i) {
                    i += 1;
                    continue;
                }
                if let Err(e) = (self.fold)(&mut state, record.clone()) {
                    let error = RecordError::Handler {
                        sequence_number: record.sequence_number.to_string(),
                        sub_sequence: record.sub_sequence,
                        error: e.into().to_string(),
                    };
                    state = before.clone();
                    if self.give_up(key_of(record), record, &error).await {
                        set_aside.records_parked += 1;
                        left_out.push(i);
                        i = 0;
                        continue;
                    }
                    failure = Some((record.sequence_number.to_string(), error));
                    break 'records;
                }
                i += 1;
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
                values: self.options.log_values,
            };
            tracing::warn!(item, error = %logged, "window record failed");
            response.other.insert(
                "batchItemFailures".to_owned(),
                serde_json::json!([{ "itemIdentifier": item }]),
            );
        } else if props.is_final_invoke_for_window {
            let kept = encoded(&state)?;
            let info = window(props.is_window_terminated_early);
            let done = (self.on_window)(state, info).await;
            if let Err(e) = done {
                if self
                    .park_window(&props, &units.stream, e.to_string(), &kept)
                    .await
                {
                    set_aside.actions_parked += 1;
                    return Ok((response, set_aside));
                }
                return Err(action(e));
            }
            return Ok((response, set_aside));
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
            if let Err(e) = (self.on_window)(state, window(true)).await {
                if !self
                    .park_window(&props, &units.stream, e.to_string(), &kept)
                    .await
                {
                    return Err(action(e));
                }
                set_aside.actions_parked += 1;
            }
            kept = encoded(&S::default())?;
        }
        response
            .time_window_event_response_properties
            .state
            .insert(STATE_KEY.to_owned(), kept);
        Ok((response, set_aside))
    }

    /// Whose attempts and parked records these are: the configured consumer,
    /// else the invoked function with its qualifier, else `local`.
    fn consumer(&self) -> String {
        if let Some(consumer) = &self.options.consumer {
            return consumer.clone();
        }
        crate::processing::RecordContext::current()
            .filter(|c| !c.function_name.is_empty())
            .map_or_else(
                || "local".to_owned(),
                |c| crate::lambda::processor::qualified(&c.function_name, &c.function_arn),
            )
    }

    /// Counts a failed attempt of the window's action and, at
    /// `max_attempts`, parks the window (its state, `state_json`, as the
    /// data; keyed by the window's shard and start as an event id, so no
    /// replay puts it on a stream); `true` if it was parked.
    async fn park_window(
        &self,
        props: &TimeWindowProperties,
        stream: &Option<String>,
        error: String,
        state_json: &str,
    ) -> bool {
        let shard = props.shard_id.clone().unwrap_or_default();
        let start = props.window.start.timestamp_millis().max(0);
        let Ok(sequence) = SequenceNumber::new(&start.to_string()) else {
            return false;
        };
        let key = stream.as_ref().map(|stream| RecordKey {
            consumer: Some(self.consumer()),
            source: Some(stream.clone()),
            shard_id: None,
            event_id: Some(format!("window-{shard}-{start}")),
            sequence,
            sub_sequence: 0,
        });
        let record = StreamRecord {
            shard_id: shard.as_str().into(),
            sequence_number: start.to_string().into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "window".into(),
            explicit_hash_key: None,
            data: bytes::Bytes::copy_from_slice(state_json.as_bytes()),
            approximate_arrival: None,
            event_source_arn: stream.as_deref().map(Into::into),
            change: None,
        };
        let error = RecordError::Window {
            window_start: start.to_string(),
            error,
        };
        let parked = self.give_up(key, &record, &error).await;
        if parked {
            tracing::error!(
                shard,
                window_start = start,
                "the window's action kept failing: the window is parked and closed"
            );
        }
        parked
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
