//! The batch processor, generic over the event source.

use crate::metrics::Metric;
use crate::processing::core::{CheckpointSink, Core, NoCheckpoints};
use crate::processing::dynamodb::DynamoDbStreams;
use crate::processing::handler::RecordHandler;
use crate::processing::kinesis::Kinesis;
use crate::processing::options::ProcessingOptions;
use crate::processing::outcome::BatchReport;
use crate::processing::record::StreamRecord;
use crate::processing::source::EventSource;
use crate::state::{
    BatchKey, Checkpoint, CheckpointOutcome, RecordKey, Result as StateResult, SequenceNumber,
    ShardId, StateStore,
};
use bytes::Bytes;
use lambda_runtime::LambdaEvent;
use serde_json::value::RawValue;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

struct Inner<H> {
    handler: H,
    store: Option<StateStore>,
    options: ProcessingOptions,
}

/// Processes event-source-mapping batches of source `S` with a [`RecordHandler`].
///
/// Records are handled in order; by default the batch stops at the first
/// failure and reports it (`ReportBatchItemFailures`), so order is kept. With
/// a state store, records at or below the stored checkpoint are skipped (a
/// retried batch does not repeat side effects; Kinesis needs a
/// parallelization factor of 1 for this), the checkpoint advances after the
/// successful prefix, failed attempts are counted, and a record that failed
/// `max_attempts` times is parked so the shard moves on. Records that cannot
/// start before the Lambda deadline (minus a margin) are reported for retry.
///
/// Run it with `processor.run().await`, which reads each event once from
/// the invocation's bytes; or use it as
/// `lambda_runtime::run(service_fn(|e| processor.handle(e)))`, or pass the
/// processor itself to `lambda_runtime::run` (it is a `tower::Service`),
/// after the runtime's own pass over the event.
pub struct BatchProcessor<H, S> {
    inner: Arc<Inner<H>>,
    _source: PhantomData<fn() -> S>,
}

/// A processor of Kinesis Data Streams events (KPL aggregates de-aggregated).
pub type KinesisProcessor<H> = BatchProcessor<H, Kinesis>;
/// A processor of DynamoDB Streams events (see [`crate::processing::changes`]).
pub type DynamoDbProcessor<H> = BatchProcessor<H, DynamoDbStreams>;

impl<H, S> Clone for BatchProcessor<H, S> {
    fn clone(&self) -> Self {
        BatchProcessor {
            inner: self.inner.clone(),
            _source: PhantomData,
        }
    }
}

impl<H: RecordHandler, S: EventSource> BatchProcessor<H, S> {
    /// A processor without a state store: no de-duplication and no parking;
    /// ordering, de-aggregation and the deadline still apply.
    pub fn new(handler: H) -> Self {
        BatchProcessor {
            inner: Arc::new(Inner {
                handler,
                store: None,
                options: ProcessingOptions::default(),
            }),
            _source: PhantomData,
        }
    }

    /// Uses `store` for checkpoint de-duplication and attempt counting.
    pub fn with_store(self, store: StateStore) -> Self {
        self.configure(|inner| inner.store = Some(store))
    }

    /// Sets the failure mode, attempts, parking and deadline margin.
    pub fn with_options(self, options: ProcessingOptions) -> Self {
        self.configure(|inner| inner.options = options)
    }

    fn configure(self, f: impl FnOnce(&mut Inner<H>)) -> Self {
        let mut inner =
            Arc::into_inner(self.inner).expect("configure the processor before cloning it");
        f(&mut inner);
        BatchProcessor {
            inner: Arc::new(inner),
            _source: PhantomData,
        }
    }

    /// The Lambda handler: processes the event until its deadline, logs
    /// one summary line and writes its metrics (EMF), and returns the batch
    /// item failures.
    pub async fn handle(
        &self,
        event: LambdaEvent<Box<RawValue>>,
    ) -> Result<S::Response, lambda_runtime::Error> {
        // The text moves into the event's buffer: no copy.
        let text: Box<str> = event.payload.into();
        let body = Bytes::from(String::from(text));
        self.handle_bytes(body, &event.context).await
    }

    /// The Lambda handler over the invocation body as the runtime received
    /// it (bytes, read once here): processes the event until the context's
    /// deadline, logs one summary line and writes its metrics (EMF), and
    /// returns the batch item failures.
    pub async fn handle_bytes(
        &self,
        body: Bytes,
        context: &lambda_runtime::Context,
    ) -> Result<S::Response, lambda_runtime::Error> {
        let started = SystemTime::now();
        let report = self.process_bytes(body, Some(context.deadline())).await?;
        summarize(&context.request_id, started, &report);
        Ok(S::response(&report))
    }

    /// Processes one event (its JSON text) and says what happened. The error
    /// is for what cannot be reported per record: an event of another kind, a
    /// malformed record whose sequence number cannot be found, a state store
    /// failure. Copies the text once; [`BatchProcessor::process_bytes`]
    /// takes the runtime's buffer as it is.
    pub async fn process(
        &self,
        event_json: &str,
        deadline: Option<SystemTime>,
    ) -> Result<BatchReport, lambda_runtime::Error> {
        self.process_bytes(Bytes::copy_from_slice(event_json.as_bytes()), deadline)
            .await
    }

    /// Processes one event, its JSON as bytes (what the Lambda runtime
    /// receives), as [`BatchProcessor::process`] does; records keep slices
    /// of `event` rather than copies.
    pub async fn process_bytes(
        &self,
        event: Bytes,
        deadline: Option<SystemTime>,
    ) -> Result<BatchReport, lambda_runtime::Error> {
        let units = S::units(&event)?;
        let inner = &*self.inner;
        let core = Core::new(&inner.handler, inner.store.as_ref(), &inner.options);
        let stop_by = deadline.map(|d| stop_by(d, inner.options.deadline_margin));
        let batch = units
            .items
            .first()
            .and_then(|(first, _)| SequenceNumber::new(first).ok())
            .map(|first| BatchKey {
                stream: units.stream.clone().unwrap_or_else(|| UNKNOWN.to_owned()),
                shard: units.shard.clone().unwrap_or_default(),
                first,
            });
        let report = match (&inner.store, batch) {
            (Some(store), Some(batch)) => {
                let mut sink = EsmCheckpoints {
                    store,
                    batch,
                    ttl: inner.options.checkpoint_ttl,
                    committed: None,
                };
                let report = core.run(units.items, stop_by, &mut sink).await?;
                sink.carry_over(&report).await?;
                report
            }
            _ => core.run(units.items, stop_by, &mut NoCheckpoints).await?,
        };
        Ok(report)
    }
}

/// The stream of an event that does not name its source.
const UNKNOWN: &str = "unknown";

/// The one stop-by instant of an invocation: the deadline minus the margin,
/// or, with less time than the margin left, half of what is left (so at
/// least one record is attempted while any time is left, and the final
/// checkpoint still has time to land).
fn stop_by(deadline: SystemTime, margin: Duration) -> Instant {
    let left = deadline
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    let work = if left > margin {
        left - margin
    } else {
        left / 2
    };
    Instant::now() + work
}

/// One log line and one EMF document per invocation, for the counters of
/// its report.
fn summarize(request_id: &str, started: SystemTime, report: &BatchReport) {
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
        "batch done"
    );
    let now = started
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as i64;
    crate::metrics::emit(
        now,
        &[("Function", function_name())],
        &batch_metrics(report, now),
    );
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
    ];
    if let Some(arrival) = report.newest_arrival {
        metrics.push(Metric {
            name: "NewestRecordAge",
            value: (now - arrival).max(0) as f64,
            unit: "Milliseconds",
        });
    }
    metrics
}

/// The function's name, for the metrics' dimension.
fn function_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| {
        std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "local".to_owned())
    })
}

/// The checkpoints of event-source-mapped batches: one item per batch,
/// keyed by its stream, shard and first record (never a lease item; see
/// [`BatchKey`]); attempts and parked records keyed by the stream too.
struct EsmCheckpoints<'a> {
    store: &'a StateStore,
    batch: BatchKey,
    ttl: Duration,
    /// The last progress committed.
    committed: Option<Checkpoint>,
}

impl EsmCheckpoints<'_> {
    /// After a failure inside a KPL aggregate the progress ends within the
    /// failed record, and Lambda's next batch starts at that record (the
    /// lowest reported item identifier, under `ReportBatchItemFailures`):
    /// the progress is stored under that batch's key too, so the retry
    /// resumes inside the aggregate instead of repeating its first user
    /// records.
    async fn carry_over(&self, report: &BatchReport) -> StateResult<()> {
        let Some(Checkpoint::After { sequence, .. }) = &self.committed else {
            return Ok(());
        };
        let lowest = report
            .failures
            .iter()
            .filter_map(|f| SequenceNumber::new(&f.item_identifier).ok())
            .min();
        if lowest.as_ref() != Some(sequence) {
            return Ok(());
        }
        let next = BatchKey {
            first: sequence.clone(),
            ..self.batch.clone()
        };
        let cp = self.committed.as_ref().expect("checked");
        self.store.checkpoint_batch(&next, cp, self.ttl).await?;
        Ok(())
    }
}

impl CheckpointSink for EsmCheckpoints<'_> {
    async fn stored(&mut self) -> StateResult<Option<Checkpoint>> {
        self.store.batch_checkpoint(&self.batch).await
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> StateResult<bool> {
        let outcome = self
            .store
            .checkpoint_batch(&self.batch, checkpoint, self.ttl)
            .await?;
        self.committed = Some(checkpoint.clone());
        Ok(outcome == CheckpointOutcome::Stored)
    }

    fn record_key(
        &self,
        record: &StreamRecord,
        sequence: &SequenceNumber,
    ) -> StateResult<RecordKey> {
        let shard = (!record.shard_id.is_empty())
            .then(|| ShardId::new(&*record.shard_id))
            .transpose()?;
        Ok(RecordKey {
            source: Some(self.batch.stream.clone()),
            shard_id: shard,
            sequence: sequence.clone(),
            sub_sequence: record.sub_sequence,
        })
    }
}

impl<H: RecordHandler, S: EventSource> lambda_runtime::tower::Service<LambdaEvent<Box<RawValue>>>
    for BatchProcessor<H, S>
{
    type Response = S::Response;
    type Error = lambda_runtime::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, lambda_runtime::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), lambda_runtime::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Box<RawValue>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(event).await })
    }
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
        let value = |name: &str| metrics.iter().find(|m| m.name == name).map(|m| m.value);
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
