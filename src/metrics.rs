//! CloudWatch Embedded Metric Format: metrics as one JSON log line.
//!
//! - Namespace: `SHARDKEEPER_METRICS_NAMESPACE`, else
//!   `POWERTOOLS_METRICS_NAMESPACE`, else [`NAMESPACE`].
//! - Dimensions: every function writes the same three, `Function` (the
//!   Lambda function's name, `local` outside Lambda), `Group` and `Stream`
//!   (see [`Dimensions`]).
//! - Values: a number, or a distribution (`Values` and `Counts`, from which
//!   CloudWatch computes percentiles) of at most 100 values.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

/// The namespace metrics go to when no variable names one.
pub const NAMESPACE: &str = "shardkeeper";

/// The variables that name the namespace, the first one set wins.
pub const NAMESPACE_VARIABLES: [&str; 2] = [
    "SHARDKEEPER_METRICS_NAMESPACE",
    "POWERTOOLS_METRICS_NAMESPACE",
];

/// The namespace of this process's metrics (read once).
pub fn namespace() -> &'static str {
    static NS: OnceLock<String> = OnceLock::new();
    NS.get_or_init(|| {
        NAMESPACE_VARIABLES
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
            .unwrap_or_else(|| NAMESPACE.to_owned())
    })
}

/// The name of the function this process runs (`AWS_LAMBDA_FUNCTION_NAME`,
/// else `local`; read once).
pub fn function_name() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "local".to_owned())
    })
}

/// `1` the first time it is asked in this process (the first invocation of
/// a new execution environment: a cold start), `0` after.
pub fn cold_start() -> f64 {
    static ASKED: AtomicBool = AtomicBool::new(false);
    f64::from(u8::from(!ASKED.swap(true, Ordering::Relaxed)))
}

/// What names a stream in the metrics' `Stream` dimension: a Kinesis
/// stream's name, a DynamoDB stream's table name (from its ARN), `-` for
/// none.
pub fn stream_dimension(arn: Option<&str>) -> &str {
    let Some(arn) = arn else { return "-" };
    match arn.split_once(":stream/") {
        Some((_, name)) => name,
        None => arn
            .split_once(":table/")
            .map_or(arn, |(_, rest)| rest.split('/').next().unwrap_or(rest)),
    }
}

/// The dimensions every metric carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dimensions<'a> {
    /// The function writing (see [`function_name`]).
    pub function: &'a str,
    /// The consumer group (a processor without a state store: `-`).
    pub group: &'a str,
    /// The stream's name (a DynamoDB stream: its table's name; `-` when
    /// the event names none).
    pub stream: &'a str,
}

impl Dimensions<'_> {
    fn pairs(&self) -> [(&'static str, &str); 3] {
        [
            ("Function", self.function),
            ("Group", self.group),
            ("Stream", self.stream),
        ]
    }
}

/// A metric's value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricValue {
    /// One number.
    One(f64),
    /// A distribution: each value with how often it came, at most 100
    /// values (see [`Distribution`]).
    Many(Vec<(f64, u32)>),
}

impl MetricValue {
    /// The number, if the value is one.
    pub fn one(&self) -> Option<f64> {
        match self {
            MetricValue::One(v) => Some(*v),
            MetricValue::Many(_) => None,
        }
    }
}

/// One metric with its CloudWatch unit (`Count`, `Milliseconds`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Metric name (the toolkit's are fixed; a handler's, see
    /// [`crate::processing::add_metric`], are its own).
    pub name: std::borrow::Cow<'static, str>,
    /// Value.
    pub value: MetricValue,
    /// CloudWatch unit.
    pub unit: &'static str,
}

impl Metric {
    /// A `Count` metric.
    pub fn count(name: &'static str, value: impl Into<f64>) -> Self {
        Metric {
            name: name.into(),
            value: MetricValue::One(value.into()),
            unit: "Count",
        }
    }

    /// A metric of one value in `unit`.
    pub fn of(name: &'static str, value: impl Into<f64>, unit: &'static str) -> Self {
        Metric {
            name: name.into(),
            value: MetricValue::One(value.into()),
            unit,
        }
    }
}

/// Durations (ms) kept as a distribution CloudWatch takes percentiles of:
/// each rounded to two significant digits (about 100 distinct values a
/// decade at most), and past the 100 values EMF allows per metric the two
/// closest merge into the larger.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Distribution {
    counts: BTreeMap<u64, u32>,
}

impl Distribution {
    /// Adds one value (ms).
    pub fn add(&mut self, ms: f64) {
        *self.counts.entry(round2(ms)).or_default() += 1;
        self.compact();
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Distribution) {
        for (us, count) in &other.counts {
            *self.counts.entry(*us).or_default() += count;
        }
        self.compact();
    }

    /// Past 100 values, merges the two closest (in ratio) into the larger,
    /// until 100 are left.
    fn compact(&mut self) {
        while self.counts.len() > 100 {
            let keys: Vec<u64> = self.counts.keys().copied().collect();
            let (i, _) = keys
                .windows(2)
                .enumerate()
                .min_by(|(_, a), (_, b)| {
                    let ra = a[1] as f64 / a[0].max(1) as f64;
                    let rb = b[1] as f64 / b[0].max(1) as f64;
                    ra.total_cmp(&rb)
                })
                .expect("more than 100 values");
            let moved = self.counts.remove(&keys[i]).unwrap_or_default();
            *self.counts.entry(keys[i + 1]).or_default() += moved;
        }
    }

    /// How many values were added.
    pub fn len(&self) -> u32 {
        self.counts.values().sum()
    }

    /// Nothing added.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The values (ms) with their counts, smallest first.
    pub fn values(&self) -> Vec<(f64, u32)> {
        self.counts
            .iter()
            .map(|(k, c)| (*k as f64 / 1000.0, *c))
            .collect()
    }
}

/// `ms` rounded to two significant digits, in microseconds.
fn round2(ms: f64) -> u64 {
    let us = (ms.max(0.0) * 1000.0).round() as u64;
    if us < 100 {
        return us;
    }
    let scale = 10u64.pow(us.ilog10() - 1);
    (us + scale / 2) / scale * scale
}

/// The EMF document for `metrics` under `dimensions`, in `namespace`.
pub fn emf_document(
    timestamp_ms: i64,
    namespace: &str,
    dimensions: &Dimensions<'_>,
    metrics: &[Metric],
) -> Value {
    let pairs = dimensions.pairs();
    let mut doc = Map::new();
    doc.insert(
        "_aws".to_owned(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [pairs.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                "Metrics": metrics.iter().map(|m| json!({"Name": m.name, "Unit": m.unit})).collect::<Vec<_>>(),
            }],
        }),
    );
    for (k, v) in pairs {
        doc.insert(k.to_owned(), json!(v));
    }
    for m in metrics {
        let value = match &m.value {
            MetricValue::One(v) => json!(v),
            MetricValue::Many(values) => json!({
                "Values": values.iter().map(|(v, _)| *v).collect::<Vec<_>>(),
                "Counts": values.iter().map(|(_, c)| *c).collect::<Vec<_>>(),
            }),
        };
        doc.insert(m.name.to_string(), value);
    }
    Value::Object(doc)
}

/// Writes the EMF document to standard output, where Lambda sends it to
/// CloudWatch Logs, in this process's [`namespace`].
pub fn emit(timestamp_ms: i64, dimensions: &Dimensions<'_>, metrics: &[Metric]) {
    println!(
        "{}",
        emf_document(timestamp_ms, namespace(), dimensions, metrics)
    );
}

/// Writes `metrics` for this function and the store's group and stream.
pub fn emit_for(store: &crate::state::StateStore, metrics: &[Metric]) {
    let config = store.config();
    emit(
        store.now(),
        &Dimensions {
            function: function_name(),
            group: config.group.as_str(),
            stream: config.stream.name().as_str(),
        },
        metrics,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_follows_the_embedded_metric_format() {
        let mut durations = Distribution::default();
        for ms in [1.0, 1.0, 2.5] {
            durations.add(ms);
        }
        let doc = emf_document(
            1_700_000_000_000,
            "orders-app",
            &Dimensions {
                function: "worker",
                group: "billing",
                stream: "orders",
            },
            &[
                Metric::count("LiveConsumers", 3),
                Metric {
                    name: "HandlerDuration".into(),
                    value: MetricValue::Many(durations.values()),
                    unit: "Milliseconds",
                },
            ],
        );
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "orders-app");
        assert_eq!(
            directive["Dimensions"],
            json!([["Function", "Group", "Stream"]])
        );
        assert_eq!(
            directive["Metrics"][0],
            json!({"Name": "LiveConsumers", "Unit": "Count"})
        );
        assert_eq!(doc["Function"], "worker");
        assert_eq!(doc["Group"], "billing");
        assert_eq!(doc["LiveConsumers"], 3.0);
        assert_eq!(
            doc["HandlerDuration"],
            json!({"Values": [1.0, 2.5], "Counts": [2, 1]})
        );
    }

    #[test]
    fn a_distribution_keeps_at_most_a_hundred_values_and_every_count() {
        let mut d = Distribution::default();
        for i in 0..100_000u32 {
            d.add(f64::from(i % 7919) * 0.37);
        }
        assert!(d.values().len() <= 100, "{}", d.values().len());
        assert_eq!(d.len(), 100_000);
        // Two significant digits: 123.4 ms is kept as 120.
        let mut one = Distribution::default();
        one.add(123.4);
        assert_eq!(one.values(), vec![(120.0, 1)]);
    }

    #[test]
    fn a_stream_is_named_by_its_name_or_its_tables() {
        assert_eq!(
            stream_dimension(Some("arn:aws:kinesis:us-east-1:123456789012:stream/orders")),
            "orders"
        );
        assert_eq!(
            stream_dimension(Some(
                "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-11-26T00:00:00.000"
            )),
            "Orders"
        );
        assert_eq!(stream_dimension(None), "-");
    }

    #[test]
    fn the_first_ask_is_the_cold_start() {
        // Other tests of this process may have asked first: after one ask,
        // every later one is warm.
        let _ = cold_start();
        assert_eq!(cold_start(), 0.0);
    }
}
