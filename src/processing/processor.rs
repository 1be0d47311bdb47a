//! The batch processor, generic over the event source.

use crate::processing::core::{CheckpointSink, Core, NoCheckpoints};
use crate::processing::dynamodb::DynamoDbStreams;
use crate::processing::handler::RecordHandler;
use crate::processing::kinesis::Kinesis;
use crate::processing::options::ProcessingOptions;
use crate::processing::outcome::BatchReport;
use crate::processing::source::EventSource;
use crate::state::{
    Checkpoint, CheckpointOutcome, Result as StateResult, ShardId, ShardScope, StateError,
    StateStore,
};
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
/// Use it as `lambda_runtime::run(service_fn(|e| processor.handle(e)))`, or
/// pass the processor itself: it is a `tower::Service`.
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

    /// The Lambda handler: processes the event until its deadline and
    /// returns the batch item failures.
    pub async fn handle(
        &self,
        event: LambdaEvent<Box<RawValue>>,
    ) -> Result<S::Response, lambda_runtime::Error> {
        let report = self
            .process(event.payload.get(), Some(event.context.deadline()))
            .await?;
        Ok(S::response(&report))
    }

    /// Processes one event (its JSON text) and says what happened. The error
    /// is for what cannot be reported per record: an event of another kind, a
    /// malformed record whose sequence number cannot be found, a state store
    /// failure.
    pub async fn process(
        &self,
        event_json: &str,
        deadline: Option<SystemTime>,
    ) -> Result<BatchReport, lambda_runtime::Error> {
        let units = S::units(event_json)?;
        let inner = &*self.inner;
        let scope = ShardId::new(&units.scope)?;
        let core = Core::new(&inner.handler, inner.store.as_ref(), &inner.options);
        // The one stop-by instant: the Lambda deadline minus the margin.
        let stop_by = deadline.map(|d| {
            let left = d.duration_since(SystemTime::now()).unwrap_or_default();
            Instant::now() + left.saturating_sub(inner.options.deadline_margin)
        });
        let report = match &inner.store {
            Some(store) => {
                let mut sink = EsmCheckpoints {
                    store,
                    scope: &scope,
                    ttl: S::checkpoint_ttl(),
                };
                core.run(&scope, units.items, stop_by, &mut sink).await?
            }
            None => {
                core.run(&scope, units.items, stop_by, &mut NoCheckpoints)
                    .await?
            }
        };
        Ok(report)
    }
}

/// The checkpoints of event-source-mapped batches: un-leased, monotonic,
/// in the group's scope.
struct EsmCheckpoints<'a> {
    store: &'a StateStore,
    scope: &'a ShardId,
    ttl: Option<Duration>,
}

impl CheckpointSink for EsmCheckpoints<'_> {
    async fn stored(&mut self) -> StateResult<Option<Checkpoint>> {
        match self
            .store
            .fetch_checkpoint(&ShardScope::Group, self.scope)
            .await
        {
            Ok(cp) => Ok(Some(cp)),
            Err(StateError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> StateResult<bool> {
        let outcome = self
            .store
            .checkpoint_unleased_expiring(
                &ShardScope::Group,
                self.scope,
                checkpoint,
                None,
                self.ttl,
            )
            .await?;
        Ok(outcome == CheckpointOutcome::Stored)
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
