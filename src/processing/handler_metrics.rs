//! A handler's own metrics, in the invocation's EMF document: what a
//! handler adds with [`add_metric`] while a processor or the shard-worker
//! function runs it is summed per name and written with the invocation's
//! metrics, under the same namespace and dimensions (`Function`, `Group`,
//! `Stream`), as Powertools' metrics utility writes a function's own beside
//! its cold start. Outside an invocation (a test calling the handler, a
//! task the handler spawned) a metric is not kept, and `add_metric` says so.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Each metric added: its unit and sum, by name.
type Added = Mutex<BTreeMap<String, (&'static str, f64)>>;

tokio::task_local! {
    static ADDED: Added;
}

/// Adds `value` to the handler's metric `name` in `unit` (a CloudWatch
/// unit: `Count`, `Milliseconds`, `Bytes`, …) for the invocation it runs
/// in; values of one name are summed (the unit of the first one stays).
/// Returns `false` outside an invocation, where nothing is kept.
///
/// ```
/// use shardkeeper::processing::{add_metric, StreamRecord};
///
/// let handler = |record: StreamRecord| async move {
///     // … write the order …
///     add_metric("OrdersWritten", 1.0, "Count");
///     add_metric("OrderBytes", record.data.len() as f64, "Bytes");
///     Ok::<(), std::io::Error>(())
/// };
/// # let _ = handler;
/// ```
pub fn add_metric(name: &str, value: f64, unit: &'static str) -> bool {
    ADDED
        .try_with(|added| {
            let mut added = added.lock().unwrap_or_else(|e| e.into_inner());
            added.entry(name.to_owned()).or_insert((unit, 0.0)).1 += value;
        })
        .is_ok()
}

/// Runs `work` keeping the metrics its handler calls add; they come back
/// with its output, as metrics of the invocation's document.
#[cfg(any(feature = "esm", feature = "worker", test))]
pub(crate) async fn collecting<F: std::future::Future>(
    work: F,
) -> (F::Output, Vec<crate::metrics::Metric>) {
    use crate::metrics::{Metric, MetricValue};
    let (output, added) = ADDED
        .scope(Mutex::new(BTreeMap::new()), async {
            let output = work.await;
            let added =
                ADDED.with(|a| std::mem::take(&mut *a.lock().unwrap_or_else(|e| e.into_inner())));
            (output, added)
        })
        .await;
    let metrics = added
        .into_iter()
        .map(|(name, (unit, sum))| Metric {
            name: name.into(),
            value: MetricValue::One(sum),
            unit,
        })
        .collect();
    (output, metrics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metric;

    #[tokio::test]
    async fn a_handlers_metrics_are_summed_in_its_invocation_and_kept_nowhere_else() {
        assert!(
            !add_metric("OrdersWritten", 1.0, "Count"),
            "outside an invocation"
        );
        let ((), metrics) = collecting(async {
            assert!(add_metric("OrdersWritten", 1.0, "Count"));
            assert!(add_metric("OrdersWritten", 2.0, "Count"));
            assert!(add_metric("OrderBytes", 512.0, "Bytes"));
        })
        .await;
        let found = |name: &str| metrics.iter().find(|m| m.name == name).cloned();
        let written = found("OrdersWritten").unwrap();
        assert_eq!((written.value.one(), written.unit), (Some(3.0), "Count"));
        assert_eq!(found("OrderBytes").unwrap().value.one(), Some(512.0));
        // In the invocation's document, beside its own metrics, under the
        // same dimensions.
        let dimensions = crate::metrics::Dimensions {
            function: "orders",
            group: "orders-app",
            stream: "orders",
        };
        let mut all = vec![Metric::count("RecordsProcessed", 3.0)];
        all.extend(metrics);
        let doc = crate::metrics::emf_document(0, "shardkeeper", &dimensions, &all);
        assert_eq!(doc["OrdersWritten"], 3.0);
        assert_eq!(doc["RecordsProcessed"], 3.0);
        assert_eq!(doc["Group"], "orders-app");
        let names: Vec<&str> = doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["Name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"OrdersWritten") && names.contains(&"OrderBytes"),
            "{names:?}"
        );
    }
}
