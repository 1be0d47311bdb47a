//! A session's heartbeats on a task of their own: while the worker's loop is
//! inside a long batch or a hung call, the pulse keeps the consumer's
//! heartbeat going, so observers do not see its session stale and move every
//! lease it holds.
//!
//! - The pulse sends a heartbeat only when none went out for an interval
//!   and a half (the session's own heartbeats, which act on the notes,
//!   count): a worker whose loop keeps its schedule writes no more than
//!   before.
//! - A pulse heartbeat acknowledges nothing: the notes stay on the item for
//!   the session's next heartbeat of its own to act on.
//! - It extends the leases' local expiry only when its answer shows the
//!   session as the session left it: no revocation of a lease held, the
//!   same registration. Otherwise the leases live by the session's last
//!   heartbeat, as before, until the session's own tick acts on the notes.
//! - It stops once the worker's loop has not been seen for
//!   [`STALL_TERMS`] terms (a handler that never returns must not keep its
//!   leases forever), and for good once a newer process took the id over.
//! - A heartbeat that has not come back within the term is given up: its
//!   send time plus the term has passed, so it could extend nothing.

use crate::state::instant_now;
use crate::state::{Acks, ConsumerInfo, ShardId, StateError, StateStore};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many lease terms the worker's loop may go unseen before the pulse
/// stops: longer than a batch to its stop-by plus a call's attempts, shorter
/// than forever.
pub(crate) const STALL_TERMS: u32 = 3;

/// What the session and its pulse share.
#[derive(Debug)]
pub(crate) struct PulseState {
    /// The consumer as its heartbeats describe it (busy, draining).
    pub(crate) info: ConsumerInfo,
    /// The session's holding token (empty: the session has not taken the
    /// id over yet, so the pulse waits).
    pub(crate) token: String,
    /// The registration the session last saw.
    pub(crate) incarnation: Option<String>,
    /// The leases the session holds, at their counters.
    pub(crate) held: BTreeMap<ShardId, u64>,
    /// When the last heartbeat (the session's or the pulse's) was sent.
    pub(crate) last_sent: Option<Instant>,
    /// When the last pulse heartbeat that counts was sent.
    pub(crate) beat_at: Option<Instant>,
    /// When the worker's loop was last seen.
    pub(crate) loop_seen: Instant,
    /// A newer process took the id over: the pulse stopped.
    pub(crate) superseded: bool,
}

/// The heartbeat task of one session; stops when dropped.
#[derive(Debug)]
pub(crate) struct Pulse {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Pulse {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Locks the shared state (a panic elsewhere leaves it usable).
pub(crate) fn lock(shared: &Mutex<PulseState>) -> MutexGuard<'_, PulseState> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pulse {
    /// Starts the task: a heartbeat whenever none was sent for `every`,
    /// each given up after `term`.
    pub(crate) fn start(
        store: StateStore,
        shared: Arc<Mutex<PulseState>>,
        every: Duration,
        term: Duration,
    ) -> Pulse {
        let task = tokio::spawn(async move {
            loop {
                let due = {
                    let state = lock(&shared);
                    if state.superseded {
                        return;
                    }
                    // Half an interval of slack: a loop that keeps its own
                    // schedule always beats first.
                    state
                        .last_sent
                        .map_or(instant_now(), |t| t + every + every / 2)
                };
                if due > instant_now() {
                    tokio::time::sleep_until(due.into()).await;
                    continue;
                }
                let next = {
                    let mut state = lock(&shared);
                    let stalled = state.loop_seen.elapsed() >= term * STALL_TERMS;
                    if state.token.is_empty() || stalled {
                        None
                    } else {
                        state.last_sent = Some(instant_now());
                        Some((
                            state.info.clone(),
                            state.token.clone(),
                            state.held.clone(),
                            state.incarnation.clone(),
                        ))
                    }
                };
                let Some((info, token, held, incarnation)) = next else {
                    tokio::time::sleep(every).await;
                    continue;
                };
                let sent = instant_now();
                let none = Acks::default();
                let beat = store.consumers().heartbeat_as(&info, &token, false, &none);
                let beat = match tokio::time::timeout(term, beat).await {
                    Ok(Ok(beat)) => beat,
                    Ok(Err(StateError::Superseded { .. })) => {
                        lock(&shared).superseded = true;
                        return;
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "a heartbeat of the pulse failed");
                        continue;
                    }
                    Err(_) => {
                        tracing::debug!("a heartbeat of the pulse took longer than the term");
                        continue;
                    }
                };
                let revoked = beat
                    .revoked
                    .iter()
                    .any(|r| held.get(&r.shard_id) == Some(&r.counter));
                let same = !beat.registered && incarnation.as_ref() == Some(&beat.incarnation);
                if revoked || !same {
                    tracing::debug!(
                        "the pulse's heartbeat found notes for the session: the leases wait for its own"
                    );
                    continue;
                }
                let mut state = lock(&shared);
                // Only if the session's leases are still those the answer was
                // checked against (a lease taken since may have been revoked).
                if state.held.iter().all(|(s, c)| held.get(s) == Some(c)) {
                    state.beat_at = state.beat_at.max(Some(sent));
                }
            }
        });
        Pulse { task }
    }
}
