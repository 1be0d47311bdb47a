//! Log lines in the shape of Powertools for AWS Lambda's logger, so a team
//! that queries Powertools' logs queries these the same way: one JSON
//! object a line with Powertools' standard keys (`level`, `location`,
//! `message`, `timestamp`, `service`, and inside an invocation
//! `cold_start`, `function_name`, `function_memory_size`, `function_arn`,
//! `function_request_id`, `xray_trace_id`;
//! <https://docs.powertools.aws.dev/lambda/python/latest/core/logger/#standard-structured-keys>),
//! the fields of the spans the line is in (the record's shard and sequence
//! number, …) and the event's own fields, each a key of its own.
//!
//! The service is `POWERTOOLS_SERVICE_NAME` (Powertools' default
//! `service_undefined` without it); the level `POWERTOOLS_LOG_LEVEL`, else
//! Lambda's `AWS_LAMBDA_LOG_LEVEL`, else `RUST_LOG`, else `info`.

use crate::processing::labels::CallLabels;
use crate::processing::RecordContext;
use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// Powertools' service name when none is set.
const NO_SERVICE: &str = "service_undefined";

/// The formatter of Powertools-shaped lines.
#[derive(Debug, Clone)]
pub(crate) struct PowertoolsJson {
    service: String,
    memory_size: Option<u64>,
}

impl PowertoolsJson {
    /// The service and memory size from the environment.
    pub(crate) fn from_env() -> Self {
        PowertoolsJson {
            service: std::env::var("POWERTOOLS_SERVICE_NAME")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| NO_SERVICE.to_owned()),
            memory_size: std::env::var("AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
                .ok()
                .and_then(|m| m.parse().ok()),
        }
    }

    /// The level filter: `POWERTOOLS_LOG_LEVEL`, else `AWS_LAMBDA_LOG_LEVEL`,
    /// else `RUST_LOG`, else `info`.
    pub(crate) fn filter_from_env() -> tracing_subscriber::EnvFilter {
        let level = ["POWERTOOLS_LOG_LEVEL", "AWS_LAMBDA_LOG_LEVEL", "RUST_LOG"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| "info".to_owned());
        tracing_subscriber::EnvFilter::try_new(level.to_ascii_lowercase())
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    }
}

/// An event's fields, each into `map` (`message` among them).
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_owned(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), format!("{value:?}").into());
    }
}

impl<S, N> FormatEvent<S, N> for PowertoolsJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = Map::new();
        // The spans' fields, outermost first (an inner span's wins), as the
        // JSON the subscriber's field formatter kept for each.
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>() {
                    if let Ok(Value::Object(map)) = serde_json::from_str(fields.as_str()) {
                        line.extend(map);
                    }
                }
            }
        }
        // The record of the handler call the line is logged in.
        CallLabels::add_current(&mut line);
        event.record(&mut Fields(&mut line));
        let meta = event.metadata();
        let standard = [
            ("level", Value::from(meta.level().as_str())),
            (
                "location",
                format!("{}:{}", meta.target(), meta.line().unwrap_or(0)).into(),
            ),
            (
                "timestamp",
                chrono::Utc::now()
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                    .into(),
            ),
            ("service", self.service.as_str().into()),
        ];
        line.extend(standard.map(|(k, v)| (k.to_owned(), v)));
        line.entry("message").or_insert_with(|| "".into());
        if let Some(context) = RecordContext::current() {
            let invocation = [
                ("cold_start", Value::from(context.cold_start)),
                ("function_name", (*context.function_name).into()),
                ("function_memory_size", self.memory_size.into()),
                ("function_arn", (*context.function_arn).into()),
                ("function_request_id", (*context.request_id).into()),
                (
                    "xray_trace_id",
                    context
                        .xray_trace_id
                        .as_deref()
                        .map_or(Value::Null, Value::from),
                ),
            ];
            line.extend(invocation.map(|(k, v)| (k.to_owned(), v)));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::format::JsonFields;
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    fn logged(lines: &Lines) -> Vec<Map<String, Value>> {
        String::from_utf8(lines.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(|l| match serde_json::from_str(l).unwrap() {
                Value::Object(map) => map,
                other => panic!("not an object: {other}"),
            })
            .collect()
    }

    /// Powertools' standard keys, as its logger documents them
    /// (<https://docs.powertools.aws.dev/lambda/python/latest/core/logger/#standard-structured-keys>),
    /// on a line logged inside an invocation, with the record span's fields
    /// and the event's own beside them; outside an invocation, the keys
    /// that need none.
    #[test]
    fn a_line_has_powertools_standard_keys_and_the_spans_fields() {
        let lines = Lines::default();
        let format = PowertoolsJson {
            service: "orders".into(),
            memory_size: Some(256),
        };
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(JsonFields::new())
            .event_format(format)
            .with_writer(lines.clone())
            .finish();
        let mut lambda = lambda_runtime::Context::default();
        lambda.request_id = "c6af9ac6-7b61-11e6-9a41-93e812345678".into();
        lambda.invoked_function_arn =
            "arn:aws:lambda:eu-west-1:123456789012:function:orders".into();
        lambda.xray_trace_id = Some("1-5759e988-bd862e3fe1be46a994272793".into());
        let context = RecordContext::of(&lambda);
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("at init");
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(context.clone().scope(async {
                let span = tracing::info_span!(
                    "record",
                    shard = "shardId-000000000001",
                    sequence_number = "42"
                );
                let _entered = span.enter();
                tracing::warn!(attempt = 2, "handler failed");
            }));
        });
        let logged = logged(&lines);
        assert_eq!(logged.len(), 2);
        let (init, record) = (&logged[0], &logged[1]);
        for key in ["level", "location", "message", "timestamp", "service"] {
            assert!(init.contains_key(key), "{key} in {init:?}");
        }
        assert!(!init.contains_key("function_request_id"), "{init:?}");
        assert_eq!(init["service"], "orders");
        assert_eq!(record["level"], "WARN");
        assert_eq!(record["message"], "handler failed");
        assert_eq!(record["cold_start"], context.cold_start);
        assert_eq!(
            record["function_request_id"],
            "c6af9ac6-7b61-11e6-9a41-93e812345678"
        );
        assert_eq!(
            record["function_arn"],
            "arn:aws:lambda:eu-west-1:123456789012:function:orders"
        );
        assert_eq!(record["function_memory_size"], 256);
        assert!(record.contains_key("function_name"));
        assert_eq!(
            record["xray_trace_id"],
            "1-5759e988-bd862e3fe1be46a994272793"
        );
        assert_eq!(record["shard"], "shardId-000000000001");
        assert_eq!(record["sequence_number"], "42");
        assert_eq!(record["attempt"], 2);
        let location = record["location"].as_str().unwrap();
        assert!(
            location.starts_with("shardkeeper::functions::logs::tests:"),
            "{location}"
        );
        let timestamp = record["timestamp"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
            "{timestamp}"
        );
    }

    /// Under these lines a handler call is labelled without a span: the
    /// record's fields are on the lines the handler logs (and on no other),
    /// at any concurrency, and a subscriber of another kind gets the span.
    #[test]
    fn a_handlers_lines_carry_its_record_without_a_span() {
        use crate::processing::{Core, NoCheckpoints, ProcessingOptions, StreamRecord, Unit};
        let lines = Lines::default();
        let ours = tracing::Dispatch::new(
            tracing_subscriber::fmt()
                .fmt_fields(JsonFields::new())
                .event_format(PowertoolsJson::from_env())
                .with_writer(lines.clone())
                .finish(),
        );
        let handler = |record: StreamRecord| async move {
            tracing::info!(n = &*record.partition_key, "handled");
            Ok::<(), std::io::Error>(())
        };
        let units = (0..4).map(|i| {
            let record = StreamRecord {
                shard_id: "shardId-000000000002".into(),
                sequence_number: format!("{}", 100 + i).into(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: format!("key-{i}").into(),
                explicit_hash_key: None,
                data: bytes::Bytes::new(),
                approximate_arrival: None,
                event_source_arn: None,
                change: None,
            };
            (record.sequence_number.clone(), Unit::Record(record))
        });
        let units: Vec<_> = units.collect();
        for concurrency in [1, 4] {
            let options = ProcessingOptions::default().concurrency(concurrency);
            tracing::dispatcher::with_default(&ours, || {
                assert_eq!(
                    crate::processing::labels::Labelling::of(&options),
                    crate::processing::labels::Labelling::Lines
                );
                tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap()
                    .block_on(async {
                        tracing::info!("outside");
                        Core::new(&handler, None, &options)
                            .run(units.clone(), None, &mut NoCheckpoints)
                            .await
                            .unwrap();
                    });
            });
        }
        let logged = logged(&lines);
        let handled: Vec<_> = logged
            .iter()
            .filter(|l| l["message"] == "handled")
            .collect();
        assert_eq!(handled.len(), 8);
        for line in handled {
            let key = line["n"].as_str().unwrap();
            let i: u64 = key.trim_start_matches("key-").parse().unwrap();
            assert_eq!(line["partition_key"], key, "{line:?}");
            assert_eq!(line["sequence_number"], (100 + i).to_string());
            assert_eq!(line["shard"], "shardId-000000000002");
            assert_eq!(line["sub_sequence"], 0);
        }
        let outside = logged.iter().find(|l| l["message"] == "outside").unwrap();
        assert!(!outside.contains_key("sequence_number"), "{outside:?}");
        // Another subscriber: a span around each call.
        let other = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(other, || {
            assert_eq!(
                crate::processing::labels::Labelling::of(&ProcessingOptions::default()),
                crate::processing::labels::Labelling::Spans
            );
        });
    }
}
