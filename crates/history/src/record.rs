//! Recording a run into a [`SharedHistory`]: a record handler around the
//! run's own and a worker observer. Records carry their number among their
//! key's records as text (`"0"`, `"1"`, ...), which is how the demo and the
//! stress run produce them.

use super::{History, Processed, SharedHistory, Span};
use shardkeeper::consumer::Observer;
use shardkeeper::processing::{HandlerError, RecordHandler, StreamRecord};
use shardkeeper::state::instant_now;
use shardkeeper::state::{Checkpoint, SequenceNumber, ShardId};
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Instant;

/// A handler for `consumer` that hands every record to `inner` as the
/// processing core hands it over (one at a time, or in runs through
/// `handle_batch` when `inner` is [batched](RecordHandler::BATCHED)), and
/// records each call of `inner` (a [`Span`]: its shard, start and end, also
/// when the call is cut off or its task aborted) and each record `inner`
/// processed successfully (when the call returns). `inner`'s lifecycle
/// hooks are called as the worker calls them.
///
/// A record whose data is not a number fails without reaching `inner` (it
/// was not produced by the run); in a batch, so do the records after it
/// (they are handed over again).
pub fn recording_handler<H: RecordHandler>(
    history: &SharedHistory,
    consumer: &str,
    inner: H,
) -> impl RecordHandler {
    Recording {
        history: history.clone(),
        consumer: consumer.to_owned(),
        inner,
    }
}

/// An observer that appends `consumer`'s worker events to the history.
pub fn recording_observer(history: &SharedHistory, consumer: &str) -> Observer {
    let (history, me) = (history.clone(), consumer.to_owned());
    Arc::new(move |event| lock(&history).events.push((me.clone(), event)))
}

/// The history, also after a task panicked while holding it (a call's span
/// is recorded as it is dropped, and a drop must not panic).
fn lock(history: &SharedHistory) -> MutexGuard<'_, History> {
    history.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Recording<H> {
    history: SharedHistory,
    consumer: String,
    inner: H,
}

/// A call of the inner handler on one shard, recorded as a [`Span`] when
/// it is dropped: at its return, or when the call is given up.
struct Running<'a> {
    history: &'a SharedHistory,
    consumer: &'a str,
    shard: ShardId,
    start: Instant,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let span = Span {
            consumer: self.consumer.to_owned(),
            shard: self.shard.clone(),
            start: self.start,
            end: instant_now(),
        };
        lock(self.history).spans.push(span);
    }
}

impl<H> Recording<H> {
    /// The record as processed by this consumer (stamped when its call
    /// returns), or why it is not one of the run's.
    fn numbered(&self, record: &StreamRecord) -> Result<Processed, HandlerError> {
        let n: u64 = std::str::from_utf8(&record.data)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or("not a numbered record")?;
        Ok(Processed {
            consumer: self.consumer.clone(),
            shard: ShardId::new(&*record.shard_id)?,
            key: record.partition_key.to_string(),
            n,
            sequence: SequenceNumber::new(&record.sequence_number)?,
            sub_sequence: record.sub_sequence,
            at: instant_now(),
        })
    }

    fn running(&self, shard: &ShardId) -> Running<'_> {
        Running {
            history: &self.history,
            consumer: &self.consumer,
            shard: shard.clone(),
            start: instant_now(),
        }
    }
}

impl<H: RecordHandler> RecordHandler for Recording<H> {
    const BATCHED: bool = H::BATCHED;

    async fn handle(&self, record: StreamRecord) -> Result<(), HandlerError> {
        let mut processed = self.numbered(&record)?;
        let _call = self.running(&processed.shard);
        self.inner.handle(record).await?;
        processed.at = instant_now();
        lock(&self.history).processed.push(processed);
        Ok(())
    }

    async fn handle_batch(&self, mut records: Vec<StreamRecord>) -> Vec<Result<(), HandlerError>> {
        let mut numbered = Vec::with_capacity(records.len());
        let mut refused = None;
        for record in &records {
            match self.numbered(record) {
                Ok(p) => numbered.push(p),
                Err(e) => {
                    refused = Some(e);
                    break;
                }
            }
        }
        records.truncate(numbered.len());
        let mut shards: Vec<&ShardId> = numbered.iter().map(|p| &p.shard).collect();
        shards.dedup();
        let calls: Vec<Running<'_>> = shards.into_iter().map(|s| self.running(s)).collect();
        let mut results = if records.is_empty() {
            Vec::new()
        } else {
            self.inner.handle_batch(records).await
        };
        let answered = results.len() == numbered.len() && results.iter().all(Result::is_ok);
        let at = instant_now();
        {
            let mut history = lock(&self.history);
            for (result, mut p) in results.iter().zip(numbered) {
                if result.is_ok() {
                    p.at = at;
                    history.processed.push(p);
                }
            }
        }
        drop(calls);
        if let (Some(e), true) = (refused, answered) {
            results.push(Err(e));
        }
        results
    }

    async fn shard_gained(&self, shard: &ShardId, position: Option<&Checkpoint>) {
        self.inner.shard_gained(shard, position).await
    }

    async fn lease_lost(&self, shard: &ShardId) {
        self.inner.lease_lost(shard).await
    }

    async fn shard_ended(&self, shard: &ShardId) {
        self.inner.shard_ended(shard).await
    }

    async fn shutdown_requested(&self) {
        self.inner.shutdown_requested().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn record(shard: &str, n: u64) -> StreamRecord {
        StreamRecord {
            shard_id: shard.into(),
            sequence_number: (10 * (n + 1)).to_string().into(),
            sub_sequence: 0,
            aggregated: false,
            partition_key: "k".into(),
            explicit_hash_key: None,
            data: n.to_string().into(),
            approximate_arrival: None,
            event_source_arn: None,
            change: None,
        }
    }

    const SHARD: &str = "shardId-000000000001";

    /// Takes runs of records, and fails the one numbered 2.
    struct Bulk;

    impl RecordHandler for Bulk {
        const BATCHED: bool = true;

        async fn handle(&self, _: StreamRecord) -> Result<(), HandlerError> {
            unreachable!("a batched handler is handed runs")
        }

        async fn handle_batch(&self, records: Vec<StreamRecord>) -> Vec<Result<(), HandlerError>> {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let result = |r: &StreamRecord| match &*r.data {
                b"2" => Err("two".into()),
                _ => Ok(()),
            };
            records.iter().map(result).collect()
        }
    }

    #[tokio::test]
    async fn each_call_is_recorded_with_its_shard_start_and_end() {
        let history = SharedHistory::default();
        let handler = recording_handler(&history, "c1", |_: StreamRecord| async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            Ok::<(), std::io::Error>(())
        });
        handler.handle(record(SHARD, 0)).await.unwrap();
        handler.handle(record(SHARD, 1)).await.unwrap();
        let h = history.lock().unwrap();
        assert_eq!(h.spans.len(), 2, "{:?}", h.spans);
        for (span, p) in h.spans.iter().zip(&h.processed) {
            assert_eq!((span.consumer.as_str(), span.shard.as_str()), ("c1", SHARD));
            assert!(
                span.end - span.start >= Duration::from_millis(5),
                "{span:?}"
            );
            assert!(span.start <= p.at && p.at <= span.end, "{span:?} {p:?}");
        }
        assert!(h.spans[0].end <= h.spans[1].start);
        assert_eq!(h.processed.iter().map(|p| p.n).collect::<Vec<_>>(), [0, 1]);
    }

    #[tokio::test]
    async fn a_batch_call_is_one_span_and_records_what_succeeded() {
        let history = SharedHistory::default();
        let handler = recording_handler(&history, "c1", Bulk);
        fn batched<H: RecordHandler>(_: &H) -> bool {
            H::BATCHED
        }
        assert!(batched(&handler));
        let results = handler
            .handle_batch((0..4).map(|n| record(SHARD, n)).collect())
            .await;
        let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
        assert_eq!(ok, [true, true, false, true]);
        let h = history.lock().unwrap();
        assert_eq!(h.spans.len(), 1, "{:?}", h.spans);
        assert!(h.spans[0].end - h.spans[0].start >= Duration::from_millis(5));
        assert_eq!(
            h.processed.iter().map(|p| p.n).collect::<Vec<_>>(),
            [0, 1, 3]
        );
    }

    #[tokio::test]
    async fn a_call_given_up_is_recorded_until_it_was_dropped() {
        let history = SharedHistory::default();
        let handler = recording_handler(&history, "c1", |_: StreamRecord| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<(), std::io::Error>(())
        });
        let call = handler.handle(record(SHARD, 0));
        let cut = tokio::time::timeout(Duration::from_millis(20), call).await;
        assert!(cut.is_err());
        let dropped = instant_now();
        let h = history.lock().unwrap();
        assert!(h.processed.is_empty());
        assert_eq!(h.spans.len(), 1);
        assert!(h.spans[0].end <= dropped);
        assert!(h.spans[0].end - h.spans[0].start >= Duration::from_millis(20));
    }

    #[tokio::test]
    async fn a_record_that_is_not_numbered_fails_without_reaching_the_handler() {
        let history = SharedHistory::default();
        let handler = recording_handler(&history, "c1", Bulk);
        let mut records: Vec<_> = (0..3).map(|n| record(SHARD, n)).collect();
        records[1].data = "x".into();
        let results = handler.handle_batch(records).await;
        let ok: Vec<bool> = results.iter().map(Result::is_ok).collect();
        // Record 0 handled, record 1 refused, record 2 not attempted.
        assert_eq!(ok, [true, false]);
        let h = history.lock().unwrap();
        assert_eq!(h.processed.len(), 1);
    }
}
