//! Where a shard's records come from: GetRecords polling, or an enhanced
//! fan-out subscription pumped by a task of its own (so a quiet shard never
//! holds up the others). Both give the worker batches; the worker processes
//! them the same way and tells the feed how it went.

use super::config::{InitialPosition, WorkerConfig, LATEST_REOPEN_MARGIN_MS};
use crate::consumer::reads::{
    IteratorStart, KinesisReads, ReadError, ReadRecord, SubscriptionEvent,
};
use crate::state::{Backoff, Checkpoint, EpochMillis, Jitter, ShardId, StreamAddress};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Kinesis refuses a new subscription of a consumer to a shard for about
/// 5 s after the last one started.
const RESUBSCRIBE_AFTER_REFUSAL: Duration = Duration::from_secs(5);

/// How long a throttled or failed shard backs off, alone while the others go
/// on: 1 s, the window over which Kinesis counts a shard's read limits, plus
/// up to half of it so shards throttled together do not come back together.
/// The same each time (`max` is `base`).
const THROTTLE_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(1),
    jitter: Jitter::UpToHalfMore,
};

type Events = mpsc::Receiver<Result<SubscriptionEvent, ReadError>>;

/// The reading state of one held shard.
#[derive(Debug)]
pub(crate) struct Cursor {
    /// How far the shard is processed.
    pub position: Option<Checkpoint>,
    /// Arrival time of the last processed record.
    pub arrival: Option<EpochMillis>,
    /// Not read again before this.
    pub next_poll: Instant,
    /// `MillisBehindLatest` of the last read.
    pub millis_behind: Option<i64>,
    /// The position is a LATEST start's pin that is not stored yet.
    pub pin_unstored: bool,
    feed: Feed,
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

/// A batch of records fetched from a shard.
#[derive(Debug)]
pub(crate) struct Batch {
    /// The records, in shard order.
    pub records: Vec<ReadRecord>,
    /// `MillisBehindLatest` with it.
    pub millis_behind: Option<i64>,
    next: Next,
}

#[derive(Debug)]
enum Next {
    /// Polling: the next iterator; `None` at the end of a closed shard.
    Iterator(Option<String>),
    /// A subscription event: its continuation, and whether the shard ended.
    Continuation { continuation: String, end: bool },
}

impl Batch {
    /// The shard ends after these records.
    pub fn ends_shard(&self) -> bool {
        match &self.next {
            Next::Iterator(it) => it.is_none(),
            Next::Continuation { end, .. } => *end,
        }
    }

    fn bytes(&self) -> u64 {
        self.records.iter().map(|r| r.data.len() as u64).sum()
    }
}

/// What fetching found.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// Records to process (possibly none: an empty read).
    Batch(Batch),
    /// Nothing now (no event yet, a refreshed iterator, a back-off).
    Nothing,
}

/// How a fetch went wrong in a way the worker counts.
#[derive(Debug, Default)]
pub(crate) struct FetchNotes {
    pub polled: bool,
    pub subscribed: bool,
    pub refused: bool,
    pub throttled: bool,
    /// A read failed transiently (500, no answer): the shard backs off.
    pub failed: bool,
    pub refreshed: bool,
}

/// Where reading starts when no iterator or subscription carries on: after
/// the checkpoint (at the checkpointed record, which the processing core
/// skips, so a pending KPL sub-sequence resumes inside its aggregate), or the
/// initial position. `None` for a shard already read to its end.
fn start_at(position: Option<&Checkpoint>, initial: InitialPosition) -> Option<IteratorStart> {
    Some(match position {
        Some(Checkpoint::After { sequence, .. }) | Some(Checkpoint::AtSequence(sequence)) => {
            IteratorStart::AtSequence(sequence.as_str().to_owned())
        }
        Some(Checkpoint::ShardEnd) => return None,
        Some(Checkpoint::Latest) => IteratorStart::Latest,
        Some(Checkpoint::AtTimestamp(t)) => IteratorStart::AtTimestamp(*t),
        Some(Checkpoint::TrimHorizon) => IteratorStart::TrimHorizon,
        None => match initial {
            InitialPosition::TrimHorizon => IteratorStart::TrimHorizon,
            InitialPosition::Latest => IteratorStart::Latest,
            InitialPosition::AtTimestamp(t) => IteratorStart::AtTimestamp(t),
        },
    })
}

/// A shard started at LATEST with nothing processed is pinned to a time
/// before its first iterator opened (less [`LATEST_REOPEN_MARGIN_MS`]): an
/// iterator opened again later starts there, not at a new LATEST that would
/// skip what arrived in between. Records that arrived shortly before the
/// start may then be read (at least once, never skipped). The first record
/// processed pins the shard to itself.
fn pin_latest(
    position: &mut Option<Checkpoint>,
    unstored: &mut bool,
    start: &IteratorStart,
    opened_at: EpochMillis,
) {
    if position.is_none() && matches!(start, IteratorStart::Latest) {
        *position = Some(Checkpoint::AtTimestamp(opened_at - LATEST_REOPEN_MARGIN_MS));
        *unstored = true;
    }
}

fn wall_clock_millis() -> EpochMillis {
    use crate::state::Clock;
    crate::state::SystemClock.now_millis()
}

/// When a shard that was throttled or failed is read again.
fn backed_off_until() -> Instant {
    Instant::now() + THROTTLE_BACKOFF.delay(1)
}

/// When to subscribe again after a refused (one still open) or throttled
/// subscription; any other error comes back.
fn retry_subscription_at(
    e: ReadError,
    shard: &ShardId,
    notes: &mut FetchNotes,
) -> Result<Instant, ReadError> {
    match e {
        ReadError::SubscriptionInUse(why) => {
            tracing::debug!(%shard, %why, "subscription refused: one is still open");
            notes.refused = true;
            Ok(Instant::now() + RESUBSCRIBE_AFTER_REFUSAL)
        }
        ReadError::Throttled(_) => {
            notes.throttled = true;
            Ok(backed_off_until())
        }
        e => Err(e),
    }
}

/// Forwards a subscription's events until it ends, its lifetime is over, or
/// the worker drops the shard.
fn pump(
    mut subscription: Box<dyn crate::consumer::reads::Subscription>,
    lifetime: Duration,
) -> Events {
    let (tx, rx) = mpsc::channel(2);
    tokio::spawn(async move {
        let over = tokio::time::sleep(lifetime);
        tokio::pin!(over);
        let failed = loop {
            let event = tokio::select! {
                _ = &mut over => break None,
                _ = tx.closed() => break None,
                event = subscription.next_event() => event,
            };
            match event {
                Ok(Some(e)) => {
                    if tx.send(Ok(e)).await.is_err() {
                        break None;
                    }
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        // Closed before the worker hears of the end, so its next
        // subscription never overlaps this one.
        drop(subscription);
        if let Some(e) = failed {
            let _ = tx.send(Err(e)).await;
        }
    });
    rx
}

impl Cursor {
    /// A shard starting at `position` (its checkpoint), polled or subscribed.
    pub fn new(
        position: Option<Checkpoint>,
        arrival: Option<EpochMillis>,
        subscribed: bool,
    ) -> Self {
        Cursor {
            position,
            arrival,
            next_poll: Instant::now(),
            millis_behind: None,
            pin_unstored: false,
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

    /// Due to be read now.
    pub fn due(&self, now: Instant) -> bool {
        match &self.feed {
            Feed::Subscribed {
                events: Some(events),
                ..
            } => !events.is_empty() || events.is_closed(),
            _ => self.next_poll <= now,
        }
    }

    /// Ends the subscription (if any) so the next read subscribes again, with
    /// the EFO consumer locked now.
    pub fn unsubscribe(&mut self) {
        if let Feed::Subscribed { events, .. } = &mut self.feed {
            *events = None;
        }
    }

    /// Fetches what is there: one GetRecords, or the subscription's next
    /// event (subscribing first when there is none).
    pub async fn fetch(
        &mut self,
        reads: &dyn KinesisReads,
        stream: &StreamAddress,
        shard: &ShardId,
        consumer_arn: Option<&str>,
        config: &WorkerConfig,
        notes: &mut FetchNotes,
    ) -> Result<Fetched, ReadError> {
        let Some(start) = start_at(self.position.as_ref(), config.initial_position) else {
            return Ok(Fetched::Nothing);
        };
        match &mut self.feed {
            Feed::Polling { iterator } => {
                let it = iterator.take();
                let opened_at = wall_clock_millis();
                let opens = it.is_none();
                let fetched = Self::poll(reads, stream, shard, it, &start, config, notes).await;
                if opens && notes.polled {
                    pin_latest(
                        &mut self.position,
                        &mut self.pin_unstored,
                        &start,
                        opened_at,
                    );
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
                    let fetched =
                        Self::poll(reads, stream, shard, None, &start, config, notes).await?;
                    if let Fetched::Nothing = fetched {
                        *poll_once = true;
                    }
                    if notes.throttled || notes.failed {
                        self.next_poll = backed_off_until();
                    }
                    return Ok(fetched);
                }
                let Some(rx) = events else {
                    let Some(arn) = consumer_arn else {
                        return Ok(Fetched::Nothing);
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
                    let opened_at = wall_clock_millis();
                    match reads.subscribe(arn, shard, &start).await {
                        Ok(subscription) => {
                            notes.subscribed = true;
                            pin_latest(
                                &mut self.position,
                                &mut self.pin_unstored,
                                &start,
                                opened_at,
                            );
                            *events = Some(pump(subscription, config.subscription_lifetime));
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
                    return Ok(Fetched::Nothing);
                };
                match rx.try_recv() {
                    Ok(Ok(event)) => {
                        let end = event.is_shard_end();
                        Ok(Fetched::Batch(Batch {
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
                        Ok(Fetched::Nothing)
                    }
                    Err(mpsc::error::TryRecvError::Empty) => Ok(Fetched::Nothing),
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        // The subscription's lifetime is over: subscribe again.
                        *events = None;
                        Ok(Fetched::Nothing)
                    }
                }
            }
        }
    }

    async fn poll(
        reads: &dyn KinesisReads,
        stream: &StreamAddress,
        shard: &ShardId,
        iterator: Option<String>,
        start: &IteratorStart,
        config: &WorkerConfig,
        notes: &mut FetchNotes,
    ) -> Result<Fetched, ReadError> {
        let page = async {
            let iterator = match iterator {
                Some(it) => it,
                None => reads.shard_iterator(stream, shard, start).await?,
            };
            notes.polled = true;
            reads
                .get_records(stream, &iterator, config.max_records)
                .await
        };
        match page.await {
            Ok(page) => Ok(Fetched::Batch(Batch {
                records: page.records,
                millis_behind: page.millis_behind_latest,
                next: Next::Iterator(page.next_iterator),
            })),
            // Refresh at the checkpoint, never at LATEST (that would skip records).
            Err(ReadError::ExpiredIterator) => {
                notes.refreshed = true;
                Ok(Fetched::Nothing)
            }
            Err(ReadError::Throttled(_)) => {
                notes.throttled = true;
                Ok(Fetched::Nothing)
            }
            // A 500 or no answer for this shard: it backs off alone and
            // reads again from its position.
            Err(ReadError::Failed(e)) if e.is_transient() => {
                tracing::debug!(%shard, error = %e, "read failed; backing off this shard");
                notes.failed = true;
                Ok(Fetched::Nothing)
            }
            Err(e) => Err(e),
        }
    }

    /// The batch is processed up to `position` (`ok`: all of it). Sets where
    /// the next read starts and when it is due.
    pub fn processed(
        &mut self,
        batch: Batch,
        ok: bool,
        position: Option<(Checkpoint, Option<EpochMillis>)>,
        config: &WorkerConfig,
    ) {
        if let Some((cp, arrival)) = position {
            self.position = Some(cp);
            self.arrival = arrival;
        }
        self.millis_behind = batch.millis_behind.or(self.millis_behind);
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
            self.next_poll = now + config.idle_poll_interval;
            return;
        }
        let pace = Duration::from_secs_f64(
            batch.bytes() as f64 / config.read_bytes_per_second.max(1) as f64,
        );
        let wait = if batch.records.is_empty() {
            config.idle_poll_interval
        } else {
            config.min_poll_interval.max(pace)
        };
        match (&mut self.feed, batch.next) {
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
