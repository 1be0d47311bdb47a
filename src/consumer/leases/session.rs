//! A consumer's session: one heartbeat keeps every lease it holds alive,
//! its answer tells of claims (checkpoint, then hand over), revocations and
//! the leases given, and a lost lease stops its shard at once.

mod claims;
mod writes;

use crate::consumer::leases::holding::Holding;
use crate::consumer::leases::pulse::{lock, Pulse, PulseState};
use crate::state::instant_now;
use crate::state::{
    duration_millis, Acks, Checkpoint, CheckpointOutcome, ConsumerId, ConsumerInfo, Depleted,
    EpochMillis, Lease, Released, ShardId, ShardScope, ShardSpec, StateError, StateStore,
};
use crate::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one session tick changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionTick {
    /// The consumer was not registered (new, or reaped) and registered now.
    pub registered: bool,
    /// Leases the rebalancer assigned since the last tick: start processing them.
    pub gained: Vec<ShardId>,
    /// Leases lost (revoked, taken, removed, or of a registration that
    /// ended): stop processing them now.
    pub lost: Vec<ShardId>,
    /// Claimed leases checkpointed and released, with the claimant that got
    /// them (`None` if the claim was withdrawn meanwhile and the shard is free).
    pub handed_off: Vec<(ShardId, Option<ConsumerId>)>,
}

/// How often a session looks again whether code from before sessions was
/// seen in its group once the upgrade window seems over.
const WINDOW_READ_EVERY: Duration = Duration::from_secs(5 * 60);

/// How many shards given by name a session reads at once.
const GIVEN_READS_AT_ONCE: usize = 16;

/// The leases one consumer holds, kept current by [`ConsumerSession::tick`].
///
/// Liveness is the session's, not each lease's: a tick is one heartbeat,
/// whatever the consumer holds, and every lease held lives until the send
/// time of the last heartbeat that went through plus the term. An observer
/// moves a lease away from a holder that did not release it only once it
/// saw the holder's heartbeat unchanged for a term, in one transaction that
/// notes the revocation on the holder's item; a heartbeat that lands after
/// it returns the revocation, so it never keeps that lease.
///
/// The heartbeat's answer (the item before it) also carries the claims on
/// the consumer's leases, honoured at once (checkpoint, then hand-off), and
/// the assignment counter with the shards given by name: the session reads
/// only the named shards it does not hold (one GetItem each), and
/// acknowledges every note at its next heartbeat. It reads every shard of
/// the group when it registers, and when a give was not named (code from
/// before names, or names at their bound). Every write that puts a lease in a
/// consumer's name for it (a give, a hand-off, an operator's move) names
/// the shard on its item in the same transaction, so nothing is read on a
/// schedule besides. Names are acknowledged by shard, so a shard named again
/// before its first name was acknowledged leaves one name, and an
/// acknowledgement whose answer was lost removes a name the session never
/// saw: a shard whose revocation it is told of (held or not), a lease a
/// write of its own found moved (a checkpoint, a completion or a release
/// refused by the counter), and a take that finds its shard moved since
/// the read, are read again at each tick until the shard is taken or is no
/// longer in the consumer's name.
#[derive(Debug)]
pub struct ConsumerSession {
    store: StateStore,
    info: ConsumerInfo,
    lease_term: Duration,
    leases: BTreeMap<ShardId, Lease>,
    /// The counter of the last lease held on each shard the session
    /// dropped: a claim it honours on a lease still in its name hands over
    /// its own progress only at a counter it held (at another, an
    /// operator moved the shard since: the stored position stands).
    dropped: BTreeMap<ShardId, u64>,
    /// When the request of the last heartbeat that went through was sent,
    /// on this process's monotonic clock: every lease held holds until at
    /// least that instant plus the term, whatever the wall clocks say.
    beat_at: Option<Instant>,
    /// The assignment counter and its named moves at the last pickup that
    /// went through (`None`: none yet, or the last one failed).
    assignments: Option<(u64, u64)>,
    /// Notes acted on, to acknowledge at the next heartbeat.
    acks: Acks,
    holding: Holding,
    /// Shards that may be in this consumer's name and are not held: read
    /// again at each tick until they are taken, or are no longer in its
    /// name. They wait for parents an operator's rewind reopened, or their
    /// take found them moved since the read (an operator's move between
    /// the two), or a write of the session's was refused by a moved
    /// counter, or a revocation of them was told (held or not): their name
    /// may be gone (see [`ConsumerSession::tick`]).
    recheck: BTreeSet<ShardId>,
    /// Changes made by a tick that failed before it could report them
    /// (a lease taken before a later call failed): the next tick reports them.
    owed: SessionTick,
    /// Until when (the store's clock) each lease is also renewed, for
    /// processes of the code before sessions that may still run after an
    /// upgrade (`None`: not read yet; `Some(None)`: never), and when it was
    /// read (the store's clock).
    renew_until: Option<(Option<EpochMillis>, EpochMillis)>,
    /// What the session shares with its pulse (see [`ConsumerSession::keep_alive`]).
    shared: Arc<Mutex<PulseState>>,
    pulse: Option<Pulse>,
}

impl ConsumerSession {
    /// A session for the consumer `info` (nothing is sent until the first tick).
    /// Its heartbeats say `lease_term`, so observers with a shorter term of
    /// their own wait this one out before moving its leases.
    ///
    /// Its calls start no attempt once the term has passed since their
    /// first ([`StateStore::with_call_limit`]): the heartbeats of
    /// [`ConsumerSession::keep_alive`] stop once the caller's loop went three
    /// terms unseen, and a call whose every attempt hangs would otherwise
    /// outlast that (6 attempts of 10 s at the store's defaults).
    pub fn new(store: StateStore, mut info: ConsumerInfo, lease_term: Duration) -> Self {
        let store = store.with_call_limit(lease_term);
        info.lease_term = Some(lease_term);
        let shared = Arc::new(Mutex::new(PulseState {
            info: info.clone(),
            token: String::new(),
            incarnation: None,
            held: BTreeMap::new(),
            last_sent: None,
            beat_at: None,
            loop_seen: instant_now(),
            superseded: false,
        }));
        ConsumerSession {
            store,
            info,
            lease_term,
            leases: BTreeMap::new(),
            dropped: BTreeMap::new(),
            beat_at: None,
            assignments: None,
            acks: Acks::default(),
            holding: Holding::new(),
            recheck: BTreeSet::new(),
            owed: SessionTick::default(),
            renew_until: None,
            shared,
            pulse: None,
        }
    }

    /// Keeps the consumer's heartbeat going on a task of its own, whenever
    /// none went out for `every`, so a long batch or a hung call of the
    /// caller's loop costs no lease (see the `pulse` module). The caller
    /// marks its loop with [`ConsumerSession::alive`]; a loop unseen for
    /// three terms lets the leases go. Needs a Tokio runtime; the task ends
    /// with the session.
    pub fn keep_alive(&mut self, every: Duration) {
        self.alive();
        self.pulse = Some(Pulse::start(
            self.store.clone(),
            self.shared.clone(),
            every,
            self.lease_term,
        ));
    }

    /// Stops the heartbeats of [`ConsumerSession::keep_alive`].
    pub(crate) fn end_keep_alive(&mut self) {
        self.pulse = None;
    }

    /// Marks the caller's loop as running (see [`ConsumerSession::keep_alive`]).
    pub fn alive(&self) {
        lock(&self.shared).loop_seen = instant_now();
    }

    /// Tells the pulse which leases the session holds now.
    fn share_held(&self) {
        lock(&self.shared).held = self
            .leases
            .values()
            .map(|l| (l.shard_id.clone(), l.counter))
            .collect();
    }

    /// Tells the pulse how the consumer describes itself now.
    fn share_info(&self) {
        lock(&self.shared).info = self.info.clone();
    }

    /// The consumer's id.
    pub fn id(&self) -> &ConsumerId {
        &self.info.id
    }

    /// The leases held now.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.leases.values()
    }

    /// The lease on `shard`, if held.
    pub fn lease(&self, shard: &ShardId) -> Option<&Lease> {
        self.leases.get(shard)
    }

    /// When the lease on `shard` runs out as this process can be sure of it:
    /// the send time of the session's last heartbeat that went through plus
    /// the term. Nothing of the shard may be processed after it until the
    /// next heartbeat goes through.
    pub fn local_expiry(&self, shard: &ShardId) -> Option<Instant> {
        if !self.leases.contains_key(shard) {
            return None;
        }
        let pulse = lock(&self.shared).beat_at;
        self.beat_at.max(pulse).map(|t| t + self.lease_term)
    }

    /// The term every lease lives for past a heartbeat.
    pub fn lease_term(&self) -> Duration {
        self.lease_term
    }

    /// Reports at the next heartbeats how busy the handler was (thousandths
    /// of the time since the last heartbeat): the rebalancer sizes a fleet of
    /// workers by it.
    pub fn set_busy(&mut self, per_mille: u16) {
        self.info.busy = Some(per_mille.min(1000));
        self.share_info();
    }

    /// Reports at the next heartbeats how busy the handler was on each
    /// shard held (thousandths of the time since the last heartbeat; every
    /// shard held, 0 for an idle one): the rebalancer balances load by it.
    /// Written with [`ConsumerSession::set_busy`]'s figure.
    pub fn set_shard_loads(&mut self, loads: std::collections::BTreeMap<ShardId, u16>) {
        self.info.loads = loads.into_iter().map(|(s, l)| (s, l.min(1000))).collect();
        self.share_info();
    }

    /// Starts leaving the group while still reading: the consumer is marked
    /// inactive, so the rebalancer gives it nothing more and moves its leases
    /// to active consumers by claims, each honoured (checkpoint, then
    /// hand-off to the claimant) at this session's next tick. What is left
    /// at the end is released by [`ConsumerSession::leave`].
    pub async fn drain(&mut self) -> Result<()> {
        // From now on every heartbeat keeps it inactive.
        self.info.draining = true;
        self.share_info();
        self.beat().await?;
        self.store.consumers().set_active(self.id(), false).await?;
        Ok(())
    }

    /// Heartbeats, acknowledging the notes acted on since the last.
    async fn beat(&mut self) -> Result<crate::state::Heartbeat> {
        let acks = std::mem::take(&mut self.acks);
        lock(&self.shared).last_sent = Some(instant_now());
        match self.holding.heartbeat(&self.store, &self.info, &acks).await {
            Ok(beat) => Ok(beat),
            Err(e) => {
                self.acks.extend(acks);
                Err(e)
            }
        }
    }

    fn forget(&mut self, shard: &ShardId) {
        if let Some(lease) = self.leases.remove(shard) {
            self.dropped.insert(shard.clone(), lease.counter);
        }
        self.share_held();
    }

    /// Forgets a lease a write found moved (a checkpoint, a completion or a
    /// release refused by the counter) and reads its shard again at each
    /// tick until it is taken or leaves this consumer's name: an operator's
    /// move keeps it in this consumer's name, and the name the move added
    /// may be gone (merged into an earlier name this session acknowledges).
    fn forget_refused(&mut self, shard: &ShardId) {
        self.forget(shard);
        self.recheck.insert(shard.clone());
    }

    /// Heartbeats (which keeps every held lease alive), drops the leases
    /// revoked, honours claims, and picks up the leases given since.
    /// `progress` tells how far each shard has been processed: a claimed
    /// shard is checkpointed there before it is handed over.
    ///
    /// A tick that fails part-way keeps what it changed (leases taken, lost
    /// or handed over before the failure) and the next tick reports it, so
    /// the caller never holds a lease it was not told of, nor reads a shard
    /// it no longer holds.
    pub async fn tick(
        &mut self,
        progress: impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<SessionTick> {
        let mut tick = std::mem::take(&mut self.owed);
        match self.tick_into(&mut tick, &progress).await {
            Ok(()) => Ok(tick),
            Err(e) => {
                self.owed = tick;
                Err(e)
            }
        }
    }

    async fn tick_into(
        &mut self,
        tick: &mut SessionTick,
        progress: &impl Fn(&ShardId) -> Option<(Checkpoint, Option<EpochMillis>)>,
    ) -> Result<()> {
        let claimed_at_renewal = self.renew_for_older_code(tick).await?;
        // The names this heartbeat acknowledges. `given` is a set by shard:
        // a give of the same shard applied before the heartbeat merges into
        // the acknowledged name and goes with it (and a retry after a lost
        // answer shows the item without it). Each name acknowledged whose
        // shard is not held now is read once more, after the heartbeat.
        let acked: Vec<ShardId> = self.acks.given.iter().cloned().collect();
        let sent = instant_now();
        let beat = self.beat().await?;
        self.recheck.extend(
            acked
                .into_iter()
                .filter(|shard| !self.leases.contains_key(shard)),
        );
        tick.registered |= beat.registered;
        if beat.registered {
            // Removed and registered again (or new): whatever this process
            // held under the old registration may have been taken without a
            // note it can see. Its leases are taken up again below, at
            // their counters, from this heartbeat on.
            for shard in std::mem::take(&mut self.leases).into_keys() {
                tracing::warn!(%shard, "registered again: the lease is taken up anew");
                tick.lost.push(shard);
            }
            self.share_held();
        }
        for revoked in &beat.revoked {
            let held = self.leases.get(&revoked.shard_id);
            if held.is_some_and(|l| l.counter == revoked.counter) {
                tracing::warn!(shard = %revoked.shard_id, "lease revoked (this session was seen stale, or an operator moved the shard): stop processing it");
                self.forget(&revoked.shard_id);
                tick.lost.push(revoked.shard_id.clone());
            }
            // An operator's move keeps it in this consumer's name and names
            // it on the item, but that name may be gone: merged into an
            // earlier name of the shard that this heartbeat (or one whose
            // answer was lost) acknowledged. Read it anyway, whether held
            // here (dropped now) or not (dropped on a refused write, or a
            // take that found it moved): one read, and a shard no longer in
            // this consumer's name is read no more.
            if !self.leases.contains_key(&revoked.shard_id) {
                self.recheck.insert(revoked.shard_id.clone());
            }
        }
        self.acks.revoked.extend(beat.revoked.iter().cloned());
        // Every lease still held lives on from this heartbeat.
        self.beat_at = Some(sent);
        {
            let mut shared = lock(&self.shared);
            shared.token = self.holding.token().to_owned();
            shared.incarnation = Some(beat.incarnation.clone());
        }
        for shard in &beat.claimed {
            self.honour_claim(shard, tick, progress).await?;
            self.acks.claimed.insert(shard.clone());
        }
        let unnoted: Vec<ShardId> = claimed_at_renewal
            .difference(&beat.claimed)
            .cloned()
            .collect();
        if !unnoted.is_empty() {
            // A claim on the lease alone: a rebalancer of the code before
            // sessions runs; the window runs on from now for every session.
            if let Err(e) = self.store.stream_item().note_older_code().await {
                tracing::warn!(error = %e, "could not note the older code seen");
            }
        }
        for shard in &unnoted {
            self.honour_claim(shard, tick, progress).await?;
        }
        let now = (beat.assignments, beat.named);
        let unnamed = match self.assignments {
            // More moves of the counter than named ones: a give not named.
            Some((assigned, named)) => now.0.wrapping_sub(assigned) != now.1.wrapping_sub(named),
            None => true,
        };
        let full = beat.registered || unnamed;
        // A named shard held already needs no read (given again after it
        // was lost, it is not held). Leases waited on, and those to check
        // again, are read again.
        let named: Vec<ShardId> = beat
            .given
            .iter()
            .chain(self.holding.waiting())
            .chain(self.recheck.iter())
            .filter(|s| !self.leases.contains_key(*s))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if !full && named.is_empty() {
            self.acks.given.extend(beat.given);
            self.assignments = Some(now);
            return Ok(());
        }
        let owned = if full {
            self.store.leases().owned_shards(self.id()).await?
        } else {
            self.given_to_me(&named).await?
        };
        // Only a pickup that went through counts: a failed one is made again.
        self.assignments = None;
        // The names whose shard this read showed in this consumer's name.
        let shown: BTreeSet<ShardId> = owned.iter().map(|s| s.shard_id.clone()).collect();
        // A shard whose parents are still to be read waits in this
        // consumer's name: it is taken once they are.
        if full {
            self.recheck.clear();
        } else {
            for shard in &named {
                self.recheck.remove(shard);
            }
        }
        let (owned, unready): (Vec<_>, Vec<_>) = owned
            .into_iter()
            .partition(|s| s.pending_parents.is_empty());
        self.recheck.extend(unready.into_iter().map(|s| s.shard_id));
        // Taken moving the counter on, so whoever held it under this id
        // before can no longer checkpoint it; one that another process of
        // this id may still hold, only once that process can no longer be
        // processing (see `Holding::takes`). Its stored expiry is never
        // compared with a clock.
        let unheld: Vec<_> = owned
            .into_iter()
            .filter(|s| !self.leases.contains_key(&s.shard_id))
            .collect();
        let takes = self
            .holding
            .takes(&unheld, self.store.monotonic_now(), self.lease_term);
        for (shard_id, from) in takes {
            // (None: it moved meanwhile.)
            let taken = self
                .store
                .leases()
                .take(
                    &shard_id,
                    self.id(),
                    &from,
                    Some(self.holding.token()),
                    self.lease_term,
                )
                .await?;
            match taken {
                Some(taken) => {
                    self.leases.insert(shard_id.clone(), taken);
                    self.share_held();
                    tick.gained.push(shard_id);
                }
                // Moved since the read: an operator's move between the two
                // keeps it in this consumer's name, and its name on the
                // item merged into the one this tick acknowledges.
                None => {
                    self.recheck.insert(shard_id);
                }
            }
        }
        // A name whose shard the read of every shard did not show in this
        // consumer's name stays unacknowledged: the next heartbeat returns
        // it and the shard is read again by name (a give applied just
        // before the read is never lost to it). Read by name, a name is
        // acknowledged whatever the read showed: that read was of the shard
        // itself, after the name.
        let given = beat
            .given
            .into_iter()
            .filter(|s| !full || shown.contains(s) || self.leases.contains_key(s));
        self.acks.given.extend(given);
        self.assignments = Some(now);
        Ok(())
    }
}
