//! What a fault proxy does to requests: the configured rates, the per-request
//! draw, and the counts of what was done.

use crate::LocalError;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a [`FaultProxy`](crate::FaultProxy) does to the requests it receives.
///
/// `throttle`, `server_error`, `drop` and `lose_response` are shares of all
/// requests (each from 0.0 to 1.0, together at most 1.0); the rest is
/// forwarded, and `delay` of those forwarded wait a time drawn from
/// `latency` first. Besides, the requests `slow` matches wait before any
/// of that.
#[derive(Debug, Clone, PartialEq)]
pub struct Faults {
    /// Answered with the service's throttling error (HTTP 400).
    pub throttle: f64,
    /// Answered with the service's internal error (HTTP 500).
    pub server_error: f64,
    /// Read, then the connection is closed without an answer.
    pub drop: f64,
    /// Forwarded and applied by the server, then the connection is closed
    /// before the answer reaches the client (which retries a write that
    /// already happened).
    pub lose_response: f64,
    /// Of the forwarded requests, the share that waits before it is forwarded.
    pub delay: f64,
    /// How long a delayed request waits (drawn uniformly).
    pub latency: RangeInclusive<Duration>,
    /// Requests that wait by what they are, whatever the rates (`None`:
    /// none).
    pub slow: Option<SlowRequests>,
}

/// Requests a [`FaultProxy`](crate::FaultProxy) delays by what they are:
/// those of one operation whose body contains one of some strings. For
/// example, a state table's lease renewals and heartbeats: DynamoDB
/// `UpdateItem` requests whose update expression starts
/// `SET #expires = :until` or `SET #heartbeat = :now`.
///
/// A matching request waits a time drawn from `latency` before the proxy
/// decides its fate by the rates. The waits are drawn from a generator of
/// their own, so the fates drawn for a seed are those drawn without them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowRequests {
    /// The operation: the end of the request's `x-amz-target` header after
    /// its dot (`UpdateItem` for `DynamoDB_20120810.UpdateItem`).
    pub operation: String,
    /// The request body must contain one of these (empty: any body of the
    /// operation matches).
    pub body_contains: Vec<String>,
    /// How long a matching request waits (drawn uniformly).
    pub latency: RangeInclusive<Duration>,
}

impl SlowRequests {
    /// Whether a request of `operation` with `body` matches.
    pub(crate) fn matches(&self, operation: &str, body: &[u8]) -> bool {
        operation == self.operation
            && (self.body_contains.is_empty()
                || self
                    .body_contains
                    .iter()
                    .any(|s| contains(body, s.as_bytes())))
    }

    /// Draws how long a matching request waits.
    pub(crate) fn wait(&self, rng: &mut fastrand::Rng) -> Duration {
        let (low, high) = (self.latency.start(), self.latency.end());
        *low + (*high - *low).mul_f64(rng.f64())
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

impl Default for Faults {
    /// No faults: everything is forwarded at once.
    fn default() -> Self {
        Faults {
            throttle: 0.0,
            server_error: 0.0,
            drop: 0.0,
            lose_response: 0.0,
            delay: 0.0,
            latency: Duration::ZERO..=Duration::ZERO,
            slow: None,
        }
    }
}

impl Faults {
    /// No faults (the default).
    pub fn none() -> Self {
        Self::default()
    }

    /// Checks that every rate is within 0.0..=1.0, that the injected shares
    /// add up to at most 1.0 and that the latency range is not reversed.
    pub fn validate(&self) -> Result<(), LocalError> {
        let rates = [
            ("throttle", self.throttle),
            ("server_error", self.server_error),
            ("drop", self.drop),
            ("lose_response", self.lose_response),
            ("delay", self.delay),
        ];
        for (name, rate) in rates {
            if !(0.0..=1.0).contains(&rate) {
                return Err(LocalError::InvalidFaults(format!(
                    "{name} rate {rate} is not within 0.0..=1.0"
                )));
            }
        }
        let injected = self.throttle + self.server_error + self.drop + self.lose_response;
        if injected > 1.0 + 1e-9 {
            return Err(LocalError::InvalidFaults(format!(
                "throttle, server_error, drop and lose_response add up to {injected}, more than 1.0"
            )));
        }
        if self.latency.start() > self.latency.end() {
            return Err(LocalError::InvalidFaults(format!(
                "latency range {:?} is reversed",
                self.latency
            )));
        }
        if let Some(slow) = self.slow.as_ref() {
            if slow.latency.start() > slow.latency.end() {
                return Err(LocalError::InvalidFaults(format!(
                    "slow requests' latency range {:?} is reversed",
                    slow.latency
                )));
            }
        }
        Ok(())
    }
}

/// What a [`FaultProxy`](crate::FaultProxy) did so far. Every request is counted once in
/// `throttled`, `errors_500`, `dropped`, `failed_as_told` or `forwarded`;
/// `delayed` counts the forwarded requests that waited first, and `slowed`
/// the requests that [`Faults::slow`] matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Answered with a throttling error.
    pub throttled: u64,
    /// Answered with HTTP 500.
    pub errors_500: u64,
    /// Connections closed without an answer.
    pub dropped: u64,
    /// Forwarded after a wait (also counted in `forwarded`).
    pub delayed: u64,
    /// Forwarded to the upstream server.
    pub forwarded: u64,
    /// Forwarded and applied, with the answer then lost (also counted in
    /// `forwarded`).
    pub lost_responses: u64,
    /// Answered with the error the test set for their operation
    /// ([`FaultProxy::fail_operation`](crate::FaultProxy::fail_operation)).
    pub failed_as_told: u64,
    /// Waited as [`Faults::slow`] matched them (also counted by their fate).
    pub slowed: u64,
}

impl FaultCounts {
    /// Requests answered (or dropped) by the proxy itself.
    pub fn injected(&self) -> u64 {
        self.throttled + self.errors_500 + self.dropped + self.failed_as_told
    }

    /// Requests received in all.
    pub fn requests(&self) -> u64 {
        self.injected() + self.forwarded
    }
}

impl std::ops::Add for FaultCounts {
    type Output = FaultCounts;

    /// The counts of two proxies together.
    fn add(self, other: FaultCounts) -> FaultCounts {
        FaultCounts {
            throttled: self.throttled + other.throttled,
            errors_500: self.errors_500 + other.errors_500,
            dropped: self.dropped + other.dropped,
            delayed: self.delayed + other.delayed,
            forwarded: self.forwarded + other.forwarded,
            lost_responses: self.lost_responses + other.lost_responses,
            failed_as_told: self.failed_as_told + other.failed_as_told,
            slowed: self.slowed + other.slowed,
        }
    }
}

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Throttle,
    ServerError,
    Drop,
    LoseResponse,
    Forward(Option<Duration>),
}

/// Draws a request's fate. Every call takes the same draws from `rng`
/// whatever the rates, so changing one rate does not shift the others.
pub(crate) fn decide(faults: &Faults, rng: &mut fastrand::Rng) -> Fate {
    let fate = rng.f64();
    let delayed = rng.f64() < faults.delay;
    let (low, high) = (faults.latency.start(), faults.latency.end());
    let wait = *low + (*high - *low).mul_f64(rng.f64());
    let mut bound = faults.throttle;
    if fate < bound {
        return Fate::Throttle;
    }
    bound += faults.server_error;
    if fate < bound {
        return Fate::ServerError;
    }
    bound += faults.drop;
    if fate < bound {
        return Fate::Drop;
    }
    bound += faults.lose_response;
    if fate < bound {
        return Fate::LoseResponse;
    }
    Fate::Forward(delayed.then_some(wait))
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    throttled: AtomicU64,
    errors_500: AtomicU64,
    dropped: AtomicU64,
    delayed: AtomicU64,
    forwarded: AtomicU64,
    lost_responses: AtomicU64,
    failed_as_told: AtomicU64,
    slowed: AtomicU64,
}

impl Counters {
    pub(crate) fn slowed(&self) {
        self.slowed.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn record(&self, fate: Fate) {
        let counter = match fate {
            Fate::Throttle => &self.throttled,
            Fate::ServerError => &self.errors_500,
            Fate::Drop => &self.dropped,
            Fate::LoseResponse => {
                self.lost_responses.fetch_add(1, Ordering::SeqCst);
                &self.forwarded
            }
            Fate::Forward(delay) => {
                if delay.is_some() {
                    self.delayed.fetch_add(1, Ordering::SeqCst);
                }
                &self.forwarded
            }
        };
        counter.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn failed_as_told(&self) {
        self.failed_as_told.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn snapshot(&self) -> FaultCounts {
        let get = |c: &AtomicU64| c.load(Ordering::SeqCst);
        FaultCounts {
            throttled: get(&self.throttled),
            errors_500: get(&self.errors_500),
            dropped: get(&self.dropped),
            delayed: get(&self.delayed),
            forwarded: get(&self.forwarded),
            lost_responses: get(&self.lost_responses),
            failed_as_told: get(&self.failed_as_told),
            slowed: get(&self.slowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(faults: &Faults, n: usize, seed: u64) -> [usize; 6] {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut seen = [0; 6];
        for _ in 0..n {
            let i = match decide(faults, &mut rng) {
                Fate::Throttle => 0,
                Fate::ServerError => 1,
                Fate::Drop => 2,
                Fate::Forward(Some(wait)) => {
                    assert!(faults.latency.contains(&wait), "{wait:?}");
                    3
                }
                Fate::Forward(None) => 4,
                Fate::LoseResponse => 5,
            };
            seen[i] += 1;
        }
        seen
    }

    #[test]
    fn fates_come_in_their_shares() {
        let faults = Faults {
            throttle: 0.2,
            server_error: 0.1,
            drop: 0.05,
            lose_response: 0.05,
            delay: 0.5,
            latency: Duration::from_millis(1)..=Duration::from_millis(9),
            slow: None,
        };
        let seen = share(&faults, 20_000, 7);
        let expected = [4_000, 2_000, 1_000, 6_000, 6_000, 1_000];
        for (got, want) in seen.iter().zip(expected) {
            assert!(got.abs_diff(want) < want / 10, "{seen:?} vs {expected:?}");
        }
    }

    #[test]
    fn rates_of_zero_and_one_are_exact() {
        assert_eq!(share(&Faults::none(), 1_000, 1), [0, 0, 0, 0, 1_000, 0]);
        let all = |f: Faults| share(&f, 1_000, 2);
        let none = Faults::none();
        assert_eq!(
            all(Faults {
                throttle: 1.0,
                ..none.clone()
            })[0],
            1_000
        );
        assert_eq!(
            all(Faults {
                server_error: 1.0,
                ..none.clone()
            })[1],
            1_000
        );
        assert_eq!(
            all(Faults {
                drop: 1.0,
                ..none.clone()
            })[2],
            1_000
        );
        assert_eq!(all(Faults { delay: 1.0, ..none })[3], 1_000);
    }

    #[test]
    fn a_seed_reproduces_the_decisions() {
        let faults = Faults {
            throttle: 0.3,
            drop: 0.3,
            ..Faults::none()
        };
        let run = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            (0..100)
                .map(|_| decide(&faults, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
    }

    #[test]
    fn slow_requests_match_by_operation_and_body() {
        let slow = SlowRequests {
            operation: "UpdateItem".into(),
            body_contains: vec!["SET #expires = :until".into(), "SET #heartbeat".into()],
            latency: Duration::from_millis(10)..=Duration::from_millis(20),
        };
        let renewal = br#"{"UpdateExpression":"SET #expires = :until, #updated = :now"}"#;
        let take = br#"{"UpdateExpression":"SET #owner = :me, #expires = :until"}"#;
        assert!(slow.matches("UpdateItem", renewal));
        assert!(slow.matches("UpdateItem", br#"{"x":"SET #heartbeat = :now"}"#));
        assert!(!slow.matches("UpdateItem", take));
        assert!(!slow.matches("PutItem", renewal));
        let any = SlowRequests {
            body_contains: Vec::new(),
            ..slow.clone()
        };
        assert!(any.matches("UpdateItem", b""));
        let mut rng = fastrand::Rng::with_seed(3);
        for _ in 0..100 {
            assert!(slow.latency.contains(&slow.wait(&mut rng)));
        }
    }

    #[test]
    fn invalid_faults_are_refused() {
        let none = Faults::none();
        assert!(none.validate().is_ok());
        for bad in [
            Faults {
                throttle: 1.5,
                ..none.clone()
            },
            Faults {
                delay: -0.1,
                ..none.clone()
            },
            Faults {
                server_error: f64::NAN,
                ..none.clone()
            },
            Faults {
                throttle: 0.6,
                drop: 0.6,
                ..none.clone()
            },
            Faults {
                latency: Duration::from_secs(2)..=Duration::from_secs(1),
                ..none.clone()
            },
            Faults {
                slow: Some(SlowRequests {
                    operation: "UpdateItem".into(),
                    body_contains: Vec::new(),
                    latency: Duration::from_secs(2)..=Duration::from_secs(1),
                }),
                ..none.clone()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(LocalError::InvalidFaults(_))),
                "{bad:?}"
            );
        }
    }
}
