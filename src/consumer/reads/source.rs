//! The Kinesis record source of a shard pipeline: GetRecords polling, or an
//! enhanced fan-out subscription. Both give the pipeline batches, and are
//! told how each went.

use crate::consumer::reads::poll::{backed_off_until, poll};
use crate::consumer::reads::start::{latest_pin, start_at};
use crate::consumer::reads::subscription::{pump, retry_subscription_at, Events};
use crate::consumer::reads::{IteratorStart, KinesisReads, ReadError, ReadRecord};
use crate::consumer::WorkerConfig;
use crate::pipeline::unpinned;
use crate::pipeline::InitialPosition;
use crate::pipeline::{Fetched, RecordSource, ShardReport, SourceBatch};
use crate::processing::{StreamRecord, Unit};
use crate::state::{Checkpoint, ShardId, StateStore, StreamAddress};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How a Kinesis source reads: the worker's settings it uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadSettings {
    initial_position: InitialPosition,
    pub(super) max_records: i32,
    min_poll_interval: Duration,
    idle_poll_interval: Duration,
    read_bytes_per_second: u64,
    subscription_lifetime: Duration,
}

impl From<&WorkerConfig> for ReadSettings {
    fn from(c: &WorkerConfig) -> Self {
        ReadSettings {
            initial_position: c.initial_position,
            max_records: c.max_records,
            min_poll_interval: c.min_poll_interval,
            idle_poll_interval: c.idle_poll_interval,
            read_bytes_per_second: c.read_bytes_per_second,
            subscription_lifetime: c.subscription_lifetime,
        }
    }
}

/// Reads one Kinesis shard, by polling or through a subscription.
pub(crate) struct KinesisSource {
    reads: Arc<dyn KinesisReads>,
    stream: StreamAddress,
    settings: ReadSettings,
    /// The enhanced fan-out consumer subscribed with (none: nothing to
    /// subscribe with yet).
    consumer_arn: Option<String>,
    /// Not read again before this.
    next_poll: Instant,
    /// A LATEST start's pin, until the pipeline takes it.
    pin: Option<Checkpoint>,
    /// The state store, for its clock: a pin is a time on it.
    clock: StateStore,
    /// The last batch handed out: where it leaves the reading, and its size.
    last: Option<Handed>,
    feed: Feed,
}

impl std::fmt::Debug for KinesisSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KinesisSource")
            .field("next_poll", &self.next_poll)
            .field("feed", &self.feed)
            .finish_non_exhaustive()
    }
}

/// The last batch handed out, for when it is processed.
#[derive(Debug)]
struct Handed {
    next: Next,
    bytes: u64,
    empty: bool,
}

#[derive(Debug)]
enum Feed {
    Polling {
        iterator: Option<String>,
    },
    Subscribed {
        events: Option<Events>,
        /// Where the subscription stood after the last batch processed.
        continuation: Option<String>,
        /// Read once by polling (after a subscription failed in a way that
        /// may hide the end of the shard).
        poll_once: bool,
    },
}

/// What one read gave: a GetRecords page, or a subscription event.
#[derive(Debug)]
pub(super) struct Page {
    /// The records, in shard order.
    pub records: Vec<ReadRecord>,
    /// `MillisBehindLatest` with it.
    pub millis_behind: Option<i64>,
    pub next: Next,
}

#[derive(Debug)]
pub(super) enum Next {
    /// Polling: the next iterator; `None` at the end of a closed shard.
    Iterator(Option<String>),
    /// A subscription event: its continuation, and whether the shard ended.
    Continuation { continuation: String, end: bool },
}

impl Next {
    fn ends_shard(&self) -> bool {
        match self {
            Next::Iterator(it) => it.is_none(),
            Next::Continuation { end, .. } => *end,
        }
    }
}

/// How a fetch went, for the report and the back-off.
#[derive(Debug, Default)]
pub(super) struct FetchNotes {
    pub polled: bool,
    pub subscribed: bool,
    pub refused: bool,
    pub throttled: bool,
    /// A read failed transiently (500, no answer): the shard backs off.
    pub failed: bool,
    pub refreshed: bool,
}

impl FetchNotes {
    fn count(&self, report: &mut ShardReport) {
        report.polls += u64::from(self.polled);
        report.subscriptions += u64::from(self.subscribed);
        report.subscriptions_refused += u64::from(self.refused);
        report.throttled += u64::from(self.throttled);
        report.iterators_refreshed += u64::from(self.refreshed);
        report.transient_errors += u64::from(self.failed);
    }
}

/// The units of `records` read from `shard`, as the core takes them.
fn units(
    shard: &ShardId,
    records: Vec<ReadRecord>,
    millis_behind: Option<i64>,
    ends_shard: bool,
) -> SourceBatch {
    let shard: Arc<str> = shard.as_str().into();
    let last_arrival = records.last().and_then(|r| r.arrival);
    let units = records
        .into_iter()
        .map(|r| {
            let sequence_number: Arc<str> = r.sequence_number.as_str().into();
            let base = StreamRecord {
                shard_id: shard.clone(),
                sequence_number: sequence_number.clone(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: r.partition_key.as_str().into(),
                explicit_hash_key: None,
                data: bytes::Bytes::new(),
                approximate_arrival: r.arrival,
                event_source_arn: None,
                change: None,
            };
            (sequence_number, Unit::kinesis(base, r.data))
        })
        .collect();
    SourceBatch {
        units,
        last_arrival,
        millis_behind,
        ends_shard,
    }
}

impl KinesisSource {
    /// A source reading `stream` through `reads`, polled or (`subscribed`)
    /// through the enhanced fan-out consumer `consumer_arn`.
    pub fn new(
        reads: Arc<dyn KinesisReads>,
        stream: StreamAddress,
        settings: ReadSettings,
        subscribed: bool,
        consumer_arn: Option<String>,
        clock: StateStore,
    ) -> Self {
        KinesisSource {
            reads,
            stream,
            settings,
            consumer_arn,
            next_poll: Instant::now(),
            pin: None,
            clock,
            last: None,
            feed: if subscribed {
                Feed::Subscribed {
                    events: None,
                    continuation: None,
                    poll_once: false,
                }
            } else {
                Feed::Polling { iterator: None }
            },
        }
    }

    /// Subscribes again, with `consumer_arn` (the EFO consumer locked now):
    /// the subscription open (if any) ends.
    pub fn resubscribe(&mut self, consumer_arn: Option<String>) {
        self.consumer_arn = consumer_arn;
        if let Feed::Subscribed { events, .. } = &mut self.feed {
            *events = None;
        }
    }

    /// Fetches what is there: one GetRecords, or the subscription's next
    /// event (subscribing first when there is none).
    async fn fetch_noted(
        &mut self,
        shard: &ShardId,
        position: Option<&Checkpoint>,
        notes: &mut FetchNotes,
    ) -> Result<Option<Page>, ReadError> {
        let Some(start) = start_at(position, self.settings.initial_position) else {
            return Ok(None);
        };
        let reads = &*self.reads;
        let stream = &self.stream;
        let settings = &self.settings;
        match &mut self.feed {
            Feed::Polling { iterator } => {
                let it = iterator.take();
                let opened_at = self.clock.now();
                let opens = it.is_none();
                let fetched = poll(reads, stream, shard, it, &start, settings, notes).await;
                if opens && notes.polled && unpinned(position) {
                    self.pin = latest_pin(&start, opened_at);
                }
                let fetched = fetched?;
                if notes.throttled || notes.failed {
                    self.next_poll = backed_off_until();
                }
                Ok(fetched)
            }
            Feed::Subscribed {
                events,
                continuation,
                poll_once,
            } => {
                if std::mem::take(poll_once) {
                    let fetched = poll(reads, stream, shard, None, &start, settings, notes).await?;
                    if fetched.is_none() {
                        *poll_once = true;
                    }
                    if notes.throttled || notes.failed {
                        self.next_poll = backed_off_until();
                    }
                    return Ok(fetched);
                }
                let Some(rx) = events else {
                    let Some(arn) = self.consumer_arn.as_deref() else {
                        return Ok(None);
                    };
                    // Carry on from the position (after the last record
                    // processed, exact); a subscription that started at
                    // LATEST or a time and has processed nothing yet carries
                    // on after its continuation, so it neither skips nor
                    // repeats what arrived meanwhile.
                    let start = match (&start, continuation.as_ref()) {
                        (IteratorStart::Latest | IteratorStart::AtTimestamp(_), Some(c))
                            if !c.is_empty() =>
                        {
                            IteratorStart::AfterSequence(c.clone())
                        }
                        _ => start,
                    };
                    let opened_at = self.clock.now();
                    match reads.subscribe(arn, shard, &start).await {
                        Ok(subscription) => {
                            notes.subscribed = true;
                            if unpinned(position) {
                                self.pin = latest_pin(&start, opened_at);
                            }
                            *events = Some(pump(subscription, settings.subscription_lifetime));
                        }
                        Err(ReadError::Failed(e)) if e.is_transient() => {
                            // A 500, or no answer in time: the shard backs
                            // off alone and subscribes again, as a poll does.
                            tracing::debug!(%shard, error = %e, "subscribing failed: the shard backs off");
                            notes.failed = true;
                            self.next_poll = backed_off_until();
                        }
                        Err(e) => self.next_poll = retry_subscription_at(e, shard, notes)?,
                    }
                    return Ok(None);
                };
                match rx.try_recv() {
                    Ok(Ok(event)) => {
                        let end = event.is_shard_end();
                        Ok(Some(Page {
                            records: event.records,
                            millis_behind: event.millis_behind_latest,
                            next: Next::Continuation {
                                continuation: event.continuation,
                                end,
                            },
                        }))
                    }
                    Ok(Err(e)) => {
                        *events = None;
                        match retry_subscription_at(e, shard, notes) {
                            Ok(at) => self.next_poll = at,
                            Err(gone @ ReadError::ConsumerGone(_)) => return Err(gone),
                            Err(e) => {
                                // An event this SDK could not read may be the
                                // end of the shard (no continuation): one poll
                                // tells.
                                tracing::warn!(%shard, error = %e, "subscription failed; reading once by polling");
                                *poll_once = true;
                            }
                        }
                        Ok(None)
                    }
                    Err(mpsc::error::TryRecvError::Empty) => Ok(None),
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        // The subscription's lifetime is over: subscribe again.
                        *events = None;
                        Ok(None)
                    }
                }
            }
        }
    }
}

impl RecordSource for KinesisSource {
    type Error = ReadError;

    fn due(&self, now: Instant) -> bool {
        match &self.feed {
            Feed::Subscribed {
                events: Some(events),
                ..
            } => !events.is_empty() || events.is_closed(),
            _ => self.next_poll <= now,
        }
    }

    async fn fetch(
        &mut self,
        shard: &ShardId,
        from: Option<&Checkpoint>,
        report: &mut ShardReport,
    ) -> Result<Fetched, ReadError> {
        let mut notes = FetchNotes::default();
        let fetched = self.fetch_noted(shard, from, &mut notes).await;
        notes.count(report);
        Ok(match fetched? {
            None => Fetched::Nothing,
            Some(Page {
                records,
                millis_behind,
                next,
            }) => {
                let ends_shard = next.ends_shard();
                self.last = Some(Handed {
                    bytes: records.iter().map(|r| r.data.len() as u64).sum(),
                    empty: records.is_empty(),
                    next,
                });
                Fetched::Batch(units(shard, records, millis_behind, ends_shard))
            }
        })
    }

    fn take_pin(&mut self) -> Option<Checkpoint> {
        self.pin.take()
    }

    /// Sets where the next read starts and when it is due.
    fn processed(&mut self, ok: bool) {
        let Some(handed) = self.last.take() else {
            return;
        };
        let now = Instant::now();
        if !ok {
            // Read again from the failed record.
            match &mut self.feed {
                Feed::Polling { iterator } => *iterator = None,
                Feed::Subscribed {
                    events,
                    continuation,
                    ..
                } => {
                    *events = None;
                    *continuation = None;
                }
            }
            self.next_poll = now + self.settings.idle_poll_interval;
            return;
        }
        let pace = Duration::from_secs_f64(
            handed.bytes as f64 / self.settings.read_bytes_per_second.max(1) as f64,
        );
        let wait = if handed.empty {
            self.settings.idle_poll_interval
        } else {
            self.settings.min_poll_interval.max(pace)
        };
        match (&mut self.feed, handed.next) {
            (Feed::Polling { iterator }, Next::Iterator(next)) => {
                *iterator = next;
                self.next_poll = now + wait;
            }
            (
                Feed::Subscribed { continuation, .. },
                Next::Continuation {
                    continuation: c, ..
                },
            ) => {
                *continuation = Some(c);
            }
            // A poll of a subscribed shard (after a failed subscription):
            // subscribe again from the position.
            (Feed::Subscribed { .. }, Next::Iterator(_)) => {}
            (Feed::Polling { .. }, Next::Continuation { .. }) => {}
        }
    }
}
