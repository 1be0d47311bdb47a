//! Simulated time: every clock of a simulated group reads the runtime's
//! paused clock (tokio's `time::pause`), which moves only when every task
//! waits. A process's wall clock is that time plus its own skew, which the
//! seed sets and may step while it runs; its monotonic clock never steps.

use shardkeeper::state::{instant_now, Clock, EpochMillis};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The wall-clock time at which every simulation starts (2026-01-01T00:00:00Z),
/// so the same seed gives the same timestamps, sequence numbers and history.
pub const EPOCH: EpochMillis = 1_767_225_600_000;

/// The simulation's time line: the instant it began on the paused clock.
#[derive(Debug, Clone, Copy)]
pub struct TimeLine {
    began: Instant,
}

impl TimeLine {
    /// Starts the time line now (inside the simulation's runtime).
    pub fn start() -> Self {
        TimeLine {
            began: instant_now(),
        }
    }

    /// Milliseconds of simulated time since the start.
    pub fn elapsed_millis(&self) -> EpochMillis {
        instant_now().duration_since(self.began).as_millis() as EpochMillis
    }

    /// The true wall-clock time (no skew): what the servers stamp.
    pub fn now_millis(&self) -> EpochMillis {
        EPOCH + self.elapsed_millis()
    }
}

/// The SDK clients' own clock (their retry quota refills by it, their
/// requests are signed with it): the true time line, not the machine's.
impl aws_smithy_async::time::TimeSource for TimeLine {
    fn now(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.now_millis() as u64)
    }
}

/// One process's clock: the time line, its wall clock off by a skew that
/// the seed may step.
#[derive(Debug, Clone)]
pub struct SimClock {
    line: TimeLine,
    skew: Arc<AtomicI64>,
}

impl SimClock {
    /// A clock on `line` whose wall clock is `skew_ms` off.
    pub fn new(line: TimeLine, skew_ms: EpochMillis) -> Self {
        SimClock {
            line,
            skew: Arc::new(AtomicI64::new(skew_ms)),
        }
    }

    /// Steps the wall clock by `by_ms` (an NTP correction, a VM resumed).
    pub fn step(&self, by_ms: EpochMillis) {
        self.skew.fetch_add(by_ms, Ordering::SeqCst);
    }
}

impl Clock for SimClock {
    fn now_millis(&self) -> EpochMillis {
        self.line.now_millis() + self.skew.load(Ordering::SeqCst)
    }

    fn monotonic_millis(&self) -> EpochMillis {
        self.line.elapsed_millis()
    }
}

/// The DynamoDB engine's clock: the true time line.
#[derive(Debug, Clone, Copy)]
pub struct EngineClock(pub TimeLine);

impl dynoxide::storage_backend::Clock for EngineClock {
    fn now_unix_secs(&self) -> u64 {
        (self.0.now_millis() / 1000) as u64
    }

    fn now_unix_secs_f64(&self) -> f64 {
        self.0.now_millis() as f64 / 1000.0
    }
}
