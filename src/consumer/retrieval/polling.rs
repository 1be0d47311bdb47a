//! Polling a shard: GetRecords from the iterator the last batch left, one
//! GetShardIterator when none carries on (at the position, never at a new
//! LATEST), and the back-off of a shard whose read was throttled or failed.

use crate::consumer::retrieval::source::{FetchNotes, Handed, Next, Page, ReadSettings, Reading};
use crate::consumer::retrieval::start::{latest_pin, start_at};
use crate::consumer::retrieval::{IteratorStart, KinesisReads, ReadError};
use crate::pipeline::unpinned;
use crate::state::instant_now;
use crate::state::{Backoff, Checkpoint, Jitter, ShardId, StreamAddress};
use std::time::{Duration, Instant};

/// How long a throttled or failed shard backs off, alone while the others go
/// on: 1 s, the window over which Kinesis counts a shard's read limits, plus
/// up to half of it so shards throttled together do not come back together.
/// The same each time (`max` is `base`).
const THROTTLE_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(1),
    max: Duration::from_secs(1),
    jitter: Jitter::UpToHalfMore,
};

/// When a shard that was throttled or failed is read again.
pub(super) fn backed_off_until() -> Instant {
    instant_now() + THROTTLE_BACKOFF.delay(1)
}

pub(super) async fn poll(
    reads: &dyn KinesisReads,
    stream: &StreamAddress,
    shard: &ShardId,
    iterator: Option<String>,
    start: &IteratorStart,
    settings: &ReadSettings,
    notes: &mut FetchNotes,
) -> Result<Option<Page>, ReadError> {
    let page = async {
        let iterator = match iterator {
            Some(it) => it,
            None => reads.shard_iterator(stream, shard, start).await?,
        };
        notes.polled = true;
        reads
            .get_records(stream, &iterator, settings.max_records)
            .await
    };
    match page.await {
        Ok(page) => Ok(Some(Page {
            records: page.records,
            millis_behind: page.millis_behind_latest,
            next: Next::Iterator(page.next_iterator),
        })),
        // Refresh at the checkpoint, never at LATEST (that would skip records).
        Err(ReadError::ExpiredIterator) => {
            notes.refreshed = true;
            Ok(None)
        }
        Err(ReadError::Throttled { .. }) => {
            notes.throttled = true;
            Ok(None)
        }
        // A 500 or no answer for this shard: it backs off alone and
        // reads again from its position.
        Err(ReadError::Failed(e)) if e.is_transient() => {
            tracing::debug!(%shard, error = %e, "read failed; backing off this shard");
            notes.failed = true;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Reading {
    /// One poll of `shard` from `iterator` (or a new one at `start`); a
    /// read that was throttled or failed backs the shard off alone.
    pub(super) async fn poll(
        &mut self,
        shard: &ShardId,
        iterator: Option<String>,
        start: &IteratorStart,
        notes: &mut FetchNotes,
    ) -> Result<Option<Page>, ReadError> {
        let fetched = poll(
            &*self.reads,
            &self.stream,
            shard,
            iterator,
            start,
            &self.settings,
            notes,
        )
        .await;
        if fetched.is_ok() && (notes.throttled || notes.failed) {
            self.next_poll = backed_off_until();
        }
        fetched
    }
}

/// Reads one shard by GetRecords.
#[derive(Debug)]
pub(crate) struct PollingSource {
    pub(super) reading: Reading,
    iterator: Option<String>,
}

impl PollingSource {
    pub(super) fn new(reading: Reading) -> Self {
        PollingSource {
            reading,
            iterator: None,
        }
    }

    pub(super) fn due(&self, now: Instant) -> bool {
        self.reading.next_poll <= now
    }

    /// One GetRecords (with a new iterator first when none carries on).
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
        let it = self.iterator.take();
        let opened_at = reading.clock.now();
        let opens = it.is_none();
        let fetched = reading.poll(shard, it, &start, notes).await;
        if opens && notes.polled && unpinned(position) {
            reading.pin = latest_pin(&start, opened_at);
        }
        fetched
    }

    /// Carries on from the next iterator after the pace's wait, or, after a
    /// failure, reads again from the position.
    pub(super) fn processed(&mut self, ok: bool, handed: Handed) {
        let now = instant_now();
        if !ok {
            self.iterator = None;
            self.reading.next_poll = now + self.reading.settings.idle_poll_interval;
            return;
        }
        let wait = self.reading.wait_after(&handed);
        if let Next::Iterator(next) = handed.next {
            self.iterator = next;
            self.reading.next_poll = now + wait;
        }
    }
}
