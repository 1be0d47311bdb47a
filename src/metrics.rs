//! CloudWatch Embedded Metric Format: metrics as one JSON log line.

use serde_json::{json, Map, Value};

/// The namespace shardkeeper's metrics go to.
pub const NAMESPACE: &str = "shardkeeper";

/// One metric value with its CloudWatch unit (`Count`, `Milliseconds`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    /// Metric name.
    pub name: &'static str,
    /// Value.
    pub value: f64,
    /// CloudWatch unit.
    pub unit: &'static str,
}

impl Metric {
    /// A `Count` metric.
    pub fn count(name: &'static str, value: impl Into<f64>) -> Self {
        Metric {
            name,
            value: value.into(),
            unit: "Count",
        }
    }
}

/// The EMF document for `metrics` under `dimensions` (name, value pairs).
pub fn emf_document(timestamp_ms: i64, dimensions: &[(&str, &str)], metrics: &[Metric]) -> Value {
    let mut doc = Map::new();
    doc.insert(
        "_aws".to_owned(),
        json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [dimensions.iter().map(|(k, _)| *k).collect::<Vec<_>>()],
                "Metrics": metrics.iter().map(|m| json!({"Name": m.name, "Unit": m.unit})).collect::<Vec<_>>(),
            }],
        }),
    );
    for (k, v) in dimensions {
        doc.insert((*k).to_owned(), json!(v));
    }
    for m in metrics {
        doc.insert(m.name.to_owned(), json!(m.value));
    }
    Value::Object(doc)
}

/// Writes the EMF document to standard output, where Lambda sends it to CloudWatch Logs.
pub fn emit(timestamp_ms: i64, dimensions: &[(&str, &str)], metrics: &[Metric]) {
    println!("{}", emf_document(timestamp_ms, dimensions, metrics));
}

/// Writes `metrics` for the store's group and stream (dimensions `Group`, `Stream`).
pub fn emit_for(store: &crate::state::StateStore, metrics: &[Metric]) {
    let config = store.config();
    emit(
        store.now(),
        &[
            ("Group", config.group.as_str()),
            ("Stream", config.stream.name().as_str()),
        ],
        metrics,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_follows_the_embedded_metric_format() {
        let doc = emf_document(
            1_700_000_000_000,
            &[("Group", "billing"), ("Stream", "orders")],
            &[Metric::count("LiveConsumers", 3), Metric::count("Moves", 0)],
        );
        assert_eq!(doc["_aws"]["Timestamp"], 1_700_000_000_000i64);
        let directive = &doc["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(directive["Namespace"], "shardkeeper");
        assert_eq!(directive["Dimensions"], json!([["Group", "Stream"]]));
        assert_eq!(
            directive["Metrics"][0],
            json!({"Name": "LiveConsumers", "Unit": "Count"})
        );
        assert_eq!(doc["Group"], "billing");
        assert_eq!(doc["LiveConsumers"], 3.0);
    }
}
