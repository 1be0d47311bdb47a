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

use crate::state::{
    ConsumerInfo, EpochMillis, Heartbeat, ShardId, ShardState, StateStore, TakeFrom,
};
use crate::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The token of this process's session under its consumer id.
#[derive(Debug)]
pub(crate) struct Holding {
    token: String,
    taken: bool,
    incarnation: Option<String>,
    /// Leases in the id's name held by another process's token: the
    /// renewal seen (counter, stored expiry) and when it was first seen.
    waiting: BTreeMap<ShardId, ((u64, Option<EpochMillis>), EpochMillis)>,
}

impl Holding {
    /// A new, random token (nothing is sent until the first heartbeat).
    pub(crate) fn new() -> Self {
        Holding {
            token: format!("{:016x}", fastrand::u64(..)),
            taken: false,
            incarnation: None,
            waiting: BTreeMap::new(),
        }
    }

    /// How this process may take `shard`, a lease in its id's name, at
    /// `now` (a monotonic reading): at once when no other process's token
    /// holds it (given by the rebalancer or a hand-off, or taken by this
    /// process before); else only once it has been seen unrenewed for
    /// `term`, and only if still so. `None`: not yet.
    pub(crate) fn take_from(
        &mut self,
        shard: &ShardState,
        now: EpochMillis,
        term: Duration,
    ) -> Option<TakeFrom> {
        let foreign = shard.holder.as_ref().is_some_and(|h| *h != self.token);
        if !foreign {
            self.waiting.remove(&shard.shard_id);
            return Some(TakeFrom::Named {
                counter: shard.counter,
                expires: None,
            });
        }
        let seen = (shard.counter, shard.expires);
        let since = match self.waiting.get(&shard.shard_id) {
            Some((last, since)) if *last == seen => *since,
            _ => now,
        };
        self.waiting.insert(shard.shard_id.clone(), (seen, since));
        (now - since >= crate::state::duration_millis(term)).then_some(TakeFrom::Named {
            counter: shard.counter,
            expires: shard.expires,
        })
    }

    /// The leases waited on: read again at each tick until taken.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &ShardId> {
        self.waiting.keys()
    }

    /// Forgets the leases waited on that are not in `seen` (taken, moved
    /// or gone).
    pub(crate) fn keep_waiting_on(&mut self, seen: &BTreeSet<ShardId>) {
        self.waiting.retain(|shard, _| seen.contains(shard));
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
