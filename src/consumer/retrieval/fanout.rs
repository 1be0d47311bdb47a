//! Reading a shard through an enhanced fan-out subscription: the
//! subscription pumped by a task of its own (so a quiet shard never holds
//! up the others) into a channel the source reads, when to subscribe again
//! after a refusal, and one poll when a failed subscription may hide the
//! shard's end.

use crate::consumer::retrieval::polling::backed_off_until;
use crate::consumer::retrieval::source::{FetchNotes, Handed, Next, Page, Reading};
use crate::consumer::retrieval::start::{latest_pin, start_at};
use crate::consumer::retrieval::{IteratorStart, ReadError, Subscription, SubscriptionEvent};
use crate::pipeline::unpinned;
use crate::state::instant_now;
use crate::state::{Checkpoint, ShardId};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Kinesis refuses a new subscription of a consumer to a shard for about
/// 5 s after the last one started.
const RESUBSCRIBE_AFTER_REFUSAL: Duration = Duration::from_secs(5);

pub(super) type Events = mpsc::Receiver<Result<SubscriptionEvent, ReadError>>;

/// When to subscribe again after a refused (one still open) or throttled
/// subscription; any other error comes back.
pub(super) fn retry_subscription_at(
    e: ReadError,
    shard: &ShardId,
    notes: &mut FetchNotes,
) -> Result<Instant, ReadError> {
    match e {
        ReadError::SubscriptionInUse(why) => {
            tracing::debug!(%shard, %why, "subscription refused: one is still open");
            notes.refused = true;
            Ok(instant_now() + RESUBSCRIBE_AFTER_REFUSAL)
        }
        ReadError::Throttled { .. } => {
            notes.throttled = true;
            Ok(backed_off_until())
        }
        e => Err(e),
    }
}

/// Forwards a subscription's events until it ends, its lifetime is over, or
/// the worker drops the shard.
pub(super) fn pump(mut subscription: Box<dyn Subscription>, lifetime: Duration) -> Events {
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

/// Reads one shard through a subscription of an enhanced fan-out consumer.
#[derive(Debug)]
pub(crate) struct FanOutSource {
    pub(super) reading: Reading,
    /// The enhanced fan-out consumer subscribed with (none: nothing to
    /// subscribe with yet).
    consumer_arn: Option<String>,
    events: Option<Events>,
    /// Where the subscription stood after the last batch processed.
    continuation: Option<String>,
    /// Read once by polling (after a subscription failed in a way that may
    /// hide the end of the shard).
    poll_once: bool,
}

impl FanOutSource {
    pub(super) fn new(reading: Reading, consumer_arn: Option<String>) -> Self {
        FanOutSource {
            reading,
            consumer_arn,
            events: None,
            continuation: None,
            poll_once: false,
        }
    }

    /// Subscribes again, with `consumer_arn`: the subscription open (if
    /// any) ends.
    pub(super) fn resubscribe(&mut self, consumer_arn: Option<String>) {
        self.consumer_arn = consumer_arn;
        self.events = None;
    }

    /// An open subscription is due when it has an event or ended; otherwise
    /// once its back-off is over.
    pub(super) fn due(&self, now: Instant) -> bool {
        match &self.events {
            Some(events) => !events.is_empty() || events.is_closed(),
            None => self.reading.next_poll <= now,
        }
    }

    /// The subscription's next event (subscribing first when there is none),
    /// or the one poll a failed subscription asked for.
    pub(super) async fn fetch(
        &mut self,
        shard: &ShardId,
        position: Option<&Checkpoint>,
        notes: &mut FetchNotes,
    ) -> Result<Option<Page>, ReadError> {
        let reading = &mut self.reading;
        let Some(start) = start_at(position, reading.settings.initial_position) else {
            return Ok(None);
        };
        if std::mem::take(&mut self.poll_once) {
            let fetched = reading.poll(shard, None, &start, notes).await?;
            if fetched.is_none() {
                self.poll_once = true;
            }
            return Ok(fetched);
        }
        let Some(rx) = &mut self.events else {
            let Some(arn) = self.consumer_arn.as_deref() else {
                return Ok(None);
            };
            // Carry on from the position (after the last record processed,
            // exact); a subscription that started at LATEST or a time and
            // has processed nothing yet carries on after its continuation,
            // so it neither skips nor repeats what arrived meanwhile.
            let start = match (&start, self.continuation.as_ref()) {
                (IteratorStart::Latest | IteratorStart::AtTimestamp(_), Some(c))
                    if !c.is_empty() =>
                {
                    IteratorStart::AfterSequence(c.clone())
                }
                _ => start,
            };
            let opened_at = reading.clock.now();
            match reading.reads.subscribe(arn, shard, &start).await {
                Ok(subscription) => {
                    notes.subscribed = true;
                    if unpinned(position) {
                        reading.pin = latest_pin(&start, opened_at);
                    }
                    self.events = Some(pump(subscription, reading.settings.subscription_lifetime));
                }
                Err(ReadError::Failed(e)) if e.is_transient() => {
                    // A 500, or no answer in time: the shard backs off alone
                    // and subscribes again, as a poll does.
                    tracing::debug!(%shard, error = %e, "subscribing failed: the shard backs off");
                    notes.failed = true;
                    reading.next_poll = backed_off_until();
                }
                Err(e) => reading.next_poll = retry_subscription_at(e, shard, notes)?,
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
                self.events = None;
                match retry_subscription_at(e, shard, notes) {
                    Ok(at) => reading.next_poll = at,
                    Err(gone @ ReadError::ConsumerGone(_)) => return Err(gone),
                    Err(e) => {
                        // An event this SDK could not read may be the end of
                        // the shard (no continuation): one poll tells.
                        tracing::warn!(%shard, error = %e, "subscription failed; reading once by polling");
                        self.poll_once = true;
                    }
                }
                Ok(None)
            }
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => {
                // The subscription's lifetime is over: subscribe again.
                self.events = None;
                Ok(None)
            }
        }
    }

    /// Carries on from the event's continuation, or, after a failure,
    /// subscribes again from the position.
    pub(super) fn processed(&mut self, ok: bool, handed: Handed) {
        if !ok {
            self.events = None;
            self.continuation = None;
            self.reading.next_poll = instant_now() + self.reading.settings.idle_poll_interval;
            return;
        }
        // A poll of a subscribed shard (after a failed subscription)
        // subscribes again from the position.
        if let Next::Continuation { continuation, .. } = handed.next {
            self.continuation = Some(continuation);
        }
    }
}
