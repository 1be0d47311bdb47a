//! The Kinesis record source of a shard pipeline: GetRecords polling
//! (`polling`) or an enhanced fan-out subscription (`fanout`), one of the
//! two per shard, as KCL has one records publisher with a polling and a
//! fan-out implementation. What both keep is here: the settings, the
//! reading state (pacing, a LATEST start's pin, the last batch handed out),
//! and how a read becomes a batch.

use crate::consumer::retrieval::fanout::FanOutSource;
use crate::consumer::retrieval::polling::PollingSource;
use crate::consumer::retrieval::{KinesisReads, ReadError, ReadRecord};
use crate::consumer::WorkerConfig;
use crate::pipeline::InitialPosition;
use crate::pipeline::{Fetched, RecordSource, ShardReport, SourceBatch};
use crate::processing::{StreamRecord, Unit};
use crate::state::instant_now;
use crate::state::{Checkpoint, ShardId, StateStore, StreamAddress};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a Kinesis source reads: the worker's settings it uses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadSettings {
    pub(super) initial_position: InitialPosition,
    pub(super) max_records: i32,
    pub(super) min_poll_interval: Duration,
    pub(super) idle_poll_interval: Duration,
    pub(super) read_bytes_per_second: u64,
    pub(super) subscription_lifetime: Duration,
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

/// What every Kinesis source keeps, however it reads.
pub(super) struct Reading {
    pub reads: Arc<dyn KinesisReads>,
    pub stream: StreamAddress,
    pub settings: ReadSettings,
    /// Not read again before this.
    pub next_poll: Instant,
    /// A LATEST start's pin, until the pipeline takes it.
    pub pin: Option<Checkpoint>,
    /// The state store, for its clock: a pin is a time on it.
    pub clock: StateStore,
    /// The last batch handed out: where it leaves the reading, and its size.
    pub last: Option<Handed>,
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reading")
            .field("next_poll", &self.next_poll)
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

impl Reading {
    /// How long after `handed` was processed the shard is read again: the
    /// idle interval after an empty read, otherwise the minimum interval or
    /// the time the read limit needs for its bytes, whichever is longer.
    pub fn wait_after(&self, handed: &Handed) -> Duration {
        if handed.empty {
            return self.settings.idle_poll_interval;
        }
        let pace = Duration::from_secs_f64(
            handed.bytes as f64 / self.settings.read_bytes_per_second.max(1) as f64,
        );
        self.settings.min_poll_interval.max(pace)
    }
}

/// The last batch handed out, for when it is processed.
#[derive(Debug)]
pub(super) struct Handed {
    pub next: Next,
    pub bytes: u64,
    pub empty: bool,
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
    pub(super) fn ends_shard(&self) -> bool {
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

/// Reads one Kinesis shard, by polling or through a subscription.
#[derive(Debug)]
pub(crate) enum KinesisSource {
    Polling(PollingSource),
    FanOut(FanOutSource),
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
        let reading = Reading {
            reads,
            stream,
            settings,
            next_poll: instant_now(),
            pin: None,
            clock,
            last: None,
        };
        if subscribed {
            KinesisSource::FanOut(FanOutSource::new(reading, consumer_arn))
        } else {
            KinesisSource::Polling(PollingSource::new(reading))
        }
    }

    /// Subscribes again, with `consumer_arn` (the EFO consumer locked now):
    /// the subscription open (if any) ends. Nothing for a polled shard.
    pub fn resubscribe(&mut self, consumer_arn: Option<String>) {
        if let KinesisSource::FanOut(source) = self {
            source.resubscribe(consumer_arn);
        }
    }

    fn reading_mut(&mut self) -> &mut Reading {
        match self {
            KinesisSource::Polling(source) => &mut source.reading,
            KinesisSource::FanOut(source) => &mut source.reading,
        }
    }
}

impl RecordSource for KinesisSource {
    type Error = ReadError;

    fn due(&self, now: Instant) -> bool {
        match self {
            KinesisSource::Polling(source) => source.due(now),
            KinesisSource::FanOut(source) => source.due(now),
        }
    }

    async fn fetch(
        &mut self,
        shard: &ShardId,
        from: Option<&Checkpoint>,
        report: &mut ShardReport,
    ) -> Result<Fetched, ReadError> {
        let mut notes = FetchNotes::default();
        let fetched = match self {
            KinesisSource::Polling(source) => source.fetch(shard, from, &mut notes).await,
            KinesisSource::FanOut(source) => source.fetch(shard, from, &mut notes).await,
        };
        notes.count(report);
        Ok(match fetched? {
            None => Fetched::Nothing,
            Some(Page {
                records,
                millis_behind,
                next,
            }) => {
                let ends_shard = next.ends_shard();
                self.reading_mut().last = Some(Handed {
                    bytes: records.iter().map(|r| r.data.len() as u64).sum(),
                    empty: records.is_empty(),
                    next,
                });
                Fetched::Batch(units(shard, records, millis_behind, ends_shard))
            }
        })
    }

    fn take_pin(&mut self) -> Option<Checkpoint> {
        self.reading_mut().pin.take()
    }

    /// Sets where the next read starts and when it is due: after a failure
    /// the shard is read again from the failed record.
    fn processed(&mut self, ok: bool) {
        let Some(handed) = self.reading_mut().last.take() else {
            return;
        };
        match self {
            KinesisSource::Polling(source) => source.processed(ok, handed),
            KinesisSource::FanOut(source) => source.processed(ok, handed),
        }
    }
}
