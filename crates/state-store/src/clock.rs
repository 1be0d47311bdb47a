//! Time, injected, so lease expiry and heartbeat timeouts are testable without sleeping.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: the unit every timestamp in the state table uses.
pub type EpochMillis = i64;

/// A source of wall-clock time.
///
/// Lease expiry, heartbeats, claims and idle timers compare times written by
/// different processes, so every writer must use wall-clock time (not a
/// monotonic clock). Clock skew between consumers shortens or lengthens leases
/// by the skew; keep lease terms well above the expected skew.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now_millis(&self) -> EpochMillis;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> EpochMillis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as EpochMillis)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock that reads `start` until moved.
    pub fn new(start: EpochMillis) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start)),
        }
    }

    /// A clock starting at the current system time.
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now_millis())
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_millis(by), Ordering::SeqCst);
    }

    /// Sets the clock to an absolute time.
    pub fn set(&self, to: EpochMillis) {
        self.now.store(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> EpochMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// A duration in whole milliseconds, saturating.
pub fn duration_millis(d: Duration) -> EpochMillis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_time() {
        let clock = ManualClock::new(1_000);
        let other = clock.clone();
        assert_eq!(clock.now_millis(), 1_000);
        other.advance(Duration::from_secs(2));
        assert_eq!(clock.now_millis(), 3_000);
        clock.set(10);
        assert_eq!(other.now_millis(), 10);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.now_millis() > 1_577_836_800_000);
    }
}
