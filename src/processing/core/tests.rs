//! The core's concurrent path against a sink that remembers what it is
//! told, with handlers that wait as real ones do (tokio's paused clock:
//! the waits cost no real time).

use super::*;
use crate::processing::options::FailureMode;
use crate::processing::outcome::RecordError;
use crate::state::instant_now;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::Duration;

/// A sink with no stored position that keeps every checkpoint and the
/// records it was told were done past the progress.
#[derive(Default)]
struct Remembering {
    commits: Vec<Checkpoint>,
    done: HashSet<(Arc<str>, u64)>,
}

impl CheckpointSink for Remembering {
    async fn stored(&mut self) -> Result<Option<Checkpoint>> {
        Ok(None)
    }

    async fn commit(&mut self, checkpoint: &Checkpoint) -> Result<bool> {
        self.commits.push(checkpoint.clone());
        Ok(true)
    }

    fn done(&self, record: &StreamRecord) -> bool {
        self.done
            .contains(&(record.sequence_number.clone(), record.sub_sequence))
    }

    fn past_failure(&mut self, record: &StreamRecord) {
        self.done
            .insert((record.sequence_number.clone(), record.sub_sequence));
    }
}

fn record(n: u64, key: &str) -> StreamRecord {
    StreamRecord {
        shard_id: "shardId-000000000000".into(),
        sequence_number: format!("{:020}", 1000 + n).into(),
        sub_sequence: 0,
        aggregated: false,
        partition_key: key.into(),
        explicit_hash_key: None,
        data: bytes::Bytes::from(n.to_string()),
        approximate_arrival: None,
        event_source_arn: None,
        change: None,
    }
}

/// `n` records over `keys` keys (`k0`, `k1`, …, round robin).
fn batch(n: u64, keys: u64) -> Vec<(Arc<str>, Unit)> {
    (0..n)
        .map(|i| {
            let r = record(i, &format!("k{}", i % keys));
            (r.sequence_number.clone(), Unit::Record(r))
        })
        .collect()
}

fn number(r: &StreamRecord) -> u64 {
    std::str::from_utf8(&r.data).unwrap().parse().unwrap()
}

/// What a handler saw: each call's start and end (record numbers), and
/// the most calls at once.
#[derive(Default)]
struct Seen {
    started: Vec<u64>,
    ended: Vec<(String, u64)>,
    running: usize,
    most: usize,
}

/// A handler that waits `wait` a record (record 0 of key `k0` waits
/// `first_wait`), notes what it saw, and fails the records in `fail`.
fn waiting(
    seen: Arc<Mutex<Seen>>,
    wait: Duration,
    first_wait: Duration,
    fail: BTreeSet<u64>,
) -> impl RecordHandler {
    move |r: StreamRecord| {
        let seen = seen.clone();
        let fail = fail.contains(&number(&r));
        async move {
            let n = number(&r);
            {
                let mut s = seen.lock().unwrap();
                s.started.push(n);
                s.running += 1;
                s.most = s.most.max(s.running);
            }
            tokio::time::sleep(if n == 0 { first_wait } else { wait }).await;
            let mut s = seen.lock().unwrap();
            s.running -= 1;
            s.ended.push((r.partition_key.to_string(), n));
            if fail {
                Err(std::io::Error::other(format!("record {n} fails")))
            } else {
                Ok(())
            }
        }
    }
}

fn per_key(ended: &[(String, u64)]) -> BTreeMap<&str, Vec<u64>> {
    let mut keys: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (k, n) in ended {
        keys.entry(k).or_default().push(*n);
    }
    keys
}

fn options(concurrency: usize) -> ProcessingOptions {
    ProcessingOptions::default().concurrency(concurrency)
}

#[tokio::test(start_paused = true)]
async fn records_of_different_keys_run_at_once_and_one_key_in_order() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms = Duration::from_millis(5);
    let handler = waiting(seen.clone(), ms, ms, BTreeSet::new());
    let options = options(8);
    let mut sink = Remembering::default();
    let began = tokio::time::Instant::now();
    let report = Core::new(&handler, None, &options)
        .run(batch(100, 10), None, &mut sink)
        .await
        .unwrap();
    assert_eq!(report.processed, 100);
    let s = seen.lock().unwrap();
    assert_eq!(
        s.most, 8,
        "at most `concurrency` calls at once, and that many"
    );
    for (key, ns) in per_key(&s.ended) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order: {ns:?}"
        );
    }
    // 100 records of 5 ms, 8 at a time: 13 rounds, not 100.
    assert!(
        began.elapsed() < Duration::from_millis(100),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(sink.commits.last(), Some(&checkpoint_after(99)));
}

fn checkpoint_after(n: u64) -> Checkpoint {
    Checkpoint::After {
        sequence: SequenceNumber::new(&format!("{:020}", 1000 + n)).unwrap(),
        sub_sequence: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn concurrency_one_runs_the_records_one_after_another() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms = Duration::from_millis(5);
    let handler = waiting(seen.clone(), ms, ms, BTreeSet::new());
    let options = options(1);
    let report = Core::new(&handler, None, &options)
        .run(batch(20, 10), None, &mut Remembering::default())
        .await
        .unwrap();
    assert_eq!(report.processed, 20);
    let s = seen.lock().unwrap();
    assert_eq!(s.most, 1);
    assert_eq!(s.started, (0..20).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn the_progress_is_the_low_watermark_and_records_past_it_are_remembered() {
    // Record 0 (key k0) is slow: every other key's records finish first,
    // but no checkpoint may cover them before record 0 is done.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handler = waiting(
        seen.clone(),
        Duration::from_millis(5),
        Duration::from_secs(3),
        BTreeSet::new(),
    );
    let options = options(4);
    let mut sink = Remembering::default();
    let report = Core::new(&handler, None, &options)
        .run(batch(12, 4), None, &mut sink)
        .await
        .unwrap();
    assert_eq!(report.processed, 12);
    // Until record 0 was done, nothing was committed; the records done
    // past it were told to the sink before each commit.
    assert_eq!(sink.commits.last(), Some(&checkpoint_after(11)));
    for cp in &sink.commits[..sink.commits.len() - 1] {
        let Checkpoint::After { sequence, .. } = cp else {
            panic!("{cp:?}")
        };
        assert!(sequence.as_str() >= checkpoint_seq(0).as_str());
    }
    let s = seen.lock().unwrap();
    assert_eq!(
        s.ended.last().unwrap().1 % 4,
        0,
        "key k0's records end last"
    );
}

fn checkpoint_seq(n: u64) -> String {
    format!("{:020}", 1000 + n)
}

#[tokio::test(start_paused = true)]
async fn a_failure_stops_its_key_only_and_is_the_lowest_failure_reported() {
    // Record 5 (key k1 of 4) fails: k1's later records (9, 13, ...) are
    // not attempted; every other key runs to the end.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms = Duration::from_millis(5);
    let handler = waiting(seen.clone(), ms, ms, BTreeSet::from([5]));
    let options = options(4);
    let mut sink = Remembering::default();
    let report = Core::new(&handler, None, &options)
        .run(batch(20, 4), None, &mut sink)
        .await
        .unwrap();
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].item_identifier, checkpoint_seq(5));
    let keys = per_key(&seen.lock().unwrap().ended)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect::<BTreeMap<_, _>>();
    assert_eq!(keys["k1"], vec![1, 5], "k1 stops at its failure");
    assert_eq!(keys["k0"], vec![0, 4, 8, 12, 16]);
    assert_eq!(report.processed, 16);
    assert_eq!(report.not_attempted, 3);
    // The checkpoint stops before the failure; what ran past it is
    // remembered, so a retry from record 5 runs only k1's records.
    assert_eq!(sink.commits.last(), Some(&checkpoint_after(4)));
    let past: BTreeSet<u64> = (6..20).filter(|n| n % 4 != 1).collect();
    for n in 0..20 {
        let r = record(n, &format!("k{}", n % 4));
        assert_eq!(sink.done(&r), past.contains(&n), "record {n}");
    }
    // The retry, as Lambda sends it: from the failed record on.
    let retry: Vec<_> = batch(20, 4).into_iter().skip(5).collect();
    let seen_again = Arc::new(Mutex::new(Seen::default()));
    let handler = waiting(seen_again.clone(), ms, ms, BTreeSet::new());
    let report = Core::new(&handler, None, &options)
        .run(retry, None, &mut sink)
        .await
        .unwrap();
    assert_eq!(report.processed, 4);
    assert_eq!(report.duplicates_skipped, 11);
    let again: Vec<u64> = seen_again
        .lock()
        .unwrap()
        .ended
        .iter()
        .map(|e| e.1)
        .collect();
    assert_eq!(again, vec![5, 9, 13, 17]);
}

#[tokio::test(start_paused = true)]
async fn report_all_failures_runs_the_failing_keys_later_records() {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms = Duration::from_millis(5);
    let handler = waiting(seen.clone(), ms, ms, BTreeSet::from([5, 10]));
    let options = options(4).mode(FailureMode::ReportAllFailures);
    let report = Core::new(&handler, None, &options)
        .run(batch(20, 4), None, &mut Remembering::default())
        .await
        .unwrap();
    let failed: Vec<&str> = report
        .failures
        .iter()
        .map(|f| &*f.item_identifier)
        .collect();
    assert_eq!(failed, vec![checkpoint_seq(5), checkpoint_seq(10)]);
    assert_eq!(report.processed, 18);
    let s = seen.lock().unwrap();
    for (key, ns) in per_key(&s.ended) {
        assert!(
            ns.windows(2).all(|w| w[0] < w[1]),
            "key {key} out of order: {ns:?}"
        );
    }
}

// (Real time: the stop-by instant is read from the system clock.)
#[tokio::test]
async fn at_the_stop_by_nothing_starts_and_the_lowest_unfinished_is_reported() {
    // Record 0 runs past the stop-by: it is given up (a timeout); the
    // records not started are reported, and the lowest is record 0.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handler = waiting(
        seen.clone(),
        Duration::from_millis(40),
        Duration::from_secs(10),
        BTreeSet::new(),
    );
    let options = options(4);
    let mut sink = Remembering::default();
    let stop_by = instant_now() + Duration::from_millis(100);
    let report = Core::new(&handler, None, &options)
        .run(batch(40, 4), Some(stop_by), &mut sink)
        .await
        .unwrap();
    let first = report
        .failures
        .iter()
        .min_by_key(|f| f.item_identifier.clone())
        .unwrap();
    assert_eq!(first.item_identifier, checkpoint_seq(0));
    assert!(
        matches!(first.error, RecordError::Timeout { .. }),
        "{first:?}"
    );
    let started = seen.lock().unwrap().started.len() as u64;
    assert!(started < 40, "nothing starts after the stop-by");
    // Every record is processed, reported, or behind its key's reported
    // failure.
    assert_eq!(
        report.processed + report.failures.len() as u64 + report.not_attempted,
        40
    );
    assert!(report
        .failures
        .iter()
        .any(|f| matches!(f.error, RecordError::Deadline { .. })));
    assert!(sink.commits.is_empty(), "nothing before record 0 was done");
}

#[tokio::test(start_paused = true)]
async fn an_aggregates_user_records_run_by_their_own_keys() {
    // One KPL aggregate of 6 user records over 3 user keys.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ms = Duration::from_millis(5);
    let handler = waiting(seen.clone(), ms, ms, BTreeSet::new());
    let options = options(8);
    let item: Arc<str> = checkpoint_seq(0).into();
    let users: Vec<StreamRecord> = (0..6)
        .map(|i| StreamRecord {
            sub_sequence: i,
            aggregated: true,
            ..record(i, &format!("u{}", i % 3))
        })
        .map(|r| StreamRecord {
            sequence_number: item.clone(),
            ..r
        })
        .collect();
    let mut sink = Remembering::default();
    let report = Core::new(&handler, None, &options)
        .run([(item.clone(), Unit::Records(users))], None, &mut sink)
        .await
        .unwrap();
    assert_eq!(report.processed, 6);
    assert_eq!(
        seen.lock().unwrap().most,
        3,
        "one call a user key at a time"
    );
    assert_eq!(
        sink.commits.last(),
        Some(&Checkpoint::After {
            sequence: SequenceNumber::new(&item).unwrap(),
            sub_sequence: 5
        })
    );
}
