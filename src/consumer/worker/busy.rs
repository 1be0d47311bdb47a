//! How busy a worker's handler was since its last heartbeat: in all, and on
//! each shard it held (what the heartbeat reports, and the rebalancer sizes
//! the fleet and balances load by).

use crate::state::instant_now;
use crate::state::ShardId;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Time spent stepping shards since the last report.
#[derive(Debug)]
pub(super) struct Busy {
    total: Duration,
    per_shard: BTreeMap<ShardId, Duration>,
    since: Instant,
}

impl Busy {
    pub(super) fn new() -> Busy {
        Busy {
            total: Duration::ZERO,
            per_shard: BTreeMap::new(),
            since: instant_now(),
        }
    }

    /// `shard` was stepped for `spent`.
    pub(super) fn add(&mut self, shard: &ShardId, spent: Duration) {
        *self.per_shard.entry(shard.clone()).or_default() += spent;
    }

    /// The worker spent `overall` stepping (several shards at once count
    /// once).
    pub(super) fn add_overall(&mut self, overall: Duration) {
        self.total += overall;
    }

    /// Thousandths of the time since the last report the worker was busy,
    /// and each of `held` shards' (0 for one not stepped); starts anew.
    pub(super) fn report(&mut self, held: &[ShardId]) -> (u16, BTreeMap<ShardId, u16>) {
        let elapsed = self.since.elapsed().max(Duration::from_millis(1));
        let share =
            |busy: Duration| (busy.as_micros() * 1000 / elapsed.as_micros()).min(1000) as u16;
        let mut per_shard = std::mem::take(&mut self.per_shard);
        let loads = held
            .iter()
            .map(|shard| {
                (
                    shard.clone(),
                    share(per_shard.remove(shard).unwrap_or_default()),
                )
            })
            .collect();
        let total = share(self.total);
        self.total = Duration::ZERO;
        self.since = instant_now();
        (total, loads)
    }
}
