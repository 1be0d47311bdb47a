//! The pipeline's seams with a fake source and a fake checkpointer: what a
//! step commits, what it tells the source, how it ends at a failure, a
//! lost lease or a failed checkpoint, and which shards a map reads.

use super::*;
use crate::processing::{Core, ProcessingOptions, StreamRecord, Unit};
use crate::state::instant_now;
use crate::state::{Checkpoint, EpochMillis, SequenceNumber, Service, ShardId, StateError};
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn shard(id: &str) -> ShardId {
    ShardId::new(id).unwrap()
}

fn after(seq: &str) -> Checkpoint {
    Checkpoint::After {
        sequence: SequenceNumber::new(seq).unwrap(),
        sub_sequence: 0,
    }
}

fn batch(seqs: &[&str], ends_shard: bool) -> Fetched {
    let units = seqs
        .iter()
        .map(|s| {
            let record = StreamRecord {
                shard_id: "shardId-1".into(),
                sequence_number: (*s).into(),
                sub_sequence: 0,
                aggregated: false,
                partition_key: "k".into(),
                explicit_hash_key: None,
                data: bytes::Bytes::new(),
                approximate_arrival: None,
                event_source_arn: None,
                change: None,
            };
            let seq: Arc<str> = (*s).into();
            (seq, Unit::Record(record))
        })
        .collect();
    Fetched::Batch(SourceBatch {
        units,
        last_arrival: None,
        millis_behind: None,
        ends_shard,
    })
}

/// Hands out the batches it was given, one a fetch, and remembers what it
/// was asked and told.
#[derive(Debug, Default)]
struct FakeSource {
    batches: VecDeque<Fetched>,
    asked_from: Vec<Option<Checkpoint>>,
    told: Vec<bool>,
    due: bool,
    ended: bool,
}

impl FakeSource {
    fn with(batches: Vec<Fetched>) -> Self {
        FakeSource {
            batches: batches.into(),
            due: true,
            ..FakeSource::default()
        }
    }
}

impl RecordSource for FakeSource {
    type Error = crate::Error;

    fn due(&self, _: Instant) -> bool {
        self.due
    }

    async fn fetch(
        &mut self,
        _: &ShardId,
        from: Option<&Checkpoint>,
        _: &mut ShardReport,
    ) -> crate::Result<Fetched> {
        self.asked_from.push(from.cloned());
        Ok(self.batches.pop_front().unwrap_or(Fetched::Nothing))
    }

    fn take_pin(&mut self) -> Option<Checkpoint> {
        None
    }

    fn finished(&self, _: Option<&Checkpoint>) -> bool {
        self.ended
    }

    fn processed(&mut self, ok: bool) {
        self.told.push(ok);
    }
}

/// What a checkpoint call does.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Store,
    Transient,
    LeaseLost,
}

#[derive(Debug)]
struct FakeCheckpointer<const LEAVES: bool> {
    answer: Answer,
    stored: Vec<Checkpoint>,
}

impl<const LEAVES: bool> FakeCheckpointer<LEAVES> {
    fn answering(answer: Answer) -> Self {
        FakeCheckpointer {
            answer,
            stored: Vec::new(),
        }
    }
}

impl<const LEAVES: bool> Checkpointer for FakeCheckpointer<LEAVES> {
    const LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT: bool = LEAVES;

    async fn checkpoint(
        &mut self,
        shard: &ShardId,
        checkpoint: &Checkpoint,
        _: Option<EpochMillis>,
    ) -> crate::Result<bool> {
        match self.answer {
            Answer::Store => {
                self.stored.push(checkpoint.clone());
                Ok(true)
            }
            Answer::Transient => Err(StateError::Throttled {
                service: Service::DynamoDb,
                operation: "UpdateItem",
                attempts: 3,
                message: "slow down".into(),
            }
            .into()),
            Answer::LeaseLost => Err(StateError::LeaseLost {
                shard_id: shard.to_string(),
                reason: "taken".into(),
            }
            .into()),
        }
    }
}

/// Fails the record with sequence number `bad`, succeeds every other.
fn failing_at(bad: &'static str) -> impl crate::processing::RecordHandler {
    move |record: StreamRecord| async move {
        if record.sequence_number.as_ref() == bad {
            Err(std::io::Error::other("refused"))
        } else {
            Ok(())
        }
    }
}

async fn step<const LEAVES: bool>(
    pipeline: &mut ShardPipeline<FakeSource>,
    handler: &impl crate::processing::RecordHandler,
    checkpointer: &mut FakeCheckpointer<LEAVES>,
    report: &mut ShardReport,
) -> Result<Step, crate::Error> {
    let options = ProcessingOptions::default();
    let core = Core::new(handler, None, &options);
    pipeline.step(&core, checkpointer, None, report).await
}

#[tokio::test]
async fn a_batch_is_committed_after_its_last_record_and_the_next_read_starts_there() {
    let source = FakeSource::with(vec![batch(&["1", "2", "3"], false), batch(&[], false)]);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), None, None, source);
    let mut checkpointer = FakeCheckpointer::<true>::answering(Answer::Store);
    let mut report = ShardReport::default();
    let handler = failing_at("none");
    let first = step(&mut pipeline, &handler, &mut checkpointer, &mut report).await;
    assert!(
        matches!(first, Ok(Step::Processed { ended: false, ref failures }) if failures.is_empty())
    );
    assert_eq!(checkpointer.stored.last(), Some(&after("3")));
    assert_eq!(pipeline.position(), Some(&after("3")));
    step(&mut pipeline, &handler, &mut checkpointer, &mut report)
        .await
        .unwrap();
    let source = pipeline.source();
    assert_eq!(source.asked_from, vec![None, Some(after("3"))]);
    assert_eq!(source.told, vec![true, true]);
    assert_eq!(report.processed, 3);
}

#[tokio::test]
async fn a_failed_record_keeps_what_came_before_it_and_is_read_again() {
    let source = FakeSource::with(vec![
        batch(&["1", "2", "3"], true),
        batch(&["2", "3"], true),
    ]);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), None, None, source);
    let mut checkpointer = FakeCheckpointer::<true>::answering(Answer::Store);
    let mut report = ShardReport::default();
    let failed = step(
        &mut pipeline,
        &failing_at("2"),
        &mut checkpointer,
        &mut report,
    )
    .await;
    let Ok(Step::Processed { ended, failures }) = failed else {
        panic!("processed up to the failure: {failed:?}");
    };
    assert!(!ended, "a shard with a failure is not read to its end");
    assert_eq!(failures.len(), 1);
    assert_eq!(pipeline.position(), Some(&after("1")));
    assert_eq!(pipeline.source().told, vec![false]);
    let again = step(
        &mut pipeline,
        &failing_at("none"),
        &mut checkpointer,
        &mut report,
    )
    .await;
    assert!(matches!(again, Ok(Step::Processed { ended: true, .. })));
    assert_eq!(pipeline.source().asked_from[1], Some(after("1")));
    assert_eq!(pipeline.position(), Some(&after("3")));
}

#[tokio::test]
async fn a_shard_with_nothing_processed_is_pinned_to_the_first_record_it_read() {
    let source = FakeSource::with(vec![batch(&["5", "6"], false)]);
    let start = Some(Checkpoint::TrimHorizon);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), start, None, source);
    let mut checkpointer = FakeCheckpointer::<true>::answering(Answer::Store);
    let mut report = ShardReport::default();
    step(
        &mut pipeline,
        &failing_at("5"),
        &mut checkpointer,
        &mut report,
    )
    .await
    .unwrap();
    let pinned = Checkpoint::AtSequence(SequenceNumber::new("5").unwrap());
    assert_eq!(
        pipeline.position(),
        Some(&pinned),
        "never TRIM_HORIZON or LATEST again"
    );
    assert!(checkpointer.stored.is_empty(), "nothing was done to commit");
}

#[tokio::test]
async fn a_lost_lease_stops_the_shard_and_stores_nothing() {
    let source = FakeSource::with(vec![batch(&["1", "2"], false)]);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), Some(after("0")), None, source);
    let mut checkpointer = FakeCheckpointer::<true>::answering(Answer::LeaseLost);
    let mut report = ShardReport::default();
    let lost = step(
        &mut pipeline,
        &failing_at("none"),
        &mut checkpointer,
        &mut report,
    )
    .await;
    assert!(matches!(lost, Ok(Step::Lost)), "{lost:?}");
    assert!(checkpointer.stored.is_empty());
}

#[tokio::test]
async fn a_transient_checkpoint_failure_is_left_to_the_next_or_ends_the_batch_as_the_checkpointer_says(
) {
    let source = FakeSource::with(vec![batch(&["1", "2"], false)]);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), Some(after("0")), None, source);
    let mut leaves = FakeCheckpointer::<true>::answering(Answer::Transient);
    let mut report = ShardReport::default();
    let went_on = step(&mut pipeline, &failing_at("none"), &mut leaves, &mut report).await;
    assert!(matches!(went_on, Ok(Step::Processed { .. })), "{went_on:?}");
    assert!(report.transient_errors >= 1, "counted");
    assert_eq!(report.processed, 2);

    let source = FakeSource::with(vec![batch(&["1", "2"], false)]);
    let mut pipeline = ShardPipeline::new(shard("shardId-1"), Some(after("0")), None, source);
    let mut ends = FakeCheckpointer::<false>::answering(Answer::Transient);
    let mut report = ShardReport::default();
    let ended = step(&mut pipeline, &failing_at("none"), &mut ends, &mut report).await;
    assert!(ended.is_err_and(|e| e.is_transient()));
    // What was processed is not run again by this process: reading carries
    // on after it, and the next checkpoint stores it.
    assert_eq!(pipeline.position(), Some(&after("2")));
    assert_eq!(
        pipeline.source().told,
        vec![false],
        "read again from the position"
    );
}

fn open(map: &mut ShardMap<FakeSource>, id: &str, parents: &[&str]) {
    let pipeline = ShardPipeline::new(shard(id), None, None, FakeSource::with(Vec::new()));
    map.open(pipeline, parents.iter().map(|p| shard(p)).collect());
}

#[test]
fn a_child_is_due_once_its_parent_in_the_map_is_finished() {
    let mut map = ShardMap::default();
    open(&mut map, "parent", &[]);
    open(&mut map, "child", &["parent"]);
    open(&mut map, "orphan", &["gone"]);
    let now = instant_now();
    assert_eq!(map.due(now), vec![shard("parent"), shard("orphan")]);
    map.get_mut(&shard("parent")).unwrap().source_mut().ended = true;
    assert_eq!(map.due(now), vec![shard("child"), shard("orphan")]);
    map.close(&shard("parent"));
    assert_eq!(map.due(now), vec![shard("child"), shard("orphan")]);
    assert_eq!(map.shards(), &[shard("child"), shard("orphan")]);
}

#[test]
fn a_shard_whose_source_is_not_due_is_left_out() {
    let mut map = ShardMap::default();
    open(&mut map, "a", &[]);
    open(&mut map, "b", &[]);
    map.get_mut(&shard("a")).unwrap().source_mut().due = false;
    assert_eq!(map.due(instant_now()), vec![shard("b")]);
    assert_eq!(map.close_all(), vec![shard("a"), shard("b")]);
    assert!(map.is_empty());
}

#[tokio::test]
async fn pacing_defers_a_checkpoint_within_its_interval_but_never_a_pin() {
    let mut pacing = Pacing::default();
    let hour = Duration::from_secs(3600);
    let shard = shard("shardId-1");
    let mut paced = Paced {
        inner: FakeCheckpointer::<true>::answering(Answer::Store),
        pacing: &mut pacing,
        every: hour,
    };
    assert!(paced.checkpoint(&shard, &after("1"), None).await.unwrap());
    assert!(
        !paced.checkpoint(&shard, &after("2"), None).await.unwrap(),
        "deferred"
    );
    let pin = Checkpoint::AtTimestamp(5);
    assert!(paced.checkpoint(&shard, &pin, None).await.unwrap());
    assert_eq!(paced.inner.stored, vec![after("1"), pin]);
    // What was deferred is due once the interval has passed, and only if
    // the shard moved past what was written.
    let moved = BTreeMap::from([(shard.clone(), (after("2"), None))]);
    let now = instant_now();
    assert!(pacing.due(moved.clone(), now, hour).is_empty());
    let later = now + hour + Duration::from_secs(1);
    assert_eq!(
        pacing.due(moved, later, hour),
        vec![(shard.clone(), after("2"), None)]
    );
    let unmoved = BTreeMap::from([(shard.clone(), (after("1"), None))]);
    assert!(pacing.due(unmoved, later, hour).is_empty());
}

// Pacing keeps the transient policy of what it wraps (checked when the
// tests compile).
const _: () = {
    assert!(
        <Paced<'_, FakeCheckpointer<true>> as Checkpointer>::LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT
    );
    assert!(!<Paced<'_, FakeCheckpointer<false>> as Checkpointer>::LEAVES_TRANSIENT_FAILURES_TO_THE_NEXT);
};
