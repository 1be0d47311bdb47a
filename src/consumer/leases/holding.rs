//! A process's hold on its consumer id: the token its heartbeats carry, so
//! that of two processes started under one id (a restart while the old one
//! still runs) the newer takes the id over and the older learns it must
//! stop.
//!
//! The older may still be inside a batch when the newer takes the id over,
//! until its leases' local expiry. So a lease in the id's name that another
//! process's token holds is taken only once this process has seen it
//! unrenewed for a term (on its own monotonic clock, as the rebalancer
//! judges expiry), on the renewal seen: the older process stops before the
//! newer one reads.

use crate::consumer::FirstSeen;
use crate::state::{
    ConsumerInfo, EpochMillis, Heartbeat, ShardId, ShardState, StateStore, TakeFrom,
};
use crate::Result;
use std::collections::BTreeSet;
use std::time::Duration;

/// The token of this process's session under its consumer id.
#[derive(Debug)]
pub(crate) struct Holding {
    token: String,
    taken: bool,
    incarnation: Option<String>,
    /// Leases in the id's name held by another process's token: the
    /// renewal seen (counter, stored expiry), and since when.
    waiting: FirstSeen<ShardId, (u64, Option<EpochMillis>)>,
}

impl Holding {
    /// A new, random token (nothing is sent until the first heartbeat).
    pub(crate) fn new() -> Self {
        Holding {
            token: format!("{:016x}", fastrand::u64(..)),
            taken: false,
            incarnation: None,
            waiting: FirstSeen::default(),
        }
    }

    /// How this process may take each of `shards`, leases in its id's name
    /// it does not hold, at `now` (a monotonic reading): at once when no
    /// other process's token holds it (given by the rebalancer or a
    /// hand-off, or taken by this process before); else only once it has
    /// been seen unrenewed for `term`, and only if still so. A shard left
    /// out is not to be taken yet.
    pub(crate) fn takes(
        &mut self,
        shards: &[ShardState],
        now: EpochMillis,
        term: Duration,
    ) -> Vec<(ShardId, TakeFrom)> {
        let foreign = |s: &&ShardState| s.holder.as_ref().is_some_and(|h| *h != self.token);
        let seen = shards
            .iter()
            .filter(foreign)
            .map(|s| (s.shard_id.clone(), (s.counter, s.expires)));
        let ages = self.waiting.observe(seen, now);
        shards
            .iter()
            .filter_map(|s| {
                match ages.get(&s.shard_id) {
                    None => Some(TakeFrom::Named {
                        counter: s.counter,
                        expires: None,
                    }),
                    Some(age) if *age >= term => Some(TakeFrom::Named {
                        counter: s.counter,
                        expires: s.expires,
                    }),
                    Some(_) => None,
                }
                .map(|from| (s.shard_id.clone(), from))
            })
            .collect()
    }

    /// The leases waited on: read again at each tick until taken.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &ShardId> {
        self.waiting.keys()
    }

    /// The token, stored with the leases taken for this process.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Heartbeats with the token: the first takes the id over, the later
    /// ones fail with `StateError::Superseded` once a newer process has.
    ///
    /// A heartbeat that finds another registration than the last one saw
    /// is reported as a registration, even when the registering heartbeat's
    /// answer was lost and its retry found the item there: the consumer was
    /// removed by the reaper meanwhile, so its leases are read again.
    /// `acked`: given shards looked at since the last heartbeat.
    pub(crate) async fn heartbeat(
        &mut self,
        store: &StateStore,
        info: &ConsumerInfo,
        acked: &BTreeSet<ShardId>,
    ) -> Result<Heartbeat> {
        let mut beat = store
            .consumers()
            .heartbeat_as(info, &self.token, !self.taken, acked)
            .await?;
        self.taken = true;
        if self
            .incarnation
            .as_ref()
            .is_some_and(|last| *last != beat.incarnation)
        {
            beat.registered = true;
        }
        self.incarnation = Some(beat.incarnation.clone());
        Ok(beat)
    }
}
