//! The simulated network: an `HttpClient` for the AWS SDK clients that hands
//! each request, in the caller's task, to the simulated DynamoDB or Kinesis,
//! and on the way decides by the seed what AWS and the network may do to
//! it: a wait before and after (which orders the tasks that run), a
//! throttle, a 500 (JSON) or a 503 (not JSON), a call that hangs, an answer
//! lost after the write was applied, an eventually consistent read of an
//! older version, and brownouts (for a while, DynamoDB refuses or answers
//! late every request).

use super::dynamo::Dynamo;
use super::kinesis::Kinesis;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::{Response, StatusCode};
use aws_smithy_types::body::SdkBody;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often each fault happens, as shares of all requests.
#[derive(Debug, Clone, Copy)]
pub struct Rates {
    pub throttle: f64,
    pub server_error: f64,
    pub hang: f64,
    pub lose_answer: f64,
    /// Of eventually consistent reads, the share served from a replica.
    pub stale_read: f64,
}

impl Rates {
    /// Rates drawn by the seed: each fault from none to a few percent, so
    /// seeds range from calm to hostile.
    pub fn drawn(rng: &mut fastrand::Rng) -> Self {
        let mut share = |max: f64| if rng.bool() { 0.0 } else { rng.f64() * max };
        Rates {
            throttle: share(0.04),
            server_error: share(0.02),
            hang: share(0.004),
            lose_answer: share(0.03),
            stale_read: share(0.5),
        }
    }

    /// A siege's rates: answers lost after the write in every seed, and
    /// every eventually consistent read served from a replica.
    pub fn siege(rng: &mut fastrand::Rng) -> Self {
        Rates {
            throttle: rng.f64() * 0.04,
            server_error: rng.f64() * 0.02,
            hang: rng.f64() * 0.004,
            lose_answer: 0.03 + rng.f64() * 0.03,
            stale_read: 1.0,
        }
    }
}

/// What the network did, counted.
#[derive(Debug, Default)]
pub struct Counts {
    pub requests: AtomicU64,
    pub throttled: AtomicU64,
    pub failed: AtomicU64,
    pub hung: AtomicU64,
    pub lost: AtomicU64,
    pub stale: AtomicU64,
}

/// The network and the services behind it.
pub struct Net {
    pub dynamo: Arc<Dynamo>,
    pub kinesis: Arc<Kinesis>,
    rng: Mutex<fastrand::Rng>,
    rates: Rates,
    /// Faults happen only while set (the run's last part is calm).
    pub faulty: AtomicBool,
    /// While set, only answers lost after the write and stale reads (a
    /// lull: every call goes through, so no session fails a tick).
    pub lull: AtomicBool,
    pub counts: Counts,
    /// Until when DynamoDB refuses every request of the faulty clients (a
    /// brownout), if it does.
    brownout: Mutex<Option<Instant>>,
    /// A request's digest goes into the trace: two runs of a seed must send
    /// the same requests in the same order.
    pub trace: Mutex<super::trace::Trace>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Net")
    }
}

/// The SDK clients' HTTP client: every request goes to the net. A client
/// of the run's own (the producer's: a lost answer would make it write a
/// record twice, which the history would take for the consumers' repeat)
/// meets no fault, only the waits.
#[derive(Debug, Clone)]
pub struct SimHttp {
    pub net: Arc<Net>,
    pub faults: bool,
}

impl HttpClient for SimHttp {
    fn http_connector(
        &self,
        _: &HttpConnectorSettings,
        _: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

impl HttpConnector for SimHttp {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (net, faults) = (self.net.clone(), self.faults);
        HttpConnectorFuture::new(async move { net.exchange(request, faults).await })
    }
}

/// What the seed decided for one request.
enum Fate {
    Serve,
    Throttle,
    Json500,
    Html503,
    Hang(Duration),
    LoseAnswer,
}

impl Net {
    pub fn new(seed: u64, rates: Rates, dynamo: Arc<Dynamo>, kinesis: Arc<Kinesis>) -> Arc<Self> {
        Arc::new(Net {
            dynamo,
            kinesis,
            rng: Mutex::new(fastrand::Rng::with_seed(seed ^ 0x006e_6574_776f_726b)),
            rates,
            faulty: AtomicBool::new(true),
            lull: AtomicBool::new(false),
            counts: Counts::default(),
            brownout: Mutex::new(None),
            trace: Mutex::new(super::trace::Trace::default()),
        })
    }

    /// Until `until`, DynamoDB refuses every request of the faulty clients
    /// (a 503 or a throttle) or answers it late (1 to 9.5 s, within the
    /// clients' attempt timeout), as in a regional brownout: heartbeats,
    /// checkpoints and the rebalancer's writes fail or take seconds, and
    /// a heartbeat that went through late renews its leases from when it
    /// was sent, so its process reads on with little of its term left.
    pub fn brownout(&self, until: Instant) {
        *self.brownout.lock().unwrap() = Some(until);
    }

    /// Whether a brownout is on.
    pub fn browned_out(&self) -> bool {
        self.brownout
            .lock()
            .unwrap()
            .is_some_and(|t| shardkeeper::state::instant_now() < t)
    }

    /// The waits before and after a request, the fate, the staleness of a
    /// read and the replica it goes to, drawn in one go (one draw order per request).
    fn draw(&self, faults: bool, dynamodb: bool) -> (Duration, Fate, f64, usize, Duration) {
        let mut rng = self.rng.lock().unwrap();
        let wait = |rng: &mut fastrand::Rng| match rng.u32(..10) {
            0..5 => Duration::ZERO,
            5..9 => Duration::from_micros(rng.u64(100..3_000)),
            _ => Duration::from_micros(rng.u64(3_000..40_000)),
        };
        let before = wait(&mut rng);
        let after = wait(&mut rng);
        let (roll, stale_roll, share) = (rng.f64(), rng.f64(), rng.f64());
        let replica = rng.usize(..super::dynamo::REPLICAS);
        let hang = Duration::from_millis(rng.u64(2_000..90_000));
        let server = rng.bool();
        if !faults || !self.faulty.load(Ordering::Relaxed) {
            return (before, Fate::Serve, 0.0, replica, after);
        }
        if dynamodb && self.browned_out() && !self.lull.load(Ordering::Relaxed) {
            let fate = match (roll * 3.0) as u32 {
                0 => Fate::Html503,
                1 => Fate::Throttle,
                _ => Fate::Hang(Duration::from_millis(1_000 + (stale_roll * 8_500.0) as u64)),
            };
            return (before, fate, 0.0, replica, after);
        }
        let mut r = self.rates;
        if self.lull.load(Ordering::Relaxed) {
            (r.throttle, r.server_error, r.hang) = (0.0, 0.0, 0.0);
        }
        let mut edge = r.throttle;
        let fate = if roll < edge {
            Fate::Throttle
        } else if roll < {
            edge += r.server_error;
            edge
        } {
            if server {
                Fate::Json500
            } else {
                Fate::Html503
            }
        } else if roll < {
            edge += r.hang;
            edge
        } {
            Fate::Hang(hang)
        } else if roll < {
            edge += r.lose_answer;
            edge
        } {
            Fate::LoseAnswer
        } else {
            Fate::Serve
        };
        let stale = if stale_roll < r.stale_read {
            share.max(0.01)
        } else {
            0.0
        };
        (before, fate, stale, replica, after)
    }

    async fn exchange(
        &self,
        request: HttpRequest,
        faults: bool,
    ) -> Result<Response<SdkBody>, ConnectorError> {
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let body = request
            .body()
            .bytes()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let (service, operation) = target.split_once('.').unwrap_or(("", ""));
        let dynamodb = service.starts_with("DynamoDB");
        let (before, fate, stale, replica, after) = self.draw(faults, dynamodb);
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        self.trace.lock().unwrap().request(operation, &body);
        pause(before).await;
        let throttle_type = if dynamodb {
            "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"
        } else {
            "ProvisionedThroughputExceededException"
        };
        match fate {
            Fate::Throttle => {
                self.counts.throttled.fetch_add(1, Ordering::Relaxed);
                return Ok(answer(
                    400,
                    &format!(r#"{{"__type":"{throttle_type}","message":"Rate exceeded"}}"#),
                ));
            }
            Fate::Json500 => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                let kind = if dynamodb {
                    "com.amazonaws.dynamodb.v20120810#InternalServerError"
                } else {
                    "InternalFailure"
                };
                return Ok(answer(
                    500,
                    &format!(r#"{{"__type":"{kind}","message":"Internal server error"}}"#),
                ));
            }
            Fate::Html503 => {
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                return Ok(answer(
                    503,
                    "<html><body><h1>503 Service Unavailable</h1></body></html>",
                ));
            }
            Fate::Hang(d) => {
                // The call hangs; the client's timeout, if any, ends it
                // first (this future is dropped: nothing was applied).
                self.counts.hung.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(d).await;
            }
            Fate::Serve | Fate::LoseAnswer => {}
        }
        if stale > 0.0 {
            self.counts.stale.fetch_add(1, Ordering::Relaxed);
        }
        let (status, text) = if dynamodb {
            let a = self.dynamo.serve(operation, &body, stale, replica);
            (a.status, a.body)
        } else {
            let a = self.kinesis.serve(operation, &body);
            (a.status, a.body)
        };
        self.trace.lock().unwrap().answer(status, &text);
        pause(after).await;
        if matches!(fate, Fate::LoseAnswer) {
            self.counts.lost.fetch_add(1, Ordering::Relaxed);
            return Err(ConnectorError::io(
                "connection reset after the request was applied".into(),
            ));
        }
        Ok(answer(status, &text))
    }
}

/// A wait of `d` on the simulated clock, or a yield to the other ready tasks.
async fn pause(d: Duration) {
    if d.is_zero() {
        tokio::task::yield_now().await;
    } else {
        tokio::time::sleep(d).await;
    }
}

fn answer(status: u16, body: &str) -> Response<SdkBody> {
    let mut r = Response::new(
        StatusCode::try_from(status).expect("a status"),
        SdkBody::from(body.to_owned()),
    );
    let kind = if body.starts_with('<') {
        "text/html"
    } else {
        "application/x-amz-json-1.0"
    };
    r.headers_mut().insert("content-type", kind);
    r
}
