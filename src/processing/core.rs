//! What every source shares: handling a run of records in order, counting
//! attempts, parking poison records, and checkpointing the successful prefix.

use crate::processing::handler::{HandlerError, RecordHandler};
use crate::processing::options::{FailureMode, ProcessingOptions};
use crate::processing::outcome::{BatchReport, RecordError, RecordFailure};
use crate::processing::parking::park;
use crate::processing::record::StreamRecord;
use crate::state::{
    Checkpoint, CheckpointOutcome, RecordKey, Result, SequenceNumber, ShardId, ShardScope,
    StateError, StateStore,
};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// One record of an event, as a source reads it (public only to the
/// crate's sources: `core` is a private module).
pub enum Unit {
    /// User records ready for the handler (one, or the user records of a KPL aggregate).
    Records(Vec<StreamRecord>),
    /// A record that cannot be handled: it fails (and counts toward parking).
    Broken(StreamRecord, RecordError),
    /// A record so malformed that only its item identifier is known.
    Unreadable(String, RecordError),
}

/// The state of one batch being processed.
pub(crate) struct Run<'p, H> {
    pub(crate) handler: &'p H,
    pub(crate) store: Option<&'p StateStore>,
    pub(crate) options: &'p ProcessingOptions,
    /// How long checkpoints live (sources whose checkpoints are per batch expire them).
    pub(crate) checkpoint_ttl: Option<Duration>,
    pub(crate) report: BatchReport,
    stored: BTreeMap<String, Option<Checkpoint>>,
    progress: BTreeMap<String, Checkpoint>,
    failed: bool,
}

fn to_record_error(e: HandlerError, record: &StreamRecord) -> RecordError {
    match e.downcast::<RecordError>() {
        Ok(e) => *e,
        Err(e) => RecordError::Handler {
            sequence_number: record.sequence_number.to_string(),
            sub_sequence: record.sub_sequence,
            error: e.to_string(),
        },
    }
}

impl<'p, H: RecordHandler> Run<'p, H> {
    pub(crate) fn new(
        handler: &'p H,
        store: Option<&'p StateStore>,
        options: &'p ProcessingOptions,
        checkpoint_ttl: Option<Duration>,
    ) -> Self {
        Run {
            handler,
            store,
            options,
            checkpoint_ttl,
            report: BatchReport::default(),
            stored: BTreeMap::new(),
            progress: BTreeMap::new(),
            failed: false,
        }
    }

    /// True once the batch must stop (stop-at-first-failure mode after a failure).
    pub(crate) fn stopped(&self) -> bool {
        self.failed && self.options.mode == FailureMode::StopAtFirstFailure
    }

    /// True if the deadline leaves no room for another record.
    pub(crate) fn out_of_time(&self, deadline: Option<SystemTime>) -> bool {
        deadline.is_some_and(|d| SystemTime::now() + self.options.deadline_margin >= d)
    }

    /// Reports a record without attempting it (deadline).
    pub(crate) fn skip_for_deadline(&mut self, item: &str) {
        self.failed = true;
        self.fail(
            item,
            RecordError::Deadline {
                sequence_number: item.to_owned(),
            },
        );
    }

    fn fail(&mut self, item: &str, error: RecordError) {
        tracing::warn!(item, %error, "record failed");
        self.report.failures.push(RecordFailure {
            item_identifier: item.to_owned(),
            error,
        });
    }

    /// True if the stored checkpoint of the record's scope covers it (read
    /// once per scope per batch; never without a store).
    async fn covered(&mut self, record: &StreamRecord, sequence: &SequenceNumber) -> Result<bool> {
        let Some(store) = self.store else {
            return Ok(false);
        };
        if !self.stored.contains_key(&*record.shard_id) {
            let shard = ShardId::new(&*record.shard_id)?;
            let cp = match store.fetch_checkpoint(&ShardScope::Group, &shard).await {
                Ok(cp) => Some(cp),
                Err(StateError::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            self.stored.insert(record.shard_id.to_string(), cp);
        }
        Ok(self.stored[&*record.shard_id]
            .as_ref()
            .is_some_and(|cp| cp.covers(sequence, record.sub_sequence)))
    }

    fn advance(&mut self, record: &StreamRecord, sequence: SequenceNumber) {
        if self.failed || self.store.is_none() {
            return;
        }
        let cp = Checkpoint::After {
            sequence,
            sub_sequence: record.sub_sequence,
        };
        match self.progress.get_mut(&*record.shard_id) {
            Some(slot) => *slot = cp,
            None => {
                self.progress.insert(record.shard_id.to_string(), cp);
            }
        }
    }

    /// Handles one unit (one record of the event).
    pub(crate) async fn unit(&mut self, unit: Unit) -> Result<()> {
        match unit {
            Unit::Unreadable(item, error) => {
                self.failed = true;
                self.fail(&item, error);
            }
            Unit::Broken(record, error) => {
                if !self.failed_record(&record, error).await? {
                    self.failed = true;
                }
            }
            Unit::Records(records) => {
                for record in records {
                    let sequence = SequenceNumber::new(&record.sequence_number)?;
                    if self.covered(&record, &sequence).await? {
                        self.report.duplicates_skipped += 1;
                        continue;
                    }
                    match self.handler.handle(record.clone()).await {
                        Ok(()) => {
                            self.report.processed += 1;
                            self.advance(&record, sequence);
                        }
                        Err(e) => {
                            let error = to_record_error(e, &record);
                            if !self.failed_record(&record, error).await? {
                                self.failed = true;
                                return Ok(());
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// A record failed: count the attempt; park it once it has failed
    /// `max_attempts` times (then it counts as done), else report it.
    /// Returns `true` if it was parked.
    async fn failed_record(&mut self, record: &StreamRecord, error: RecordError) -> Result<bool> {
        if let Some(store) = self.store {
            let key = RecordKey {
                shard_id: ShardId::new(&*record.shard_id)?,
                sequence: SequenceNumber::new(&record.sequence_number)?,
                sub_sequence: record.sub_sequence,
            };
            let attempts = store
                .record_attempt(&key, self.options.attempts_ttl)
                .await?;
            if attempts >= self.options.max_attempts
                && park(&self.options.parking, Some(store), record, &error, attempts).await?
            {
                tracing::warn!(
                    shard = %record.shard_id,
                    sequence_number = %record.sequence_number,
                    sub_sequence = record.sub_sequence,
                    attempts,
                    %error,
                    "poison record parked; the shard moves on"
                );
                self.report.parked += 1;
                self.advance(record, key.sequence);
                return Ok(true);
            }
        }
        self.fail(&record.sequence_number, error);
        Ok(false)
    }

    /// Sets the checkpoint of a scope that the caller knows already (saves a read).
    pub(crate) fn preload(&mut self, scope_key: &str, checkpoint: Option<Checkpoint>) {
        self.stored.insert(scope_key.to_owned(), checkpoint);
    }

    /// The report and the end of each scope's successful prefix, for callers
    /// that store checkpoints themselves (fenced, through a lease).
    pub(crate) fn into_parts(
        mut self,
        not_attempted: u64,
    ) -> (BatchReport, BTreeMap<String, Checkpoint>) {
        self.report.not_attempted = not_attempted;
        (self.report, self.progress)
    }

    /// Stores the checkpoint of each scope's successful prefix (un-leased)
    /// and returns the report.
    pub(crate) async fn finish(self, not_attempted: u64) -> Result<BatchReport> {
        let store = self.store;
        let ttl = self.checkpoint_ttl;
        let (mut report, progress) = self.into_parts(not_attempted);
        if let Some(store) = store {
            for (scope_key, cp) in &progress {
                let shard = ShardId::new(scope_key)?;
                let outcome = store
                    .checkpoint_unleased_expiring(&ShardScope::Group, &shard, cp, None, ttl)
                    .await?;
                if outcome == CheckpointOutcome::Stored {
                    report.checkpoints += 1;
                }
            }
        }
        Ok(report)
    }
}
