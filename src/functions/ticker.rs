//! Ticks within one invocation, until the deadline minus a margin.
//!
//! EventBridge schedules fire at most once a minute, so a scheduled function
//! that did one pass per invocation would fail over in minutes. Instead each
//! invocation ticks every `timing.tick` until its deadline, and failover
//! takes seconds.

use crate::config::TickTiming;
use std::future::Future;
use std::time::{Duration, SystemTime};

/// What the ticks of one invocation returned.
#[derive(Debug)]
pub struct TickLoop<T> {
    /// Each successful tick's result, in order.
    pub ticks: Vec<T>,
    /// Each failed tick's error, in order.
    pub errors: Vec<crate::Error>,
}

/// Runs `tick` every `timing.tick` (start to start) while a tick can start
/// before `deadline - timing.margin`. A failed tick is logged and counted;
/// the next one runs as planned. A deadline already past at the start
/// (Lambda never gives one; a local emulator may) runs one tick, with a
/// warning.
pub async fn run_ticks<T, F, Fut>(
    deadline: SystemTime,
    timing: TickTiming,
    mut tick: F,
) -> TickLoop<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = crate::Result<T>>,
{
    let mut out = TickLoop {
        ticks: Vec::new(),
        errors: Vec::new(),
    };
    let stop_at = deadline.checked_sub(timing.margin).unwrap_or(deadline);
    let mut once = SystemTime::now() >= deadline;
    if once {
        tracing::warn!(
            "the invocation's deadline lies in the past at its start (a local emulator?): one tick"
        );
    }
    loop {
        let started = SystemTime::now();
        if started >= stop_at && !std::mem::take(&mut once) {
            return out;
        }
        match tick().await {
            Ok(t) => out.ticks.push(t),
            Err(e) => {
                tracing::error!(error = %e, "tick failed");
                out.errors.push(e);
            }
        }
        let next = started + timing.tick;
        if next >= stop_at {
            return out;
        }
        let wait = next
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tokio::time::sleep(wait).await;
    }
}

/// The JSON an invocation returns.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InvocationSummary<T> {
    /// Ticks run.
    pub ticks: usize,
    /// Errors of failed ticks.
    pub errors: Vec<String>,
    /// The last successful tick.
    pub last: Option<T>,
}

impl<T> InvocationSummary<T> {
    /// Sums up a tick loop. An invocation in which every tick failed fails
    /// with the last tick's error (each was logged as it came).
    pub fn from_loop(mut run: TickLoop<T>) -> crate::Result<Self> {
        if run.ticks.is_empty() {
            if let Some(last) = run.errors.pop() {
                return Err(last);
            }
        }
        Ok(InvocationSummary {
            ticks: run.ticks.len() + run.errors.len(),
            errors: run.errors.iter().map(ToString::to_string).collect(),
            last: run.ticks.into_iter().last(),
        })
    }
}

/// Records on the stream item that a consumer of the code before sessions
/// is registered (the observer saw it in `ages`): every session renews each
/// lease on for the upgrade window from now, for that code's rebalancer and
/// reaper. A failure is logged; the tick goes on.
pub(crate) async fn note_older_code(store: &crate::state::StateStore, ages: &crate::group::Ages) {
    if ages.renewing.is_empty() {
        return;
    }
    if let Err(e) = store.stream_item().note_older_code().await {
        tracing::warn!(error = %e, "could not note the older code seen");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ticks_until_the_deadline_margin_and_keeps_going_after_a_failure() {
        let timing = TickTiming {
            tick: Duration::from_millis(20),
            margin: Duration::from_millis(30),
        };
        let deadline = SystemTime::now() + Duration::from_millis(150);
        let mut n = 0;
        let run = run_ticks(deadline, timing, || {
            n += 1;
            let i = n;
            async move {
                if i == 2 {
                    Err(crate::state::StateError::Stopped.into())
                } else {
                    Ok(i)
                }
            }
        })
        .await;
        assert!(SystemTime::now() < deadline, "returned before the deadline");
        assert_eq!(run.errors.len(), 1);
        assert!(run.ticks.len() >= 2, "{run:?}");
        assert_eq!(run.ticks[0], 1);
        let summary = InvocationSummary::from_loop(run).unwrap();
        assert_eq!(summary.errors.len(), 1);
    }

    #[tokio::test]
    async fn no_tick_starts_past_the_margin() {
        let timing = TickTiming {
            tick: Duration::from_secs(5),
            margin: Duration::from_secs(10),
        };
        let run = run_ticks(
            SystemTime::now() + Duration::from_secs(1),
            timing,
            || async { crate::Result::Ok(()) },
        )
        .await;
        assert!(run.ticks.is_empty());
        assert!(InvocationSummary::from_loop(run).unwrap().last.is_none());
    }

    /// `cargo lambda watch` may hand out a deadline that has passed: the
    /// scheduled function ticks once instead of returning at once.
    #[tokio::test]
    async fn a_deadline_past_at_the_start_runs_one_tick() {
        let timing = TickTiming {
            tick: Duration::from_millis(10),
            margin: Duration::from_secs(2),
        };
        let run = run_ticks(
            SystemTime::now() - Duration::from_secs(1),
            timing,
            || async { crate::Result::Ok(()) },
        )
        .await;
        assert_eq!(run.ticks.len(), 1, "{run:?}");
    }

    #[test]
    fn all_failed_is_an_error() {
        let run: TickLoop<()> = TickLoop {
            ticks: vec![],
            errors: vec![crate::state::StateError::Stopped.into()],
        };
        assert!(InvocationSummary::from_loop(run).is_err());
    }
}
