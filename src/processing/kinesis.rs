//! The Kinesis batch processor: `KinesisEvent` in, `KinesisEventResponse` out.

use crate::kpl;
use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::options::{FailureMode, ProcessingOptions};
use crate::processing::outcome::{BatchReport, RecordError, RecordFailure};
use crate::processing::parking::park;
use crate::processing::record::StreamRecord;
use crate::state::{
    Checkpoint, CheckpointOutcome, RecordKey, SequenceNumber, ShardId, ShardScope, StateError,
    StateStore,
};
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_lambda_events::event::streams::{KinesisBatchItemFailure, KinesisEventResponse};
use bytes::Bytes;
use lambda_runtime::LambdaEvent;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

/// The event's records, each kept raw so that one malformed record fails
/// alone instead of failing the whole event's parse.
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "Records", borrow)]
    records: Vec<&'a RawValue>,
}

/// Just enough of a malformed record to report it.
#[derive(Deserialize)]
struct RecordId {
    kinesis: RecordIdInner,
}

#[derive(Deserialize)]
struct RecordIdInner {
    #[serde(rename = "sequenceNumber")]
    sequence_number: String,
}

struct Inner<H> {
    handler: H,
    store: Option<StateStore>,
    options: ProcessingOptions,
}

/// Processes Kinesis event-source-mapping batches with a [`RecordHandler`].
///
/// Records are handled in order; by default the batch stops at the first
/// failure and reports it (`ReportBatchItemFailures`), so order is kept. With
/// a state store, records at or below the shard's stored checkpoint are
/// skipped (a retried batch does not repeat side effects; needs a
/// parallelization factor of 1), the checkpoint advances after the successful
/// prefix, failed attempts are counted and a record that failed
/// `max_attempts` times is parked. KPL aggregates are de-aggregated.
///
/// Use it from `lambda_runtime::run(service_fn(|e| processor.handle(e)))`,
/// or pass the processor itself: it is a `tower::Service`.
pub struct KinesisProcessor<H> {
    inner: Arc<Inner<H>>,
}

impl<H> Clone for KinesisProcessor<H> {
    fn clone(&self) -> Self {
        KinesisProcessor {
            inner: self.inner.clone(),
        }
    }
}

fn fail(report: &mut BatchReport, item: &str, error: RecordError) {
    tracing::warn!(item, %error, "record failed");
    report.failures.push(RecordFailure {
        item_identifier: item.to_owned(),
        error,
    });
}

fn to_record_error(e: HandlerError, record: &StreamRecord) -> RecordError {
    match e.downcast::<RecordError>() {
        Ok(e) => *e,
        Err(e) => RecordError::Handler {
            sequence_number: record.sequence_number.clone(),
            sub_sequence: record.sub_sequence,
            error: e.to_string(),
        },
    }
}

impl<H: RecordHandler> KinesisProcessor<H> {
    /// A processor without a state store: no de-duplication and no parking;
    /// ordering, de-aggregation and the deadline still apply.
    pub fn new(handler: H) -> Self {
        KinesisProcessor {
            inner: Arc::new(Inner {
                handler,
                store: None,
                options: ProcessingOptions::default(),
            }),
        }
    }

    /// Uses `store` for checkpoint de-duplication and attempt counting.
    pub fn with_store(self, store: StateStore) -> Self {
        self.map(|inner| inner.store = Some(store))
    }

    /// Sets the failure mode, attempts, parking and deadline margin.
    pub fn with_options(self, options: ProcessingOptions) -> Self {
        self.map(|inner| inner.options = options)
    }

    fn map(self, f: impl FnOnce(&mut Inner<H>)) -> Self {
        let mut inner =
            Arc::into_inner(self.inner).expect("configure the processor before cloning it");
        f(&mut inner);
        KinesisProcessor {
            inner: Arc::new(inner),
        }
    }

    /// The Lambda handler: processes the event until its deadline and
    /// returns the batch item failures.
    pub async fn handle(
        &self,
        event: LambdaEvent<Box<RawValue>>,
    ) -> Result<KinesisEventResponse, lambda_runtime::Error> {
        let report = self
            .process(event.payload.get(), Some(event.context.deadline()))
            .await?;
        Ok(response(&report))
    }

    /// Processes one event (its JSON text) and says what happened. The error
    /// is for what cannot be reported per record: an event that is not a
    /// Kinesis event, a malformed record whose sequence number cannot be
    /// found, or a state store failure.
    pub async fn process(
        &self,
        event_json: &str,
        deadline: Option<SystemTime>,
    ) -> Result<BatchReport, lambda_runtime::Error> {
        let event: RawEvent<'_> =
            serde_json::from_str(event_json).map_err(|e| format!("not a Kinesis event: {e}"))?;
        let inner = &*self.inner;
        let mut report = BatchReport::default();
        let mut checkpoints: BTreeMap<String, Option<Checkpoint>> = BTreeMap::new();
        let mut progress: BTreeMap<String, Checkpoint> = BTreeMap::new();
        let mut failed = false;
        let total = event.records.len();
        for (index, raw) in event.records.iter().enumerate() {
            if failed && inner.options.mode == FailureMode::StopAtFirstFailure {
                report.not_attempted = (total - index) as u64;
                break;
            }
            let rec: KinesisEventRecord = match serde_json::from_str(raw.get()) {
                Ok(rec) => rec,
                Err(e) => {
                    let id: RecordId = serde_json::from_str(raw.get()).map_err(|_| {
                        format!("record {index} is malformed and has no sequence number: {e}")
                    })?;
                    failed = true;
                    let error = RecordError::Malformed {
                        index,
                        error: e.to_string(),
                    };
                    fail(&mut report, &id.kinesis.sequence_number, error);
                    continue;
                }
            };
            let seq = rec.kinesis.sequence_number.clone();
            if deadline.is_some_and(|d| SystemTime::now() + inner.options.deadline_margin >= d) {
                failed = true;
                fail(
                    &mut report,
                    &seq,
                    RecordError::Deadline {
                        sequence_number: seq.clone(),
                    },
                );
                continue;
            }
            let shard = rec
                .event_id
                .as_deref()
                .and_then(|id| id.split_once(':'))
                .map(|(shard, _)| shard.to_owned())
                .unwrap_or_else(|| "unknown".to_owned());
            let stored = match checkpoints.get(&shard) {
                Some(cp) => cp.clone(),
                None => {
                    let cp = self.stored_checkpoint(&shard).await?;
                    checkpoints.insert(shard.clone(), cp.clone());
                    cp
                }
            };
            let ok = self
                .process_record(
                    &rec,
                    &shard,
                    stored.as_ref(),
                    &mut report,
                    &mut progress,
                    !failed,
                )
                .await?;
            failed |= !ok;
        }
        if let Some(store) = &inner.store {
            for (shard, cp) in &progress {
                let shard_id = ShardId::new(shard)?;
                if let CheckpointOutcome::Stored = store
                    .checkpoint_unleased(&ShardScope::Group, &shard_id, cp, None)
                    .await?
                {
                    report.checkpoints += 1;
                }
            }
        }
        Ok(report)
    }

    async fn stored_checkpoint(&self, shard: &str) -> Result<Option<Checkpoint>, StateError> {
        let Some(store) = &self.inner.store else {
            return Ok(None);
        };
        match store
            .fetch_checkpoint(&ShardScope::Group, &ShardId::new(shard)?)
            .await
        {
            Ok(cp) => Ok(Some(cp)),
            Err(StateError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Handles one Kinesis record (all its user records); `false` if it failed.
    async fn process_record(
        &self,
        rec: &KinesisEventRecord,
        shard: &str,
        stored: Option<&Checkpoint>,
        report: &mut BatchReport,
        progress: &mut BTreeMap<String, Checkpoint>,
        prefix_intact: bool,
    ) -> Result<bool, lambda_runtime::Error> {
        let inner = &*self.inner;
        let seq = rec.kinesis.sequence_number.as_str();
        let sequence = SequenceNumber::new(seq)?;
        let data: &[u8] = &rec.kinesis.data.0;
        let arrival = Some(
            rec.kinesis
                .approximate_arrival_timestamp
                .0
                .timestamp_millis(),
        );
        let base = StreamRecord {
            shard_id: shard.to_owned(),
            sequence_number: seq.to_owned(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: rec.kinesis.partition_key.clone(),
            explicit_hash_key: None,
            data: Bytes::new(),
            approximate_arrival: arrival,
            event_source_arn: rec.event_source_arn.clone(),
        };
        let users: Vec<StreamRecord> = match kpl::deaggregate(data) {
            Ok(None) => vec![StreamRecord {
                data: Bytes::copy_from_slice(data),
                ..base.clone()
            }],
            Ok(Some(users)) => users
                .into_iter()
                .enumerate()
                .map(|(i, u)| StreamRecord {
                    sub_sequence: i as u64,
                    aggregated: true,
                    partition_key: u.partition_key.to_owned(),
                    explicit_hash_key: u.explicit_hash_key.map(str::to_owned),
                    data: Bytes::copy_from_slice(u.data),
                    ..base.clone()
                })
                .collect(),
            Err(e) => {
                let error = RecordError::Aggregate {
                    sequence_number: seq.to_owned(),
                    error: e.to_string(),
                };
                let record = StreamRecord {
                    data: Bytes::copy_from_slice(data),
                    ..base
                };
                return self
                    .failed(&record, error, report, progress, prefix_intact)
                    .await;
            }
        };
        for record in users {
            if stored.is_some_and(|cp| cp.covers(&sequence, record.sub_sequence)) {
                report.duplicates_skipped += 1;
                continue;
            }
            let sub = record.sub_sequence;
            match inner.handler.handle(record.clone()).await {
                Ok(()) => {
                    report.processed += 1;
                    if prefix_intact {
                        progress.insert(
                            shard.to_owned(),
                            Checkpoint::After {
                                sequence: sequence.clone(),
                                sub_sequence: sub,
                            },
                        );
                    }
                }
                Err(e) => {
                    let error = to_record_error(e, &record);
                    if !self
                        .failed(&record, error, report, progress, prefix_intact)
                        .await?
                    {
                        return Ok(false);
                    }
                }
            }
        }
        Ok(true)
    }

    /// A user record failed: count the attempt; park it once it has failed
    /// `max_attempts` times (then it counts as done), else report it.
    /// Returns `true` if the record was parked.
    async fn failed(
        &self,
        record: &StreamRecord,
        error: RecordError,
        report: &mut BatchReport,
        progress: &mut BTreeMap<String, Checkpoint>,
        prefix_intact: bool,
    ) -> Result<bool, lambda_runtime::Error> {
        let inner = &*self.inner;
        if let Some(store) = &inner.store {
            let key = RecordKey {
                shard_id: ShardId::new(&record.shard_id)?,
                sequence: SequenceNumber::new(&record.sequence_number)?,
                sub_sequence: record.sub_sequence,
            };
            let attempts = store
                .record_attempt(&key, inner.options.attempts_ttl)
                .await?;
            if attempts >= inner.options.max_attempts
                && park(
                    &inner.options.parking,
                    Some(store),
                    record,
                    &error,
                    attempts,
                )
                .await?
            {
                tracing::warn!(
                    shard = %record.shard_id,
                    sequence_number = %record.sequence_number,
                    sub_sequence = record.sub_sequence,
                    attempts,
                    %error,
                    "poison record parked; the shard moves on"
                );
                report.parked += 1;
                if prefix_intact {
                    progress.insert(
                        record.shard_id.clone(),
                        Checkpoint::After {
                            sequence: key.sequence,
                            sub_sequence: record.sub_sequence,
                        },
                    );
                }
                return Ok(true);
            }
        }
        fail(report, &record.sequence_number, error);
        Ok(false)
    }
}

/// The response the event source mapping reads: the failed records' sequence numbers.
pub(crate) fn response(report: &BatchReport) -> KinesisEventResponse {
    let mut response = KinesisEventResponse::default();
    for failure in &report.failures {
        let mut item = KinesisBatchItemFailure::default();
        item.item_identifier = Some(failure.item_identifier.clone());
        response.batch_item_failures.push(item);
    }
    response
}

impl<H: RecordHandler> lambda_runtime::tower::Service<LambdaEvent<Box<RawValue>>>
    for KinesisProcessor<H>
{
    type Response = KinesisEventResponse;
    type Error = lambda_runtime::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<KinesisEventResponse, lambda_runtime::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Box<RawValue>>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.handle(event).await })
    }
}
