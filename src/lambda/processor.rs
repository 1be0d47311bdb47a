//! The batch processor, generic over the event source.

use crate::lambda::batch_progress::BatchProgressSink;
use crate::lambda::dynamodb::DynamoDbStreams;
use crate::lambda::kinesis::Kinesis;
use crate::lambda::prefix::Identities;
use crate::lambda::source::EventSource;
use crate::lambda::source::EventUnits;
use crate::lambda::summary::summarize;
use crate::processing::core::Core;
use crate::processing::handler::RecordHandler;
use crate::processing::options::{ProcessingOptions, DEADLINE_MARGIN};
use crate::processing::outcome::BatchReport;
use crate::processing::sink::NoCheckpoints;
use crate::processing::state_time::within;
use crate::processing::RecordContext;
use crate::state::instant_now;
use crate::state::{BatchKey, SequenceNumber, StateError, StateStore};
use bytes::Bytes;
use lambda_runtime::LambdaEvent;
use serde_json::value::RawValue;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

/// Shard floors by key, with when each was read.
type Floors = std::collections::HashMap<String, (Instant, Option<crate::state::Checkpoint>)>;

struct Inner<H> {
    handler: H,
    store: Option<StateStore>,
    options: ProcessingOptions,
    /// The floor of each shard read so far (`<consumer>#<stream>#<shard>`),
    /// and when it was read: read again after [`FLOOR_KEPT`].
    floors: std::sync::Mutex<Floors>,
}

/// Processes event-source-mapping batches of source `S` with a [`RecordHandler`].
///
/// Records are handled in order; by default the batch stops at the first
/// failure and reports it (`ReportBatchItemFailures`), so order is kept. With
/// a state store, a retried batch skips the records a batch holding them
/// completed (its progress is the consumer's own: by default the invoked
/// function's; any ParallelizationFactor), progress is stored during the
/// batch, failed attempts are counted, and a record that failed
/// `max_attempts` times is parked so the shard moves on. A state table that
/// fails degrades the batch to at-least-once instead of failing it. Records
/// that cannot start before the Lambda deadline (minus a margin) are
/// reported for retry.
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
                floors: Default::default(),
            }),
            _source: PhantomData,
        }
    }

    /// Uses `store` for checkpoint de-duplication and attempt counting.
    pub fn with_store(self, store: StateStore) -> Self {
        self.configure(|inner| inner.store = Some(store))
    }

    /// Sets the failure mode, attempts, parking, checkpoint count and consumer.
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
    pub async fn handle(&self, event: LambdaEvent<Box<RawValue>>) -> crate::Result<S::Response> {
        // The text moves into the event's buffer: no copy.
        let text: Box<str> = event.payload.into();
        let body = Bytes::from(String::from(text));
        self.handle_bytes(body, &event.context).await
    }

    /// The Lambda handler over the invocation body as the runtime received
    /// it (bytes, read once here): processes the event until the context's
    /// deadline, logs one summary line and writes its metrics (EMF), and
    /// returns the batch item failures. The batch's progress is kept as the
    /// invoked function's, with the alias or version it was invoked as
    /// (`orders:blue`; see [`ProcessingOptions::consumer`]).
    pub async fn handle_bytes(
        &self,
        body: Bytes,
        context: &lambda_runtime::Context,
    ) -> crate::Result<S::Response> {
        let started = SystemTime::now();
        let function = Some(context.env_config.function_name.as_str());
        let invoked = invoked_as(context);
        // Boxed: one allocation a batch keeps the handler's future off the
        // stack of whoever awaits this (a test thread's 2 MB in debug builds).
        let run = Box::pin(self.run_event(body, Some(context.deadline()), Some(&invoked)));
        let (ran, handler_metrics) =
            crate::processing::handler_metrics::collecting(RecordContext::of(context).scope(run))
                .await;
        let (report, stream, first) = ran?;
        let group = self
            .inner
            .store
            .as_ref()
            .map_or("-", |s| s.config().group.as_str());
        let dimensions = crate::metrics::Dimensions {
            function: match function {
                Some(f) if !f.is_empty() => f,
                _ => crate::metrics::function_name(),
            },
            group,
            stream: crate::metrics::stream_dimension(stream.as_deref()),
        };
        summarize(
            &context.request_id,
            started,
            &report,
            &dimensions,
            handler_metrics,
        );
        // The batch's first record failed: Lambda retries the whole batch
        // either way, and a function error says so to a mapping without
        // `ReportBatchItemFailures` too, which would take a response
        // listing it for a success and drop the batch.
        if let Some(failed) = first.and_then(|first| {
            report
                .failures
                .iter()
                .find(|f| *f.item_identifier == *first)
        }) {
            return Err(crate::Error::BatchFailed {
                item_identifier: failed.item_identifier.clone(),
                error: failed.error.clone(),
            });
        }
        Ok(S::response(&report))
    }

    /// Processes one event (its JSON text) and says what happened. The error
    /// is for what cannot be reported per record: an event of another kind, a
    /// malformed record whose sequence number cannot be found, a consumer
    /// name that cannot key the state table. Without an invocation context
    /// the progress is kept as [`ProcessingOptions::consumer`] says, else as
    /// the function's named by `AWS_LAMBDA_FUNCTION_NAME`, else as
    /// `"local"`'s. Copies the text once; [`BatchProcessor::process_bytes`]
    /// takes the runtime's buffer as it is.
    pub async fn process(
        &self,
        event_json: &str,
        deadline: Option<SystemTime>,
    ) -> crate::Result<BatchReport> {
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
    ) -> crate::Result<BatchReport> {
        let function = std::env::var("AWS_LAMBDA_FUNCTION_NAME").ok();
        Ok(self
            .run_event(event, deadline, function.as_deref())
            .await?
            .0)
    }

    /// Processes one event of `function` (the invoked function's name, if
    /// known) until `deadline`.
    async fn run_event(
        &self,
        event: Bytes,
        deadline: Option<SystemTime>,
        function: Option<&str>,
    ) -> crate::Result<(BatchReport, Option<String>, Option<Arc<str>>)> {
        let units = S::units(&event)?;
        let stream = units.stream.clone();
        let first = units.items.first().map(|(item, _)| item.clone());
        let mixed = units.mixed_key_aggregates;
        let mut report = self.run_units(units, deadline, function).await?;
        report.mixed_key_aggregates = mixed;
        Ok((report, stream, first))
    }

    /// Processes the units of one event.
    async fn run_units(
        &self,
        units: crate::lambda::EventUnits,
        deadline: Option<SystemTime>,
        function: Option<&str>,
    ) -> crate::Result<BatchReport> {
        let inner = &*self.inner;
        let stop_by = match deadline {
            // Lambda never gives a deadline that has passed at the start;
            // a local emulator may (`cargo lambda watch`): no stop-by then.
            Some(d) if d <= SystemTime::now() => {
                tracing::warn!("the invocation's deadline lies in the past at its start (a local emulator?): processing without one");
                None
            }
            d => d.map(|d| stop_by(d, DEADLINE_MARGIN)),
        };
        // (An emulator's past deadline is none.)
        let deadline = deadline.filter(|_| stop_by.is_some());
        let Some(store) = &inner.store else {
            let core = Core::new(&inner.handler, None, &inner.options);
            return core.run(units.items, stop_by, &mut NoCheckpoints).await;
        };
        let consumer = consumer_of(&inner.options, function);
        let batch = match batch_key(&units, consumer) {
            Ok(batch) => batch,
            Err(
                e @ StateError::Validation {
                    field: "consumer", ..
                },
            ) => return Err(e.into()),
            Err(why) => {
                tracing::warn!(
                    %why,
                    "the batch cannot be keyed in the state table: it runs without \
                     de-duplication, attempt counts or parking (a retry may repeat records)"
                );
                let core = Core::new(&inner.handler, None, &inner.options);
                let mut report = core.run(units.items, stop_by, &mut NoCheckpoints).await?;
                report.deduplication_off = true;
                return Ok(report);
            }
        };
        let core = Core::new(&inner.handler, Some(store), &inner.options);
        let identities = Identities::of(&units.items);
        // State calls before the first record get a quarter of the time to
        // the stop-by instant (a slow table then costs de-duplication, not
        // the batch); the others, until the deadline.
        let now = instant_now();
        let before_records = stop_by.map(|t| now + t.saturating_duration_since(now) / 4);
        let until = deadline.map(|d| now + d.duration_since(SystemTime::now()).unwrap_or_default());
        let floor = within(
            before_records,
            "GetItem",
            Box::pin(floor(inner, store, &batch)),
        )
        .await;
        let mut sink = BatchProgressSink::new(store, batch, identities, units.event_ids)
            .with_times(before_records, until)
            .with_first_record_mark(inner.options.mark_first_record);
        let floor_failed = match floor {
            Ok(floor) => {
                sink = sink.with_floor(floor);
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "the shard's floor could not be read: records a fleet processed before a cut-over may run again");
                true
            }
        };
        let mut report = core.run(units.items, stop_by, &mut sink).await?;
        sink.carry_over(&mut report).await;
        if floor_failed {
            report.state_errors += 1;
            report.deduplication_off = true;
        }
        Ok(report)
    }
}

/// How long a shard's floor read is kept: a cut-over that sets floors after
/// a process read none is seen within it.
const FLOOR_KEPT: Duration = Duration::from_secs(60);

/// The floor set on the batch's shard at a cut-over from the fleet (read
/// once per shard, then kept for [`FLOOR_KEPT`]); none where the event
/// names no shard. An error says it could not be read (the batch then runs
/// as without one, and counts it).
async fn floor<H>(
    inner: &Inner<H>,
    store: &StateStore,
    batch: &BatchKey,
) -> crate::Result<Option<crate::state::Checkpoint>> {
    let Some(shard) = batch.shard.as_deref() else {
        return Ok(None);
    };
    let key = format!("{}#{}#{shard}", batch.consumer, batch.stream);
    if let Some((read, floor)) = inner.floors.lock().expect("floors").get(&key) {
        if read.elapsed() < FLOOR_KEPT {
            return Ok(floor.clone());
        }
    }
    let floor = store
        .record_state()
        .shard_floor(&batch.consumer, &batch.stream, shard)
        .await?;
    inner
        .floors
        .lock()
        .expect("floors")
        .insert(key, (instant_now(), floor.clone()));
    Ok(floor)
}

/// The function as the invocation names it: its name, with the alias or
/// version the mapping invokes (`orders:blue`), from the invoked ARN
/// (`arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]`);
/// the name alone for an unqualified invocation or `$LATEST`. Two mappings
/// of one function through two aliases keep apart.
fn invoked_as(context: &lambda_runtime::Context) -> String {
    qualified(
        context.env_config.function_name.as_str(),
        &context.invoked_function_arn,
    )
}

/// The function `name` with the qualifier its invoked ARN carries, if any
/// (see `invoked_as`).
pub(crate) fn qualified(name: &str, invoked_arn: &str) -> String {
    let parts: Vec<&str> = invoked_arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "lambda", _, _, "function", _, qualifier]
            if !qualifier.is_empty() && *qualifier != "$LATEST" && !name.is_empty() =>
        {
            format!("{name}:{qualifier}")
        }
        _ => name.to_owned(),
    }
}

/// Whose progress a batch is: the configured consumer, else the invoked
/// function (with its qualifier, see `invoked_as`), else `"local"`.
fn consumer_of<'a>(options: &'a ProcessingOptions, function: Option<&'a str>) -> &'a str {
    options
        .consumer
        .as_deref()
        .or(function.filter(|f| !f.is_empty()))
        .unwrap_or(LOCAL)
}

/// The consumer of a process that is not a Lambda function.
const LOCAL: &str = "local";

/// The key of the batch of `units` as `consumer`'s; an error says why the
/// batch cannot be keyed (no stream ARN, no shard nor event ids, a first
/// record that is not a sequence number, a part a key cannot hold).
fn batch_key(units: &EventUnits, consumer: &str) -> Result<BatchKey, StateError> {
    let stream = units.stream.clone().ok_or_else(|| {
        StateError::validation("stream ARN", "the event's records have no eventSourceARN")
    })?;
    let (first_item, _) = units
        .items
        .first()
        .ok_or_else(|| StateError::validation("batch", "the event has no records"))?;
    let first_event_id = match &units.shard {
        Some(_) => None,
        None if units.event_ids.len() == units.items.len() => {
            Some(units.event_ids[0].1.to_string())
        }
        None => {
            return Err(StateError::validation(
                "event id",
                "the event names no shard and a record has no eventID",
            ))
        }
    };
    let key = BatchKey {
        consumer: consumer.to_owned(),
        stream,
        shard: units.shard.clone(),
        first_event_id,
        first: SequenceNumber::new(first_item)?,
    };
    key.validate()?;
    Ok(key)
}

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
    instant_now() + work
}

impl<H: RecordHandler, S: EventSource> lambda_runtime::tower::Service<LambdaEvent<Box<RawValue>>>
    for BatchProcessor<H, S>
{
    type Response = S::Response;
    type Error = crate::Error;
    type Future = Pin<Box<dyn Future<Output = crate::Result<S::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<crate::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Box<RawValue>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(event).await })
    }
}

#[cfg(test)]
mod tests;
