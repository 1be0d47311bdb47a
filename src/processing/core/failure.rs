//! A record that failed: its attempt counted, parked once it has failed
//! `max_attempts` times; and a record a dead process left marked, counted
//! against it before it starts again.

use super::*;

impl<H: RecordHandler> Core<'_, H> {
    /// A record failed: count the attempt; park it once it has failed
    /// `max_attempts` times (then it counts as done), else report it (as
    /// `item`). A park that fails leaves the record failed (reported, the
    /// prefix before it kept). Returns `true` if it was parked.
    pub(super) async fn failed_record<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        item: &str,
        record: &StreamRecord,
        error: RecordError,
    ) -> Result<bool> {
        let parked = self.count_failure(batch, item, record, error).await?;
        if parked {
            self.passed(batch, record).await?;
        }
        Ok(parked)
    }

    /// A record failed: count the attempt, and park it at `max_attempts`,
    /// or report it (as `item`). Returns `true` if it was parked; the
    /// caller moves the progress past it (in order: the core's concurrent
    /// path only once every record before it is done).
    pub(super) async fn count_failure<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        item: &str,
        record: &StreamRecord,
        error: RecordError,
    ) -> Result<bool> {
        let attempt = batch.sink.attempt().map(str::to_owned);
        // (Boxed: a failure's state calls stay off the future of every record.)
        if Box::pin(self.count_and_park(batch, record, &error, attempt.as_deref())).await? {
            return Ok(true);
        }
        batch.fail(item, error);
        Ok(false)
    }

    /// A parked record counts as done: the progress moves past it and is
    /// committed at once (a delivery that dies after this one must not run
    /// the record again before the key's next ones: it may have been parked
    /// for deaths it did not cause).
    async fn passed<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        record: &StreamRecord,
    ) -> Result<()> {
        batch.advance(record);
        batch.commit().await
    }

    /// Counts a failed attempt of `record` (once for `attempt`, what names
    /// the delivery it failed in) and parks it once it failed
    /// `max_attempts` times. Returns `true` if it was parked (it counts as
    /// done once the caller moves the progress past it); a park that fails
    /// is counted and leaves it failed.
    async fn count_and_park<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        record: &StreamRecord,
        error: &RecordError,
        attempt: Option<&str>,
    ) -> Result<bool> {
        let Some(store) = self.store.filter(|_| !batch.sink.degraded()) else {
            return Ok(false);
        };
        let sequence = SequenceNumber::new(&record.sequence_number)?;
        let key = batch.sink.record_key(record, &sequence)?;
        let until = batch.sink.calls_until();
        let at_limit =
            park_at_limit(store, self.options, &key, record, error, attempt, until).await;
        match at_limit {
            AtLimit::Uncounted(e) => {
                batch.unavailable(e)?;
                Ok(false)
            }
            AtLimit::Below => Ok(false),
            AtLimit::Parked(attempts) => {
                tracing::warn!(
                    shard = %record.shard_id,
                    sequence_number = %record.sequence_number,
                    sub_sequence = record.sub_sequence,
                    attempts,
                    error = %LoggedError { error, values: self.options.log_values },
                    "poison record parked; the shard moves on"
                );
                batch.report.parked += 1;
                Ok(true)
            }
            AtLimit::ParkFailed(park_error) => {
                tracing::error!(
                    sequence_number = %record.sequence_number,
                    sub_sequence = record.sub_sequence,
                    error = %park_error,
                    "parking failed; the record is reported as failed"
                );
                batch.report.park_failures += 1;
                Ok(false)
            }
        }
    }

    /// Before `record` starts: the sink marks it (a guarded delivery), and
    /// says whether an earlier delivery died in it. Such a death is a
    /// failed attempt of the record (counted once for the delivery that
    /// died); at `max_attempts` the record is parked instead of run.
    /// Returns `true` if it was parked.
    pub(super) async fn before_record<S: CheckpointSink>(
        &self,
        batch: &mut Batch<'_, S>,
        record: &StreamRecord,
    ) -> Result<bool> {
        let died_in = match batch.sink.before_record(record).await {
            Ok(died_in) => died_in,
            Err(e) => {
                batch.unavailable(e)?;
                None
            }
        };
        let Some(delivery) = died_in else {
            return Ok(false);
        };
        let error = RecordError::ProcessDied {
            sequence_number: record.sequence_number.to_string(),
            sub_sequence: record.sub_sequence,
        };
        tracing::warn!(%error, "an earlier delivery of the batch died in this record");
        let parked = self
            .count_and_park(batch, record, &error, Some(&delivery))
            .await?;
        if parked {
            self.passed(batch, record).await?;
        }
        Ok(parked)
    }
}
