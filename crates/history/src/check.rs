//! The history checker: what a run must never do, computed from what was
//! actually produced, processed and checkpointed.

use super::{History, Processed, Span};
use serde::Serialize;
use shardkeeper::consumer::{StopReason, WorkerEvent};
use shardkeeper::state::{Checkpoint, ShardId};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::time::{Duration, Instant};

/// What the checks found. [`Verification::passed`] is the verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verification {
    /// Records produced.
    pub produced: usize,
    /// Distinct records processed.
    pub processed: usize,
    /// Records processed more than once. Allowed only after a lease change,
    /// for records the new holder's starting checkpoint did not cover (those
    /// after the last accepted checkpoint of the holder before).
    pub duplicates: usize,
    /// Duplicates that the new holder's starting checkpoint covered, or
    /// within one holding (must be 0).
    pub unjustified_duplicates: usize,
    /// Records produced and never processed (must be 0).
    pub lost: usize,
    /// Records processed before an earlier record of the same key was
    /// processed for the first time (must be 0).
    pub order_violations: usize,
    /// Shards held by two consumers at once, both with accepted
    /// checkpoints in the overlap (must be empty).
    pub double_owned: Vec<ShardId>,
    /// Shards whose accepted checkpoints moved backwards, other than across
    /// an operator's move back ([`History::moved_back`]; must be empty).
    pub checkpoint_regressions: Vec<ShardId>,
    /// Shards with a record processed before every parent was read to its
    /// end (must be empty).
    pub children_before_parents: Vec<ShardId>,
    /// Records whose processing ended after the lease its batch ran under
    /// had run out on the worker's own clock (the lease expiry reported
    /// when the batch started; must be 0).
    pub past_lease_expiry: usize,
    /// Handler calls of two consumers on one shard whose intervals
    /// intersect: two consumers running the handler on one shard at once
    /// (calls that only touch at an instant do not; must be empty).
    pub overlaps: Vec<Overlap>,
    /// Handler calls made while, by the worker events, another consumer
    /// held the shard's lease and had started processing it (see
    /// [`Intrusion`] for the rule; must be empty).
    pub intrusions: Vec<Intrusion>,
}

impl Verification {
    /// Every check passed.
    pub fn passed(&self) -> bool {
        self.lost == 0
            && self.unjustified_duplicates == 0
            && self.order_violations == 0
            && self.double_owned.is_empty()
            && self.checkpoint_regressions.is_empty()
            && self.children_before_parents.is_empty()
            && self.past_lease_expiry == 0
            && self.overlaps.is_empty()
            && self.intrusions.is_empty()
    }
}

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
///   the shard: for [`StopReason::Lost`] at its first renewal or checkpoint
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One consumer's holding of one shard: from when it learned it held the
/// lease (starting at `position`) to the send time of its last accepted
/// checkpoint; `stopped` when it ended.
#[derive(Debug, Clone)]
struct Holding {
    consumer: String,
    position: Option<Checkpoint>,
    start: Instant,
    end: Instant,
    stopped: Option<Instant>,
}

fn holdings(history: &History) -> BTreeMap<ShardId, Vec<Holding>> {
    let mut open: HashMap<(&str, &ShardId), Holding> = HashMap::new();
    let mut done: BTreeMap<ShardId, Vec<Holding>> = BTreeMap::new();
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained {
                shard,
                position,
                at,
            } => {
                let h = Holding {
                    consumer: consumer.clone(),
                    position: position.clone(),
                    start: *at,
                    end: *at,
                    stopped: None,
                };
                if let Some(h) = open.insert((consumer, shard), h) {
                    done.entry(shard.clone()).or_default().push(h);
                }
            }
            WorkerEvent::Checkpointed { shard, sent, .. } => {
                if let Some(h) = open.get_mut(&(consumer.as_str(), shard)) {
                    h.end = h.end.max(*sent);
                }
            }
            WorkerEvent::Stopped { shard, at, .. } => {
                if let Some(mut h) = open.remove(&(consumer.as_str(), shard)) {
                    h.stopped = Some(*at);
                    done.entry(shard.clone()).or_default().push(h);
                }
            }
            WorkerEvent::Processing { .. } => {}
        }
    }
    for ((_, shard), h) in open {
        done.entry(shard.clone()).or_default().push(h);
    }
    for hs in done.values_mut() {
        hs.sort_by_key(|h| h.start);
    }
    done
}

fn overlapping(holders: &[Holding]) -> bool {
    holders.iter().enumerate().any(|(i, a)| {
        holders[i + 1..]
            .iter()
            .any(|b| a.consumer != b.consumer && a.start < b.end && b.start < a.end)
    })
}

/// Shards whose accepted checkpoints went back, other than across an
/// operator's move back (a window that meets the two checkpoints' sends).
fn regressed(history: &History) -> Vec<ShardId> {
    let moved_between = |a: Instant, b: Instant| {
        history
            .moved_back
            .iter()
            .any(|(start, end)| *start <= b && *end >= a)
    };
    let mut accepted: BTreeMap<&ShardId, Vec<(Instant, String)>> = BTreeMap::new();
    for (_, event) in &history.events {
        if let WorkerEvent::Checkpointed {
            shard,
            checkpoint,
            sent,
        } = event
        {
            accepted
                .entry(shard)
                .or_default()
                .push((*sent, checkpoint.order_key()));
        }
    }
    accepted
        .into_iter()
        .filter_map(|(shard, mut cps)| {
            cps.sort_by_key(|(sent, _)| *sent);
            cps.windows(2)
                .any(|w| w[1].1 < w[0].1 && !moved_between(w[0].0, w[1].0))
                .then(|| shard.clone())
        })
        .collect()
}

/// The holding a processing happened in: the last one of its consumer on
/// its shard that started before it.
fn holding_of<'a>(
    holdings: &'a BTreeMap<ShardId, Vec<Holding>>,
    p: &Processed,
) -> Option<&'a Holding> {
    holdings
        .get(&p.shard)?
        .iter()
        .rev()
        .find(|h| h.consumer == p.consumer && h.start <= p.at)
}

/// A repeat of `first` in `again` is justified when it came in a later
/// holding whose starting checkpoint does not cover the record (the holder
/// before stopped before checkpointing it). Without worker events there is
/// nothing to judge by, and a repeat counts as justified.
fn justified(
    holdings: &BTreeMap<ShardId, Vec<Holding>>,
    first: &Processed,
    again: &Processed,
) -> bool {
    let (Some(a), Some(b)) = (holding_of(holdings, first), holding_of(holdings, again)) else {
        return holdings.is_empty();
    };
    if std::ptr::eq(a, b) {
        return false;
    }
    !b.position
        .as_ref()
        .is_some_and(|cp| cp.covers(&again.sequence, again.sub_sequence))
}

/// When each shard was completed (read to its end): the earliest
/// completion not followed, in the same holding, by that worker's `Lost`
/// for the shard (its depleting write was refused).
fn completions(history: &History) -> HashMap<&ShardId, Instant> {
    let mut announced: Vec<(&str, &ShardId, Instant)> = Vec::new();
    // When each consumer last gained each shard: a loss takes back only a
    // completion announced in the holding it ends, not one of an earlier
    // holding (a parent completed, reopened by a rewind, then lost).
    let mut holding: HashMap<(&str, &ShardId), Instant> = HashMap::new();
    for (consumer, event) in &history.events {
        match event {
            WorkerEvent::Gained { shard, at, .. } => {
                holding.insert((consumer, shard), *at);
            }
            WorkerEvent::Stopped {
                shard,
                why: StopReason::Completed,
                at,
            } => announced.push((consumer, shard, *at)),
            WorkerEvent::Stopped {
                shard,
                why: StopReason::Lost,
                ..
            } => {
                let since = holding.get(&(consumer.as_str(), shard)).copied();
                announced.retain(|(c, s, at)| {
                    !(c == consumer && s == &shard && since.is_none_or(|g| *at >= g))
                })
            }
            _ => {}
        }
    }
    let mut out: HashMap<&ShardId, Instant> = HashMap::new();
    for (_, shard, at) in announced {
        let t = out.entry(shard).or_insert(at);
        *t = (*t).min(at);
    }
    out
}

/// Records processed after the lease their batch started under ran out: for
/// each record, the last `Processing` event of its consumer and shard
/// before it.
fn past_lease_expiry(history: &History) -> usize {
    let mut bounds: HashMap<(&str, &ShardId), Vec<(Instant, Instant)>> = HashMap::new();
    for (consumer, event) in &history.events {
        if let WorkerEvent::Processing {
            shard,
            at,
            lease_expiry,
        } = event
        {
            bounds
                .entry((consumer.as_str(), shard))
                .or_default()
                .push((*at, *lease_expiry));
        }
    }
    history
        .processed
        .iter()
        .filter(|p| {
            bounds
                .get(&(p.consumer.as_str(), &p.shard))
                .and_then(|b| b.iter().rev().find(|(at, _)| *at <= p.at))
                .is_some_and(|(_, expiry)| p.at > *expiry)
        })
        .count()
}

/// Each shard's handler calls, by start (then end).
fn calls_by_shard(history: &History) -> BTreeMap<&ShardId, Vec<&Span>> {
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
fn overlaps(calls: &BTreeMap<&ShardId, Vec<&Span>>, origin: Instant) -> Vec<Overlap> {
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
fn intrusions(
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

/// Checks `history`. See [`Verification`] for what each field means.
pub fn check(history: &History) -> Verification {
    let holdings = holdings(history);
    let produced: HashSet<(&str, u64)> = history
        .produced
        .iter()
        .map(|p| (p.key.as_str(), p.n))
        .collect();
    let mut first: HashMap<(&str, u64), &Processed> = HashMap::new();
    let mut highest: HashMap<&str, u64> = HashMap::new();
    let (mut duplicates, mut unjustified, mut order_violations) = (0, 0, 0);
    for p in &history.processed {
        if let Some(before) = first.get(&(p.key.as_str(), p.n)) {
            duplicates += 1;
            if !justified(&holdings, before, p) {
                unjustified += 1;
            }
            continue;
        }
        first.insert((p.key.as_str(), p.n), p);
        let top = highest.entry(p.key.as_str()).or_insert(p.n);
        if p.n < *top {
            order_violations += 1;
        }
        *top = (*top).max(p.n);
    }
    let calls = calls_by_shard(history);
    let origin = history.origin().unwrap_or_else(Instant::now);
    let completed = completions(history);
    let children_before_parents: BTreeSet<ShardId> = history
        .processed
        .iter()
        .filter(|p| {
            history.parents.get(&p.shard).is_some_and(|parents| {
                parents
                    .iter()
                    .any(|parent| completed.get(parent).is_none_or(|done| p.at < *done))
            })
        })
        .map(|p| p.shard.clone())
        .collect();
    let seen: HashSet<(&str, u64)> = first.keys().copied().collect();
    Verification {
        produced: produced.len(),
        processed: seen.len(),
        duplicates,
        unjustified_duplicates: unjustified,
        lost: produced.difference(&seen).count(),
        order_violations,
        double_owned: holdings
            .into_iter()
            .filter(|(_, holders)| overlapping(holders))
            .map(|(shard, _)| shard)
            .collect(),
        checkpoint_regressions: regressed(history),
        children_before_parents: children_before_parents.into_iter().collect(),
        past_lease_expiry: past_lease_expiry(history),
        overlaps: overlaps(&calls, origin),
        intrusions: intrusions(history, &calls, origin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(n: u32) -> ShardId {
        ShardId::new(format!("shardId-{n:012}")).unwrap()
    }

    /// Instants `n` ms after one origin.
    fn clock() -> impl Fn(u64) -> Instant {
        let t = Instant::now();
        move |n| t + Duration::from_millis(n)
    }

    fn span(consumer: &str, on: u32, start: Instant, end: Instant) -> Span {
        Span {
            consumer: consumer.to_owned(),
            shard: shard(on),
            start,
            end,
        }
    }

    fn gained(consumer: &str, on: u32, at: Instant) -> (String, WorkerEvent) {
        let event = WorkerEvent::Gained {
            shard: shard(on),
            position: None,
            at,
        };
        (consumer.to_owned(), event)
    }

    fn stopped(consumer: &str, on: u32, why: StopReason, at: Instant) -> (String, WorkerEvent) {
        let event = WorkerEvent::Stopped {
            shard: shard(on),
            why,
            at,
        };
        (consumer.to_owned(), event)
    }

    fn calls(spans: Vec<Span>) -> History {
        History {
            spans,
            ..History::default()
        }
    }

    fn ran(consumer: &str, start: u64, end: u64) -> Call {
        Call {
            consumer: consumer.to_owned(),
            start: Duration::from_millis(start),
            end: Duration::from_millis(end),
        }
    }

    #[test]
    fn two_consumers_running_the_handler_on_one_shard_at_once_fail_with_the_overlap_named() {
        let ms = clock();
        // (Recorded in the order the calls ended.)
        let history = calls(vec![
            span("b", 0, ms(30), ms(40)),
            span("a", 0, ms(0), ms(50)),
            span("a", 0, ms(60), ms(70)),
        ]);
        let v = check(&history);
        assert_eq!(
            v.overlaps,
            vec![Overlap {
                shard: shard(0),
                first: ran("a", 0, 50),
                second: ran("b", 30, 40),
            }],
            "{v:?}"
        );
        assert!(!v.passed());
        assert_eq!(
            v.overlaps[0].to_string(),
            "shardId-000000000000: a ran 0.0..50.0 ms, and b ran 30.0..40.0 ms (together 10.0 ms)"
        );
    }

    #[test]
    fn calls_that_touch_at_an_instant_or_are_on_other_shards_or_of_one_consumer_pass() {
        let ms = clock();
        let touching = calls(vec![
            span("a", 0, ms(0), ms(50)),
            span("b", 0, ms(50), ms(90)),
        ]);
        let other_shards = calls(vec![
            span("a", 0, ms(0), ms(50)),
            span("b", 1, ms(10), ms(40)),
        ]);
        let one_consumer = calls(vec![
            span("a", 0, ms(0), ms(50)),
            span("a", 0, ms(10), ms(40)),
        ]);
        for history in [touching, other_shards, one_consumer] {
            let v = check(&history);
            assert!(v.overlaps.is_empty() && v.intrusions.is_empty(), "{v:?}");
            assert!(v.passed(), "{v:?}");
        }
    }

    /// `a` gains shard 0 at 0 ms and runs calls at 10-20 and 30-200 ms; `b`
    /// gains it at 100 ms (a's lease was taken) and runs a call at 150-160.
    fn taken_while_a_runs() -> History {
        let ms = clock();
        History {
            spans: vec![
                span("a", 0, ms(10), ms(20)),
                span("b", 0, ms(150), ms(160)),
                span("a", 0, ms(30), ms(200)),
            ],
            events: vec![
                gained("a", 0, ms(0)),
                gained("b", 0, ms(100)),
                stopped("a", 0, StopReason::Lost, ms(210)),
            ],
            ..History::default()
        }
    }

    #[test]
    fn a_call_running_after_the_new_holder_started_processing_is_an_intrusion() {
        let v = check(&taken_while_a_runs());
        assert_eq!(
            v.intrusions,
            vec![Intrusion {
                shard: shard(0),
                call: ran("a", 30, 200),
                holder: "b".to_owned(),
                gained: Duration::from_millis(100),
                first_call: Duration::from_millis(150),
                until: None,
            }],
            "{v:?}"
        );
        assert_eq!(v.overlaps.len(), 1, "{v:?}");
        assert!(!v.passed());
        assert_eq!(
            v.intrusions[0].to_string(),
            "shardId-000000000000: a ran 30.0..200.0 ms, while b held the lease \
             (gained at 100.0 ms, its first call at 150.0 ms, held to the end)"
        );

        // After b's call, where no call of b overlaps it: still b's holding.
        let mut after = taken_while_a_runs();
        let t = after.spans[0].start - Duration::from_millis(10);
        after.spans[2].start = t + Duration::from_millis(170);
        after.spans[2].end = t + Duration::from_millis(180);
        let v = check(&after);
        assert!(v.overlaps.is_empty(), "{v:?}");
        assert_eq!(v.intrusions.len(), 1, "{v:?}");
        assert!(!v.passed());
    }

    #[test]
    fn a_call_that_ends_before_the_new_holders_first_call_passes_whatever_the_events_say() {
        // a's last call ends at 140 ms, after b reported the gain (100 ms)
        // but before b's first call (150 ms).
        let mut history = taken_while_a_runs();
        history.spans[2].end = history.spans[0].start + Duration::from_millis(130);
        let v = check(&history);
        assert!(v.passed(), "{v:?}");
    }

    #[test]
    fn a_loss_observed_late_does_not_outlast_the_next_gain() {
        // b held the shard from 100 ms, lost it unawares; a took it back
        // (gained at 300 ms) and ran a call at 310-320 ms; b noticed its loss at
        // its next renewal, at 400 ms.
        let ms = clock();
        let history = History {
            spans: vec![
                span("a", 0, ms(10), ms(20)),
                span("b", 0, ms(150), ms(160)),
                span("a", 0, ms(310), ms(320)),
            ],
            events: vec![
                gained("a", 0, ms(0)),
                gained("b", 0, ms(100)),
                gained("a", 0, ms(300)),
                stopped("b", 0, StopReason::Lost, ms(400)),
            ],
            ..History::default()
        };
        let v = check(&history);
        assert!(v.passed(), "{v:?}");
    }

    #[test]
    fn a_loss_takes_back_only_the_completion_of_the_holding_it_ends() {
        // a completes the parent (shard 0) at 10 ms; b reads the child
        // (shard 1) at 20 ms; a rewind reopens the parent, a gains it again
        // at 30 ms and loses it at 40 ms: the completion at 10 ms stands.
        let ms = clock();
        let mut history = History {
            events: vec![
                gained("a", 0, ms(0)),
                stopped("a", 0, StopReason::Completed, ms(10)),
                gained("a", 0, ms(30)),
                stopped("a", 0, StopReason::Lost, ms(40)),
            ],
            processed: vec![Processed {
                key: "k".into(),
                n: 0,
                shard: shard(1),
                consumer: "b".into(),
                sequence: "1".parse().unwrap(),
                sub_sequence: 0,
                at: ms(20),
            }],
            ..History::default()
        };
        history.parents.insert(shard(1), vec![shard(0)]);
        assert!(check(&history).children_before_parents.is_empty());

        // A completion whose write was refused (announced, then lost in the
        // same holding) is taken back: the child's record came too soon.
        history.events.truncate(2);
        history
            .events
            .push(stopped("a", 0, StopReason::Lost, ms(11)));
        assert_eq!(check(&history).children_before_parents, vec![shard(1)]);
    }

    #[test]
    fn a_gain_reported_after_a_later_take_flags_nothing_while_its_holder_runs_no_call() {
        // b's take came first, but its gain was reported (at 300 ms) after
        // a's (200 ms), whose take came later; b ran nothing after.
        let ms = clock();
        let history = History {
            spans: vec![
                span("a", 0, ms(210), ms(220)),
                span("a", 0, ms(310), ms(320)),
            ],
            events: vec![
                gained("a", 0, ms(200)),
                gained("b", 0, ms(300)),
                stopped("b", 0, StopReason::Lost, ms(500)),
            ],
            ..History::default()
        };
        let v = check(&history);
        assert!(v.passed(), "{v:?}");
    }
}
