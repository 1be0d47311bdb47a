//! Handler calls as the checker reports them, and the two ways calls of
//! two consumers can collide on a shard: overlapping in time, or one
//! running inside the other's holding of the lease.

use super::{ms, History, Span};
use serde::Serialize;
use shardkeeper::consumer::WorkerEvent;
use shardkeeper::state::ShardId;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{Duration, Instant};

/// A handler call (a [`Span`]) as the checker reports it. Its times are
/// offsets from the history's first instant ([`History::origin`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Call {
    /// The consumer (process) that ran it.
    pub consumer: String,
    /// When it started.
    pub start: Duration,
    /// When it returned or was dropped.
    pub end: Duration,
}

impl fmt::Display for Call {
    /// `c3 ran 1520.3..3410.0 ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ran {:.1}..{:.1} ms",
            self.consumer,
            ms(self.start),
            ms(self.end)
        )
    }
}

/// Two consumers running the handler on one shard at once: their calls'
/// `[start, end]` intervals intersect in more than an instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overlap {
    /// The shard.
    pub shard: ShardId,
    /// The call that started first.
    pub first: Call,
    /// The call of another consumer that started while `first` ran.
    pub second: Call,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}, and {} (together {:.1} ms)",
            self.shard,
            self.first,
            self.second,
            ms(self
                .first
                .end
                .min(self.second.end)
                .saturating_sub(self.second.start))
        )
    }
}

/// A handler call of one consumer on a shard while, by the worker events,
/// another consumer held the shard's lease and had started processing it.
///
/// What the events say, and when they are stamped:
///
/// - [`WorkerEvent::Gained`]: `at` is taken when the worker opens the
///   shard's pipeline, after the take was applied by the store and the
///   shard's state read: the lease was the consumer's from some instant
///   before `at`. A gain may be reported late (a tick that fails after its
///   take reports it at the next tick), so the order of gains is not
///   always the order of the takes.
/// - [`WorkerEvent::Stopped`]: `at` is taken when the worker stops reading
///   the shard: for [`StopReason::Lost`](shardkeeper::consumer::StopReason::Lost) at its first renewal or checkpoint
///   after the lease went, which may be long after; for `HandedOff` and
///   `Released` after the write that gave the lease up; for `Completed`
///   just before the depleting write.
///
/// A holding, by the events, runs from a consumer's `Gained.at` to the
/// earliest of its own next `Stopped.at` on the shard and the next
/// `Gained.at` on the shard of any consumer (the take behind that gain
/// ended it earlier still; this cuts a `Lost` observed late). The rule: a
/// call of another consumer on the shard is an intrusion when it ends after
/// the holder's first call of the holding (the first one that starts in it)
/// started, and starts before the holding ends. A holding without a call
/// flags nothing.
///
/// No false positive on a correct run: there a lease moves from `a` to `b`
/// only once `a`'s lease ran out as the store sees it, after `a`'s last
/// call (cut at its stop-by instant at the latest), so every call of `a`
/// ends before `b`'s take was applied, hence before `b`'s `Gained.at` and
/// before `b`'s first call; and a call of a later holder starts after its
/// own gain, which ends `b`'s holding. A call that ends before the holder's
/// first call started is never flagged, whatever the events say: a gain
/// reported late (after a later take by another consumer) makes a holding
/// the store no longer had, and only a holder that processes in it, which
/// a correct run never does, makes the others' calls in it count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Intrusion {
    /// The shard.
    pub shard: ShardId,
    /// The call made in another consumer's holding.
    pub call: Call,
    /// The consumer whose holding it was.
    pub holder: String,
    /// When the holder reported it gained the lease.
    pub gained: Duration,
    /// When the holder's first call of the holding started.
    pub first_call: Duration,
    /// When the holding ended by the events (`None`: not before the
    /// history ends).
    pub until: Option<Duration>,
}

impl fmt::Display for Intrusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}, while {} held the lease (gained at {:.1} ms, its first call at {:.1} ms, held ",
            self.shard,
            self.call,
            self.holder,
            ms(self.gained),
            ms(self.first_call)
        )?;
        match self.until {
            Some(until) => write!(f, "until {:.1} ms)", ms(until)),
            None => write!(f, "to the end)"),
        }
    }
}

/// Each shard's handler calls, by start (then end).
pub(super) fn calls_by_shard(history: &History) -> BTreeMap<&ShardId, Vec<&Span>> {
    let mut by_shard: BTreeMap<&ShardId, Vec<&Span>> = BTreeMap::new();
    for span in &history.spans {
        by_shard.entry(&span.shard).or_default().push(span);
    }
    for spans in by_shard.values_mut() {
        spans.sort_by_key(|s| (s.start, s.end));
    }
    by_shard
}

fn call(span: &Span, origin: Instant) -> Call {
    Call {
        consumer: span.consumer.clone(),
        start: span.start.saturating_duration_since(origin),
        end: span.end.saturating_duration_since(origin),
    }
}

/// Every pair of calls of two consumers on one shard whose intervals
/// intersect in more than an instant.
pub(super) fn overlaps(calls: &BTreeMap<&ShardId, Vec<&Span>>, origin: Instant) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (shard, spans) in calls {
        for (i, a) in spans.iter().enumerate() {
            // Sorted by start: the calls after the first that starts at
            // or after `a`'s end cannot intersect it.
            for b in spans[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.consumer != b.consumer && a.start < b.end {
                    found.push(Overlap {
                        shard: (*shard).clone(),
                        first: call(a, origin),
                        second: call(b, origin),
                    });
                }
            }
        }
    }
    found
}

/// The calls made in another consumer's holding (see [`Intrusion`]).
pub(super) fn intrusions(
    history: &History,
    calls: &BTreeMap<&ShardId, Vec<&Span>>,
    origin: Instant,
) -> Vec<Intrusion> {
    let mut gains: BTreeMap<&ShardId, Vec<(&str, Instant)>> = BTreeMap::new();
    let mut stops: HashMap<(&str, &ShardId), Vec<Instant>> = HashMap::new();
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained { shard, at, .. } => gains
                .entry(shard)
                .or_default()
                .push((consumer.as_str(), *at)),
            WorkerEvent::Stopped { shard, at, .. } => stops
                .entry((consumer.as_str(), shard))
                .or_default()
                .push(*at),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (shard, mut gained) in gains {
        let Some(spans) = calls.get(shard) else {
            continue;
        };
        gained.sort_by_key(|(_, at)| *at);
        for (k, &(holder, from)) in gained.iter().enumerate() {
            let next_gain = gained.get(k + 1).map(|(_, at)| *at);
            let own_stop = stops
                .get(&(holder, shard))
                .and_then(|s| s.iter().copied().filter(|at| *at >= from).min());
            let until = match (next_gain, own_stop) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let within = |t: Instant| until.is_none_or(|u| t < u);
            let Some(first) = spans
                .iter()
                .find(|s| s.consumer == holder && s.start >= from && within(s.start))
            else {
                continue;
            };
            for other in spans.iter().take_while(|s| within(s.start)) {
                if other.consumer != holder && other.end > first.start {
                    found.push(Intrusion {
                        shard: shard.clone(),
                        call: call(other, origin),
                        holder: holder.to_owned(),
                        gained: from.saturating_duration_since(origin),
                        first_call: first.start.saturating_duration_since(origin),
                        until: until.map(|u| u.saturating_duration_since(origin)),
                    });
                }
            }
        }
    }
    found
}
