//! A fault-injecting HTTP/1.1 proxy in front of one loopback AWS endpoint:
//! throttling, internal errors, dropped connections and latency at chosen
//! rates, decided per request from a seeded generator, and latency for the
//! requests of a kind.

use crate::fault_plan::{decide, Counters, Fate};
use crate::faults::{error_answer, error_response, AwsService};
use crate::other_account::{Addressed, OtherAccount};
use crate::{FaultCounts, Faults, LocalError, SharedStreamCounts};
use axum::body::Body;
use axum::http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// A fault-injecting HTTP/1.1 proxy listening on `127.0.0.1`, in front of one
/// loopback endpoint of the in-process (or another local) DynamoDB or Kinesis
/// server. Point an SDK client's endpoint at [`FaultProxy::url`].
///
/// Each request's fate is drawn from a generator seeded by
/// [`FaultProxy::seed`], so a run whose requests arrive one after another is
/// reproduced by [`FaultProxy::start_seeded`] with the same seed. Forwarded
/// answers are streamed, so SubscribeToShard event streams pass through.
/// The proxy runs on the runtime that started it; dropping it stops it.
#[derive(Debug)]
pub struct FaultProxy {
    url: String,
    seed: u64,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy for `service` in front of `upstream_url` (an
    /// `http://` URL on a loopback address), with a random seed.
    pub async fn start(
        service: AwsService,
        upstream_url: &str,
        faults: Faults,
    ) -> Result<Self, LocalError> {
        Self::start_seeded(service, upstream_url, faults, fastrand::u64(..)).await
    }

    /// Starts a proxy whose fault decisions come from `seed`.
    pub async fn start_seeded(
        service: AwsService,
        upstream_url: &str,
        faults: Faults,
        seed: u64,
    ) -> Result<Self, LocalError> {
        faults.validate()?;
        let upstream = loopback_upstream(upstream_url).await?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| LocalError::Start(e.to_string()))?;
        let local = listener
            .local_addr()
            .map_err(|e| LocalError::Start(e.to_string()))?;
        let shared = Arc::new(Shared {
            service,
            upstream,
            faults: Mutex::new(faults),
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            slow_rng: Mutex::new(fastrand::Rng::with_seed(seed ^ SLOW_SEED)),
            paused: AtomicBool::new(false),
            lose_next: AtomicU64::new(0),
            skip_before_losing: AtomicU64::new(0),
            counts: Counters::default(),
            other_account: Mutex::new(None),
            told: Mutex::new(BTreeMap::new()),
        });
        let task = tokio::spawn(accept(listener, shared.clone()));
        tracing::debug!(%local, %upstream, ?service, seed, "fault proxy started");
        Ok(FaultProxy {
            url: format!("http://{local}"),
            seed,
            shared,
            task,
        })
    }

    /// The proxy's URL, for an SDK client's endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The service the proxy answers for.
    pub fn service(&self) -> AwsService {
        self.shared.service
    }

    /// The seed of the fault decisions.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        lock(&self.shared.faults).clone()
    }

    /// Replaces the faults, from the next request on.
    pub fn set_faults(&self, faults: Faults) -> Result<(), LocalError> {
        faults.validate()?;
        *lock(&self.shared.faults) = faults;
        Ok(())
    }

    /// Applies the next `n` requests and loses their answers, whatever the
    /// rates (a scripted lost response: the first attempt of a write is
    /// applied, its answer lost, and the client's retry meets its own write).
    pub fn lose_next_responses(&self, n: u64) {
        self.lose_responses_after(0, n);
    }

    /// Forwards the next `skip` requests as the rates say, then applies the
    /// `n` after them and loses their answers (a write in the middle of a
    /// sequence whose every attempt is applied and unanswered).
    pub fn lose_responses_after(&self, skip: u64, n: u64) {
        self.shared.skip_before_losing.store(skip, Ordering::SeqCst);
        self.shared.lose_next.store(n, Ordering::SeqCst);
    }

    /// From the next request on, answers every request for `operation` (the
    /// action its `x-amz-target` names, e.g. `UpdateItem` or
    /// `RegisterStreamConsumer`) with the AWS error `code` and HTTP `status`,
    /// whatever the rates and even while paused; requests for other
    /// operations go on as before. Counted in [`FaultCounts::failed_as_told`].
    pub fn fail_operation(
        &self,
        operation: &str,
        status: u16,
        code: &str,
    ) -> Result<(), LocalError> {
        let status =
            StatusCode::from_u16(status).map_err(|e| LocalError::InvalidFaults(e.to_string()))?;
        lock(&self.shared.told).insert(operation.to_owned(), (status, code.to_owned()));
        Ok(())
    }

    /// Ends every [`FaultProxy::fail_operation`]: those operations go on as
    /// the others do.
    pub fn stop_failing_operations(&self) {
        lock(&self.shared.told).clear();
    }

    /// Forwards every request at once until [`FaultProxy::resume`].
    pub fn pause(&self) {
        self.shared.paused.store(true, Ordering::SeqCst);
    }

    /// Injects faults again after [`FaultProxy::pause`].
    pub fn resume(&self) {
        self.shared.paused.store(false, Ordering::SeqCst);
    }

    /// Whether the proxy is paused.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// What the proxy did so far.
    pub fn counts(&self) -> FaultCounts {
        self.shared.counts.snapshot()
    }

    /// From the next request on, the Kinesis stream `stream_arn` is one that
    /// another account shares: requests naming it by name are answered
    /// `ResourceNotFoundException`, as Kinesis answers a name it looks up in
    /// the caller's own account, and requests naming it by ARN reach it.
    pub fn share_from_other_account(&self, stream_arn: &str) -> Result<(), LocalError> {
        let other = OtherAccount::new(stream_arn)?;
        *lock(&self.shared.other_account) = Some(Arc::new(other));
        Ok(())
    }

    /// What the proxy saw of the stream shared by
    /// [`FaultProxy::share_from_other_account`] (zeros if none).
    pub fn shared_stream_counts(&self) -> SharedStreamCounts {
        lock(&self.shared.other_account)
            .as_ref()
            .map(|o| o.counts())
            .unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Mixed into the seed of the generator of slow requests' waits.
const SLOW_SEED: u64 = 0x5107_5107_5107_5107;

#[derive(Debug)]
struct Shared {
    service: AwsService,
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    rng: Mutex<fastrand::Rng>,
    /// Draws the waits of slow requests (apart, so they shift no fate).
    slow_rng: Mutex<fastrand::Rng>,
    paused: AtomicBool,
    lose_next: AtomicU64,
    skip_before_losing: AtomicU64,
    counts: Counters,
    other_account: Mutex<Option<Arc<OtherAccount>>>,
    /// The errors set per operation by [`FaultProxy::fail_operation`].
    told: Mutex<BTreeMap<String, (StatusCode, String)>>,
}

impl Shared {
    fn fate(&self) -> Fate {
        let skipped = self
            .skip_before_losing
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let scripted = !skipped
            && self
                .lose_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        let fate = if scripted {
            Fate::LoseResponse
        } else if self.paused.load(Ordering::SeqCst) {
            Fate::Forward(None)
        } else {
            let faults = lock(&self.faults).clone();
            decide(&faults, &mut lock(&self.rng))
        };
        self.counts.record(fate);
        fate
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The upstream's address: `url` must be `http://` on a loopback address.
async fn loopback_upstream(url: &str) -> Result<SocketAddr, LocalError> {
    let bad = |why: &str| LocalError::Start(format!("upstream {url:?}: {why}"));
    let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad("only http:// is proxied"));
    }
    let host = uri.host().ok_or_else(|| bad("no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) if host.eq_ignore_ascii_case("localhost") => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| bad(&e.to_string()))?
            .collect(),
        Err(_) => return Err(bad("not a loopback address")),
    };
    match addrs.first() {
        Some(first) if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(*first),
        _ => Err(bad("not a loopback address")),
    }
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    // Connections live in this set, so stopping the proxy ends them too.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve_connection(stream, shared.clone()));
                }
                Err(e) => tracing::debug!(error = %e, "fault proxy accept failed"),
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    let service = hyper::service::service_fn(move |req| handle(shared.clone(), req));
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "fault proxy connection ended");
    }
}

/// Why a request gets no answer: hyper closes the connection when the
/// service fails, without writing a response.
#[derive(Debug, thiserror::Error)]
enum NoAnswer {
    #[error("connection dropped by fault injection")]
    Dropped,
    #[error("upstream failed: {0}")]
    Upstream(String),
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, NoAnswer> {
    let service = shared.service;
    let other_account = lock(&shared.other_account).clone();
    let req = match other_account {
        Some(other) if service == AwsService::Kinesis => {
            match as_shared_stream(&other, req).await? {
                Ok(req) => req,
                Err(not_found) => return Ok(not_found),
            }
        }
        _ => req.map(Body::new),
    };
    let target = target(&req);
    let operation = target.split_once('.').map_or(target.as_str(), |(_, op)| op);
    let told = lock(&shared.told).get(operation).cloned();
    if let Some((status, code)) = told {
        shared.counts.failed_as_told();
        read_body(req).await;
        return Ok(error_response(service, status, &code));
    }
    let req = slow_down(&shared, req).await?;
    match shared.fate() {
        Fate::Forward(delay) => {
            if let Some(delay) = delay {
                tokio::time::sleep(delay).await;
            }
            forward(shared.upstream, req).await.map_err(|e| {
                tracing::debug!(error = %e, "fault proxy cannot forward");
                e
            })
        }
        Fate::Throttle => {
            read_body(req).await;
            let code = service.throttling_error(&target);
            Ok(error_response(service, StatusCode::BAD_REQUEST, code))
        }
        Fate::ServerError => {
            read_body(req).await;
            let code = service.internal_error();
            Ok(error_response(
                service,
                StatusCode::INTERNAL_SERVER_ERROR,
                code,
            ))
        }
        Fate::Drop => {
            read_body(req).await;
            Err(NoAnswer::Dropped)
        }
        Fate::LoseResponse => {
            // Applied upstream (the server has answered: its status and
            // headers are here), never delivered. The body is not awaited:
            // an event stream's (SubscribeToShard) lasts minutes.
            let resp = forward(shared.upstream, req).await?;
            drop(resp);
            Err(NoAnswer::Dropped)
        }
    }
}

/// Waits as [`Faults::slow`] says if it matches `req` (whose body is read
/// to look, and passed on unchanged). A paused proxy forwards at once.
async fn slow_down(shared: &Shared, req: Request<Body>) -> Result<Request<Body>, NoAnswer> {
    let Some(slow) = lock(&shared.faults).slow.clone() else {
        return Ok(req);
    };
    let target = target(&req);
    let operation = target
        .rsplit_once('.')
        .map_or(target.as_str(), |(_, op)| op);
    if operation != slow.operation || shared.paused.load(Ordering::SeqCst) {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| NoAnswer::Upstream(e.to_string()))?;
    if slow.matches(operation, &body) {
        let wait = slow.wait(&mut lock(&shared.slow_rng));
        shared.counts.slowed();
        tokio::time::sleep(wait).await;
    }
    Ok(Request::from_parts(parts, Body::from(body)))
}

/// The operation a request calls, from its `x-amz-target` header (for
/// example `Kinesis_20131202.PutRecord`).
fn target<B>(req: &Request<B>) -> String {
    req.headers()
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// `req` as Kinesis answers it for a caller of another account than the
/// stream's (see [`OtherAccount`]): the request to forward (rewritten when
/// its ARN is written as the name), or the not-found answer.
async fn as_shared_stream(
    other: &OtherAccount,
    req: Request<Incoming>,
) -> Result<Result<Request<Body>, Response<Body>>, NoAnswer> {
    let target = target(&req);
    let (mut parts, body) = req.into_parts();
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .map_err(|e| NoAnswer::Upstream(e.to_string()))?;
    Ok(match other.address(&target, &body) {
        Addressed::NotFound(message) => Err(error_answer(
            AwsService::Kinesis,
            StatusCode::BAD_REQUEST,
            "ResourceNotFoundException",
            &message,
        )),
        Addressed::Forward(None) => Ok(Request::from_parts(parts, Body::from(body))),
        Addressed::Forward(Some(rewritten)) => {
            parts
                .headers
                .insert(axum::http::header::CONTENT_LENGTH, rewritten.len().into());
            Ok(Request::from_parts(parts, Body::from(rewritten)))
        }
    })
}

/// Reads the request to its end, as a server does before it answers.
async fn read_body(req: Request<Body>) {
    let _ = axum::body::to_bytes(req.into_body(), usize::MAX).await;
}

/// Sends `req` upstream on a connection of its own and streams the answer back.
async fn forward(upstream: SocketAddr, req: Request<Body>) -> Result<Response<Body>, NoAnswer> {
    let failed = |e: &dyn std::fmt::Display| NoAnswer::Upstream(e.to_string());
    let stream = TcpStream::connect(upstream).await.map_err(|e| failed(&e))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| failed(&e))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "fault proxy upstream connection ended");
        }
    });
    let (mut parts, body) = req.into_parts();
    if let Some(path) = parts.uri.path_and_query().cloned() {
        parts.uri = Uri::from(path);
    }
    let resp = sender
        .send_request(Request::from_parts(parts, body))
        .await
        .map_err(|e| failed(&e))?;
    Ok(resp.map(Body::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_loopback_upstreams_are_accepted() {
        for ok in [
            "http://127.0.0.1:4566",
            "http://[::1]:8000",
            "http://localhost:1",
        ] {
            let addr = loopback_upstream(ok).await.unwrap();
            assert!(addr.ip().is_loopback(), "{ok}");
        }
        for bad in [
            "http://192.0.2.1:80",
            "http://example.invalid:80",
            "https://127.0.0.1:443",
            "not a url",
        ] {
            assert!(loopback_upstream(bad).await.is_err(), "{bad}");
        }
    }
}
