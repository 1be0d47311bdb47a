use super::*;
use shardkeeper::state::instant_now;

fn shard(n: u32) -> ShardId {
    ShardId::new(format!("shardId-{n:012}")).unwrap()
}

/// Instants `n` ms after one origin.
fn clock() -> impl Fn(u64) -> Instant {
    let t = instant_now();
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
