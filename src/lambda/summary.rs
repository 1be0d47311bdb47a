//! What an invocation of a batch processor tells when it ends: one log
//! line and one EMF document of its report's counters.

use crate::metrics::Metric;
use crate::processing::outcome::BatchReport;
use std::time::SystemTime;

/// One log line and one EMF document per invocation, for the counters of
/// its report.
pub(crate) fn summarize(
    request_id: &str,
    started: SystemTime,
    report: &BatchReport,
    dimensions: &crate::metrics::Dimensions<'_>,
    handler_metrics: Vec<Metric>,
) {
    let failed = report.failures.len() as u64;
    tracing::info!(
        request_id,
        processed = report.processed,
        duplicates_skipped = report.duplicates_skipped,
        failed,
        parked = report.parked,
        park_failures = report.park_failures,
        not_attempted = report.not_attempted,
        checkpoints = report.checkpoints,
        state_errors = report.state_errors,
        deduplication_off = report.deduplication_off,
        "batch done"
    );
    let now = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    let mut metrics = batch_metrics(report, now);
    metrics.push(Metric::count("ColdStart", crate::metrics::cold_start()));
    metrics.extend(handler_metrics);
    crate::metrics::emit(now, dimensions, &metrics);
}

/// The metrics of one batch: its counters, and the age of the newest record
/// handled (when the records carry arrival times).
fn batch_metrics(report: &BatchReport, now: i64) -> Vec<Metric> {
    let mut metrics = vec![
        Metric::count("RecordsProcessed", report.processed as f64),
        Metric::count("DuplicatesSkipped", report.duplicates_skipped as f64),
        Metric::count("RecordsFailed", report.failures.len() as f64),
        Metric::count("RecordsParked", report.parked as f64),
        Metric::count("ParkFailures", report.park_failures as f64),
        Metric::count("RecordsNotAttempted", report.not_attempted as f64),
        Metric::count("Checkpoints", report.checkpoints as f64),
        Metric::count("StateStoreErrors", report.state_errors as f64),
        Metric::count(
            "DeduplicationOff",
            f64::from(u8::from(report.deduplication_off)),
        ),
        Metric::count("MixedKeyAggregates", report.mixed_key_aggregates as f64),
    ];
    metrics.push(Metric::of(
        "BytesProcessed",
        report.bytes_processed as f64,
        "Bytes",
    ));
    if !report.handler_durations.is_empty() {
        metrics.push(Metric {
            name: "HandlerDuration".into(),
            value: crate::metrics::MetricValue::Many(report.handler_durations.values()),
            unit: "Milliseconds",
        });
    }
    if let Some(arrival) = report.newest_arrival {
        metrics.push(Metric::of(
            "NewestRecordAge",
            now.saturating_sub(arrival).max(0) as f64,
            "Milliseconds",
        ));
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_reports_every_counter_and_the_newest_record_age() {
        let report = BatchReport {
            processed: 5,
            duplicates_skipped: 2,
            parked: 1,
            not_attempted: 3,
            checkpoints: 2,
            park_failures: 1,
            newest_arrival: Some(1_000),
            ..BatchReport::default()
        };
        let metrics = batch_metrics(&report, 4_500);
        assert_eq!(
            metrics
                .iter()
                .find(|m| m.name == "StateStoreErrors")
                .and_then(|m| m.value.one()),
            Some(0.0)
        );
        let value = |name: &str| {
            metrics
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.value.one())
        };
        assert_eq!(value("RecordsProcessed"), Some(5.0));
        assert_eq!(value("DuplicatesSkipped"), Some(2.0));
        assert_eq!(value("RecordsFailed"), Some(0.0));
        assert_eq!(value("RecordsParked"), Some(1.0));
        assert_eq!(value("ParkFailures"), Some(1.0));
        assert_eq!(value("RecordsNotAttempted"), Some(3.0));
        assert_eq!(value("Checkpoints"), Some(2.0));
        assert_eq!(value("NewestRecordAge"), Some(3_500.0));
        let without_times = batch_metrics(&BatchReport::default(), 4_500);
        assert!(without_times.iter().all(|m| m.name != "NewestRecordAge"));
    }
}
