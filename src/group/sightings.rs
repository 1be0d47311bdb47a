//! How long each lease, heartbeat, claim and free EFO consumer has gone
//! unchanged, as one observer saw it on its own clock.
//!
//! Stored times (`expires`, `heartbeat`, `claim_at`, `released`) are written
//! by other machines' wall clocks; comparing them with this machine's clock
//! would move every timeout by the skew between the two (a lease taken after
//! 5 s of silence instead of 10, or never). So an observer, the rebalancer
//! or the reaper, remembers when it first saw each value in its current
//! state, on its own monotonic clock ([`StateStore::monotonic_now`]), and
//! calls it as old as the time since. This is KCL's rule for lease expiry,
//! applied to heartbeats, claims and idle EFO consumers too.
//!
//! - A lease's state is its owner, counter and stored expiry: a take or a
//!   release makes it young again (and so does a renewal by code from
//!   before sessions, which wrote a new expiry each time).
//! - A heartbeat's state is the process token, the stored time and the
//!   beat counter: a consumer's session is as old as its heartbeat.
//! - A lease owner that is not registered: how long it has been seen so.
//! - A claim's state is the claimant, its time and the lease counter.
//! - A free EFO consumer's state is its lock counter.
//!
//! An observer that just started has seen nothing age: everything is fresh
//! for one timeout after its first look. So it also notes which consumers
//! it has seen heartbeat (their heartbeat changed while it watched, or they
//! registered after its first look): only those are known to be alive, and
//! only they are given leases by claim (a consumer that died just before
//! the observer started looks fresh, and would take leases away from
//! living ones). Memory is kept only for what
//! the last snapshot held.
//!
//! [`StateStore::monotonic_now`]: crate::state::StateStore::monotonic_now

use crate::first_seen::FirstSeen;
use crate::state::{ConsumerId, ConsumerState, EfoName, EpochMillis, GroupSnapshot, ShardId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long each thing has gone unchanged, as one observer saw it: the
/// planners' only notion of time. Missing entries are fresh (age zero).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ages {
    /// Owned leases, by shard.
    pub leases: BTreeMap<ShardId, Duration>,
    /// Heartbeats, by consumer.
    pub heartbeats: BTreeMap<ConsumerId, Duration>,
    /// Lease owners not registered: how long each has been seen so.
    pub unregistered: BTreeMap<ConsumerId, Duration>,
    /// Registered consumers of code from before sessions (no beat
    /// counter): they renew each lease, and their leases live by renewal.
    pub renewing: BTreeSet<ConsumerId>,
    /// Open claims, by shard.
    pub claims: BTreeMap<ShardId, Duration>,
    /// Free EFO consumers: how long they have been free.
    pub efo_free: BTreeMap<EfoName, Duration>,
    /// Consumers whose heartbeat this observer saw change, or that
    /// registered after its first look: alive while it watched.
    pub beating: BTreeSet<ConsumerId>,
    /// The lease term each consumer's session said it processes by, as its
    /// item shows it (missing: not said).
    pub terms: BTreeMap<ConsumerId, Duration>,
}

impl Ages {
    /// How long the lease on `shard` has gone unchanged (no take, release,
    /// or renewal by code from before sessions).
    pub fn lease(&self, shard: &ShardId) -> Duration {
        self.leases.get(shard).copied().unwrap_or_default()
    }

    /// How long `consumer` has gone without a heartbeat.
    pub fn heartbeat(&self, consumer: &ConsumerId) -> Duration {
        self.heartbeats.get(consumer).copied().unwrap_or_default()
    }

    /// How long the session of `owner`, a lease's owner, has been seen
    /// unchanged: its heartbeat's age if it is registered, else how long it
    /// has been seen unregistered. A holder can no longer be processing
    /// under a lease once its session is a term old.
    pub fn session(&self, owner: &ConsumerId) -> Duration {
        self.heartbeats
            .get(owner)
            .or_else(|| self.unregistered.get(owner))
            .copied()
            .unwrap_or_default()
    }

    /// The term `consumer`'s session is judged by: the longer of the term it
    /// said it processes by and `configured` (the observer's own), so a
    /// holder configured with a longer term than the control plane's keeps
    /// its leases for all of it.
    pub fn term(&self, consumer: &ConsumerId, configured: Duration) -> Duration {
        self.terms
            .get(consumer)
            .map_or(configured, |said| configured.max(*said))
    }

    /// How long the claim on `shard` has been open.
    pub fn claim(&self, shard: &ShardId) -> Duration {
        self.claims.get(shard).copied().unwrap_or_default()
    }

    /// How long the EFO consumer `name` has been free.
    pub fn efo_free(&self, name: &EfoName) -> Duration {
        self.efo_free.get(name).copied().unwrap_or_default()
    }

    /// Time left in `consumer`'s run as observed (`None`: no end planned):
    /// the time left at its last heartbeat (its `ends` less its heartbeat
    /// time, both on its own clock) less how long that heartbeat has been
    /// seen unchanged, so clocks that differ do not matter.
    pub fn time_left(&self, consumer: &ConsumerState) -> Option<Duration> {
        let ends = consumer.info.ends?;
        let at_beat = Duration::from_millis(ends.saturating_sub(consumer.heartbeat).max(0) as u64);
        Some(at_beat.saturating_sub(self.heartbeat(consumer.id())))
    }
}

/// One observer's sightings: when it first saw each value in its current state.
/// Clones share the memory (one observer per process).
#[derive(Debug, Clone, Default)]
pub struct Sightings {
    memory: Arc<Mutex<Memory>>,
}

#[derive(Debug, Default)]
struct Memory {
    leases: FirstSeen<ShardId, (ConsumerId, u64, Option<EpochMillis>)>,
    heartbeats: FirstSeen<ConsumerId, (Option<String>, EpochMillis, Option<u64>)>,
    unregistered: FirstSeen<ConsumerId, ()>,
    claims: FirstSeen<ShardId, (ConsumerId, EpochMillis, u64)>,
    efo_free: FirstSeen<EfoName, u64>,
    /// When the shards were last looked at.
    shards_at: Option<EpochMillis>,
}

impl Sightings {
    /// Looks at `snapshot` at `at` (a reading of this process's monotonic
    /// clock) and returns how long each thing in it has gone unchanged.
    pub fn observe(&self, snapshot: &GroupSnapshot, at: EpochMillis) -> Ages {
        self.look(snapshot, at, true)
    }

    /// [`Sightings::observe`] of a snapshot read without its shards (see
    /// `StateStore::observe_group`): the consumers and the enhanced fan-out
    /// pool are looked at; what was seen of the leases and claims is kept
    /// as it was, and their ages are not given.
    pub fn observe_home(&self, snapshot: &GroupSnapshot, at: EpochMillis) -> Ages {
        self.look(snapshot, at, false)
    }

    /// When [`Sightings::observe`] last looked at the shards (`None`: never).
    pub fn shards_seen_at(&self) -> Option<EpochMillis> {
        self.memory
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shards_at
    }

    fn look(&self, snapshot: &GroupSnapshot, at: EpochMillis, shards: bool) -> Ages {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        let leases = snapshot.shards.iter().filter_map(|s| {
            let owner = s.owner.clone()?;
            Some((s.shard_id.clone(), (owner, s.counter, s.expires)))
        });
        let heartbeats = snapshot
            .consumers
            .iter()
            .map(|c| (c.id().clone(), (c.token.clone(), c.heartbeat, c.beat)));
        let registered: BTreeSet<&ConsumerId> = snapshot.consumers.iter().map(|c| c.id()).collect();
        let unregistered: BTreeSet<ConsumerId> = snapshot
            .shards
            .iter()
            .filter_map(|s| s.owner.as_ref())
            .filter(|o| !registered.contains(o))
            .cloned()
            .collect();
        let claims = snapshot.shards.iter().filter_map(|s| {
            let claim = s.claim.as_ref()?;
            Some((s.shard_id.clone(), (claim.by.clone(), claim.at, s.counter)))
        });
        let efo_free = snapshot
            .efo
            .iter()
            .filter(|e| e.used_by.is_none())
            .map(|e| (e.name.clone(), e.lock_counter));
        let heartbeats = memory.heartbeats.observe(heartbeats, at);
        if shards {
            memory.shards_at = Some(at);
        } else {
            return Ages {
                heartbeats,
                beating: memory.heartbeats.changed().cloned().collect(),
                renewing: renewing(snapshot),
                efo_free: memory.efo_free.observe(efo_free, at),
                terms: terms(snapshot),
                ..Ages::default()
            };
        }
        Ages {
            leases: memory.leases.observe(leases, at),
            beating: memory.heartbeats.changed().cloned().collect(),
            heartbeats,
            renewing: renewing(snapshot),
            unregistered: memory
                .unregistered
                .observe(unregistered.into_iter().map(|o| (o, ())), at),
            claims: memory.claims.observe(claims, at),
            efo_free: memory.efo_free.observe(efo_free, at),
            terms: terms(snapshot),
        }
    }
}

/// Registered consumers of code from before sessions.
fn renewing(snapshot: &GroupSnapshot) -> BTreeSet<ConsumerId> {
    snapshot
        .consumers
        .iter()
        .filter(|c| c.beat.is_none())
        .map(|c| c.id().clone())
        .collect()
}

/// The lease term each consumer's heartbeats say.
fn terms(snapshot: &GroupSnapshot) -> BTreeMap<ConsumerId, Duration> {
    snapshot
        .consumers
        .iter()
        .filter_map(|c| Some((c.id().clone(), c.info.lease_term?)))
        .collect()
}
