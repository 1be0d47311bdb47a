//! Time, injected, so lease expiry and heartbeat timeouts are testable without sleeping.

// The test clocks' imports: they are compiled with the `testing` feature
// only (which this crate's own tests turn on).
#[cfg(feature = "testing")]
use std::sync::atomic::{AtomicI64, Ordering};
#[cfg(feature = "testing")]
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: the unit every timestamp in the state table uses.
pub type EpochMillis = i64;

/// A source of time.
///
/// Timestamps written to the table (`expires`, `heartbeat`, `claim_at`,
/// `updated`) are wall-clock time, for display and for tools. Nothing in a
/// consumer group judges another process's lease or heartbeat by comparing
/// such a value with its own wall clock: an observer measures how long a
/// value has gone unchanged on its own [`Clock::monotonic_millis`], so skew
/// between machines does not shorten or lengthen a lease.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, in milliseconds since the Unix epoch.
    fn now_millis(&self) -> EpochMillis;

    /// A reading of this process's monotonic clock in milliseconds: only
    /// differences of two readings mean anything. By default the wall clock
    /// (test clocks move both together).
    fn monotonic_millis(&self) -> EpochMillis {
        self.now_millis()
    }
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

    fn monotonic_millis(&self) -> EpochMillis {
        static ANCHOR: OnceLock<Instant> = OnceLock::new();
        duration_millis(ANCHOR.get_or_init(Instant::now).elapsed())
    }
}

/// Another clock shifted by a fixed offset: one machine's wall clock running
/// ahead (positive) or behind (negative) the others, for tests of clock skew.
/// Its monotonic readings are the inner clock's, shifted the same way.
///
/// Only with the `testing` feature: a test clock, not for a deployed consumer.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone)]
pub struct SkewedClock {
    inner: Arc<dyn Clock>,
    offset: EpochMillis,
}

#[cfg(feature = "testing")]
impl SkewedClock {
    /// `inner` shifted by `offset_millis`.
    pub fn new(inner: Arc<dyn Clock>, offset_millis: EpochMillis) -> Self {
        SkewedClock {
            inner,
            offset: offset_millis,
        }
    }
}

#[cfg(feature = "testing")]
impl Clock for SkewedClock {
    fn now_millis(&self) -> EpochMillis {
        self.inner.now_millis() + self.offset
    }

    fn monotonic_millis(&self) -> EpochMillis {
        self.inner.monotonic_millis() + self.offset
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time.
///
/// Only with the `testing` feature: a test clock, not for a deployed consumer.
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

#[cfg(feature = "testing")]
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

#[cfg(feature = "testing")]
impl Clock for ManualClock {
    fn now_millis(&self) -> EpochMillis {
        self.now.load(Ordering::SeqCst)
    }
}

/// The instant now on the async runtime's clock: the system's monotonic
/// clock, or virtual time under a runtime whose clock is paused (a
/// simulation: tokio's `time::pause`). Every deadline, interval and timeout
/// the toolkit measures in-process reads it, so a simulated group runs
/// entirely on simulated time.
pub fn instant_now() -> Instant {
    tokio::time::Instant::now().into_std()
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

    #[test]
    fn system_monotonic_readings_never_go_back() {
        let a = SystemClock.monotonic_millis();
        let b = SystemClock.monotonic_millis();
        assert!(b >= a);
    }

    #[test]
    fn a_skewed_clock_shifts_both_readings() {
        let base = ManualClock::new(10_000);
        let ahead = SkewedClock::new(Arc::new(base.clone()), 30_000);
        assert_eq!(ahead.now_millis(), 40_000);
        base.advance(Duration::from_secs(1));
        assert_eq!(ahead.monotonic_millis(), 41_000);
    }
}
