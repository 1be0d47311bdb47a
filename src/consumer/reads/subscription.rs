//! A shard's enhanced fan-out subscription: pumped by a task of its own (so
//! a quiet shard never holds up the others) into a channel the source reads,
//! and when to subscribe again after a refusal.

use crate::consumer::reads::poll::backed_off_until;
use crate::consumer::reads::source::FetchNotes;
use crate::consumer::reads::{ReadError, Subscription, SubscriptionEvent};
use crate::state::ShardId;
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
            Ok(Instant::now() + RESUBSCRIBE_AFTER_REFUSAL)
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
