//! Polling a shard: one GetShardIterator when no iterator carries on, one
//! GetRecords, and the back-off of a shard whose read was throttled or
//! failed.

use crate::consumer::reads::source::{FetchNotes, Next, Page, ReadSettings};
use crate::consumer::reads::{IteratorStart, KinesisReads, ReadError};
use crate::state::{Backoff, Jitter, ShardId, StreamAddress};
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
    Instant::now() + THROTTLE_BACKOFF.delay(1)
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
