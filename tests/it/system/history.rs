//! The history checker against hand-made histories: a good one passes, and
//! each kind of bad one is caught.

use shardkeeper::consumer::{StopReason, WorkerEvent};
use shardkeeper::state::{Checkpoint, SequenceNumber, ShardId};
use shardkeeper_history::{check, History, Processed, Produced};
use std::time::{Duration, Instant};

fn shard(n: u32) -> ShardId {
    ShardId::new(format!("shardId-{n:012}")).unwrap()
}

/// Record `n` of key `k` on shard 0 has sequence number `10 * (n + 1)`.
fn processed(consumer: &str, n: u64, at: Instant) -> Processed {
    processed_on(consumer, 0, n, at)
}

fn processed_on(consumer: &str, on: u32, n: u64, at: Instant) -> Processed {
    Processed {
        consumer: consumer.to_owned(),
        shard: shard(on),
        key: "k".to_owned(),
        n,
        sequence: SequenceNumber::new(&(10 * (n + 1)).to_string()).unwrap(),
        sub_sequence: 0,
        at,
    }
}

fn gained(on: u32, position: Option<&str>, at: Instant) -> WorkerEvent {
    WorkerEvent::Gained {
        shard: shard(on),
        position: position.map(|p| Checkpoint::after(p).unwrap()),
        at,
    }
}

fn checkpointed(seq: &str, sent: Instant) -> WorkerEvent {
    WorkerEvent::Checkpointed {
        shard: shard(0),
        checkpoint: Checkpoint::after(seq).unwrap(),
        sent,
    }
}

fn stopped(on: u32, why: StopReason, at: Instant) -> WorkerEvent {
    WorkerEvent::Stopped {
        shard: shard(on),
        why,
        at,
    }
}

/// Three records of one key on shard 0. `a` processes 0 and 1, checkpoints
/// after 0 (sequence 10), dies; `b` gains the shard at that checkpoint and
/// re-runs 1 (not covered: a justified duplicate), then 2.
fn good() -> (History, impl Fn(u64) -> Instant) {
    let t = Instant::now();
    let ms = move |n: u64| t + Duration::from_millis(n);
    let history = History {
        produced: (0..3).map(|n| Produced { key: "k".into(), n }).collect(),
        processed: vec![
            processed("a", 0, ms(1)),
            processed("a", 1, ms(2)),
            processed("b", 1, ms(20)),
            processed("b", 2, ms(21)),
        ],
        events: vec![
            ("a".into(), gained(0, None, ms(0))),
            ("a".into(), checkpointed("10", ms(3))),
            ("b".into(), gained(0, Some("10"), ms(10))),
            ("b".into(), checkpointed("30", ms(22))),
            ("b".into(), stopped(0, StopReason::Released, ms(30))),
        ],
        killed: vec![("a".into(), ms(5))],
        parents: Default::default(),
        spans: Vec::new(),
        moved_back: Vec::new(),
    };
    (history, ms)
}

#[test]
fn a_good_history_passes_with_its_justified_duplicate() {
    let (history, _) = good();
    let v = check(&history);
    assert!(v.passed(), "{v:?}");
    assert_eq!((v.produced, v.processed, v.duplicates), (3, 3, 1), "{v:?}");
    assert_eq!(v.unjustified_duplicates, 0);
}

#[test]
fn a_lost_record_is_caught() {
    let (mut history, _) = good();
    history.processed.retain(|p| p.n != 2);
    let v = check(&history);
    assert_eq!(v.lost, 1);
    assert!(!v.passed());
}

#[test]
fn a_key_out_of_order_is_caught() {
    let (mut history, _) = good();
    history.processed.swap(0, 1);
    let v = check(&history);
    assert_eq!(v.order_violations, 1);
    assert!(!v.passed());
}

#[test]
fn two_holders_with_accepted_checkpoints_in_the_overlap_are_caught() {
    // a's checkpoint sent after b learned it held the shard, and accepted.
    let (mut history, ms) = good();
    history
        .events
        .insert(3, ("a".into(), checkpointed("15", ms(12))));
    let v = check(&history);
    assert_eq!(v.double_owned, vec![shard(0)], "{v:?}");
    assert!(!v.passed());
}

#[test]
fn a_checkpoint_moving_backwards_is_caught() {
    let (mut history, ms) = good();
    history.events.push(("b".into(), checkpointed("5", ms(25))));
    let v = check(&history);
    assert_eq!(v.checkpoint_regressions, vec![shard(0)]);
    assert!(!v.passed());
    // An operator's move back between the two is not a regression; one
    // before both or after both does not excuse it.
    for (window, passes) in [((23, 24), true), ((10, 21), false), ((26, 30), false)] {
        history.moved_back = vec![(ms(window.0), ms(window.1))];
        assert_eq!(check(&history).passed(), passes, "moved back {window:?}");
    }
}

#[test]
fn a_duplicate_the_starting_checkpoint_covered_is_caught() {
    // b started after a checkpoint covering record 1 (sequence 20), yet ran it again.
    let (mut history, ms) = good();
    history.events[2] = ("b".into(), gained(0, Some("20"), ms(10)));
    let v = check(&history);
    assert_eq!(v.unjustified_duplicates, 1, "{v:?}");
    assert!(!v.passed());
}

#[test]
fn a_duplicate_within_one_holding_is_caught() {
    let (mut history, ms) = good();
    history.processed.push(processed("b", 2, ms(23)));
    let v = check(&history);
    assert_eq!((v.duplicates, v.unjustified_duplicates), (2, 1), "{v:?}");
    assert!(!v.passed());
}

#[test]
fn a_child_read_before_its_parent_ended_is_caught() {
    let (mut history, ms) = good();
    // Shards 1 and 2 are the children of 0; b completes 0 at 28 ms.
    history.parents.insert(shard(1), vec![shard(0)]);
    history.parents.insert(shard(2), vec![shard(0)]);
    history.events[4] = ("b".into(), stopped(0, StopReason::Completed, ms(28)));
    history.produced.push(Produced {
        key: "k".into(),
        n: 3,
    });
    history.events.push(("c".into(), gained(1, None, ms(29))));
    history.processed.push(processed_on("c", 1, 3, ms(30)));
    assert!(check(&history).passed(), "{:?}", check(&history));

    // The same record on the other child, before the parent's end.
    let mut early = history.clone();
    early.events.push(("c".into(), gained(2, None, ms(26))));
    early.processed.push(processed_on("c", 2, 3, ms(27)));
    let v = check(&early);
    assert_eq!(v.children_before_parents, vec![shard(2)], "{v:?}");
    assert!(!v.passed());

    // A completion whose depleting write was refused (the lease was lost)
    // does not count.
    let mut refused = history.clone();
    refused
        .events
        .insert(5, ("b".into(), stopped(0, StopReason::Lost, ms(28))));
    let v = check(&refused);
    assert_eq!(v.children_before_parents, vec![shard(1)], "{v:?}");
}

#[test]
fn a_record_processed_after_its_batch_lease_ran_out_is_caught() {
    let (mut history, ms) = good();
    // b's batch started at 15 ms under a lease it held until 18 ms by its
    // own clock; it processed records 1 and 2 at 20 and 21 ms.
    history.events.push((
        "b".into(),
        WorkerEvent::Processing {
            shard: shard(0),
            at: ms(15),
            lease_expiry: ms(18),
        },
    ));
    assert_eq!(check(&history).past_lease_expiry, 2);
    assert!(!check(&history).passed());
    // Renewed in time: the next batch's bound covers them.
    history.events.push((
        "b".into(),
        WorkerEvent::Processing {
            shard: shard(0),
            at: ms(19),
            lease_expiry: ms(40),
        },
    ));
    assert!(check(&history).passed(), "{:?}", check(&history));
}
