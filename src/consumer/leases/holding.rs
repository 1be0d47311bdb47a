//! A process's hold on its consumer id: the token its heartbeats carry, so
//! that of two processes started under one id (a restart while the old one
//! still runs) the newer takes the id over and the older learns it must
//! stop.
//!
//! The older may still be inside a batch when the newer takes the id over,
//! until its leases' local expiry: its last heartbeat that went through
//! plus the term. Once the newer's first heartbeat took the id over, no
//! heartbeat of the older goes through, so a lease in the id's name that
//! another process's token holds is taken only a term after this process
//! took the id over (on its own monotonic clock): the older process stops
//! before the newer one reads.

use crate::state::{
    duration_millis, Acks, ConsumerInfo, EpochMillis, Heartbeat, ShardId, ShardState, StateStore,
    TakeFrom,
};
use crate::Result;
use std::collections::BTreeSet;
use std::time::Duration;

/// The token of this process's session under its consumer id.
#[derive(Debug)]
pub(crate) struct Holding {
    token: String,
    /// When the answer of the heartbeat that took the id over came back,
    /// on the store's monotonic clock.
    taken_at: Option<EpochMillis>,
    /// The heartbeat that took the id over found another process's token.
    displaced: bool,
    incarnation: Option<String>,
    /// Leases in the id's name held by another process's token, not yet taken.
    waiting: BTreeSet<ShardId>,
}

impl Holding {
    /// A new, random token (nothing is sent until the first heartbeat).
    pub(crate) fn new() -> Self {
        Holding {
            token: format!("{:016x}", fastrand::u64(..)),
            taken_at: None,
            displaced: false,
            incarnation: None,
            waiting: BTreeSet::new(),
        }
    }

    /// How this process may take each of `shards`, leases in its id's name
    /// it does not hold, at `now` (a reading of the store's monotonic
    /// clock): at once when no other process's token
    /// holds it (given by the rebalancer or a hand-off, or taken by this
    /// process before); else only once a term has passed since this process
    /// took the id over, and only if the lease is still as read. A shard
    /// left out is not to be taken yet.
    pub(crate) fn takes(
        &mut self,
        shards: &[ShardState],
        now: EpochMillis,
        term: Duration,
    ) -> Vec<(ShardId, TakeFrom)> {
        let waited = self
            .taken_at
            .is_some_and(|at| now >= at + duration_millis(term));
        // A lease waited on that is no longer in the id's name is waited on no more.
        self.waiting
            .retain(|w| shards.iter().any(|s| s.shard_id == *w));
        let mut takes = Vec::new();
        for s in shards {
            let foreign = s.holder.as_ref().is_some_and(|h| *h != self.token);
            if foreign && !waited {
                self.waiting.insert(s.shard_id.clone());
                continue;
            }
            self.waiting.remove(&s.shard_id);
            let from = TakeFrom::Named {
                counter: s.counter,
                expires: foreign.then_some(s.expires).flatten(),
                from_another: foreign,
            };
            takes.push((s.shard_id.clone(), from));
        }
        takes
    }

    /// Whether another process of this id may still be processing under a
    /// lease in the id's name at `now` (the store's monotonic clock): this
    /// process has not taken the id over yet, or took it over from another
    /// process's token less than a term ago.
    pub(crate) fn others_may_run(&self, now: EpochMillis, term: Duration) -> bool {
        self.taken_at
            .is_none_or(|at| self.displaced && now < at + duration_millis(term))
    }

    /// The leases waited on: read again at each tick until taken.
    pub(crate) fn waiting(&self) -> impl Iterator<Item = &ShardId> {
        self.waiting.iter()
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
    /// `acks`: the notes acted on since the last heartbeat.
    pub(crate) async fn heartbeat(
        &mut self,
        store: &StateStore,
        info: &ConsumerInfo,
        acks: &Acks,
    ) -> Result<Heartbeat> {
        let take_over = self.taken_at.is_none();
        let mut beat = store
            .consumers()
            .heartbeat_as(info, &self.token, take_over, acks)
            .await?;
        if take_over {
            self.taken_at = Some(store.monotonic_now());
            self.displaced = beat.took_over;
            tracing::debug!(consumer = %info.id, token = %self.token, from_another = beat.took_over, "took the consumer id over");
        }
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
