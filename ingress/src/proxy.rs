//! The forwarding path: one request in, at most one hop out (plus one retry
//! after a typed `NotOwner` or a proven connect failure), bytes untouched.
//!
//! 1. Refuse what cannot be routed safely: unknown methods, client-supplied
//!    fleet metadata (`corium-hop`, `corium-principal`,
//!    `corium-lease-version`), bodies over the limit, bodies that name no
//!    database, a route header that disagrees with the body.
//! 2. Buffer the body (so it can be replayed), read `db` from field 1.
//! 3. Resolve the target: the cached lease holder, else the database's
//!    candidates in rank order (activation), else any node.
//! 4. Forward with `corium-hop: 1`, the routed `corium-lease-version` and the
//!    remaining `grpc-timeout`; the owner decides before sending anything,
//!    so a `NotOwner` arrives as a trailers-only response and the request can
//!    be retried once against the hinted owner. A connect failure is proven
//!    pre-acceptance and moves to the next node; a failure after sending is
//!    ambiguous and is returned as `UNAVAILABLE`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corium_fleet_common::metadata;
use corium_fleet_common::not_owner;
use corium_fleet_common::placement::Member;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::http::{HeaderValue, Request, Response, Uri};
use tonic::Status;

use crate::config::Config;
use crate::metrics::Metrics;
use crate::owner_cache::{self, Resolution};
use crate::route::{self, Target};
use crate::upstream::{self, Upstream};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The response body: the owner's bytes, streamed through.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// Where one attempt goes.
#[derive(Clone, Debug)]
struct Hop {
    endpoint: String,
    /// The lease version routed on (owner hops only).
    lease_version: Option<u64>,
}

/// How one attempt failed.
enum SendError {
    /// Never reached the node: safe to try another.
    Connect(String),
    /// Sent; the outcome is unknown.
    Ambiguous(String),
    /// The deadline passed before the response headers.
    Deadline,
}

/// The ingress's request handler.
pub struct Proxy {
    config: Config,
    cache: owner_cache::Cache,
    upstream: Upstream,
    pub metrics: Arc<Metrics>,
    limits: crate::limits::Limits,
    /// Placement members (static, or followed from the node registry).
    members: corium_fleet_transactor::registry::Members,
    /// The operator placement map (empty without `--placement-map`).
    map: corium_fleet_common::placement_map::Watched,
    next_any: AtomicUsize,
    /// Nodes whose calls recently hung: tried last by candidate routing.
    suspects: crate::suspects::Suspects,
}

/// A gRPC error as a trailers-only HTTP response.
#[must_use]
pub fn status_response(status: &Status) -> Response<Body> {
    status.clone().into_http::<Body>()
}

/// `grpc-timeout` → duration (`<digits><H|M|S|m|u|n>`).
fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?;
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount.saturating_mul(3600)),
        "M" => Duration::from_secs(amount.saturating_mul(60)),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
}

impl Proxy {
    /// # Errors
    /// Unreadable or invalid upstream TLS material.
    pub fn new(
        config: Config,
        members: corium_fleet_transactor::registry::Members,
        map: corium_fleet_common::placement_map::Watched,
        cache: owner_cache::Cache,
        metrics: Arc<Metrics>,
    ) -> Result<Self, String> {
        // The hop speaks mTLS to `https://` members (fleet CA, this
        // ingress's client certificate) and h2c to `http://` ones.
        let tls = match &config.upstream {
            Some((ca, identity)) => Some(Arc::new(
                corium_fleet_common::tls::client_config(ca, &identity.cert, &identity.key)
                    .map_err(|error| format!("upstream TLS: {error}"))?,
            )),
            None => None,
        };
        let upstream = Upstream::new(upstream::Settings {
            connect_timeout: config.connect_timeout,
            tls,
            // A frozen owner (paused process, stalled VM) still accepts
            // bytes into its socket; HTTP/2 PINGs notice it within ~5 s and
            // fail what is in flight on that connection instead of letting
            // every call wait out its deadline.
            keepalive_interval: upstream::KEEPALIVE_INTERVAL,
            keepalive_timeout: upstream::KEEPALIVE_TIMEOUT,
        });
        let limits = crate::limits::Limits::new(config.max_concurrent_requests, config.rate_limit_per_client);
        Ok(Self {
            config,
            cache,
            upstream,
            metrics,
            limits,
            members,
            map,
            next_any: AtomicUsize::new(0),
            suspects: crate::suspects::Suspects::default(),
        })
    }

    /// Serves one request from `client`; every failure is a gRPC status.
    pub async fn handle(
        self: Arc<Self>,
        client: Option<std::net::IpAddr>,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, std::convert::Infallible> {
        let admitted = match self.limits.admit(client) {
            Ok(admission) => admission,
            Err(status) => {
                self.metrics.rejected_limit.fetch_add(1, Ordering::Relaxed);
                return Ok(status_response(&status));
            }
        };
        let response = self
            .route(request)
            .await
            .unwrap_or_else(|status| status_response(&status));
        // The slot is held until the response headers: a long stream does
        // not hold a slot for its whole life.
        drop(admitted);
        Ok(response)
    }

    fn reject(&self, counter: &std::sync::atomic::AtomicU64, status: Status) -> Status {
        counter.fetch_add(1, Ordering::Relaxed);
        status
    }

    async fn route(&self, request: Request<Incoming>) -> Result<Response<Body>, Status> {
        let started = Instant::now();
        let path = request.uri().path().to_owned();
        let Some((target, names_db)) = route::classify(&path) else {
            return Err(self.reject(
                &self.metrics.rejected_unknown_method,
                Status::unimplemented(format!("method {path} is not served by Corium Fleet")),
            ));
        };
        for key in [metadata::HOP, metadata::PRINCIPAL, metadata::LEASE_VERSION] {
            if request.headers().contains_key(key) {
                return Err(self.reject(
                    &self.metrics.loop_preventions,
                    Status::invalid_argument(format!("{key} is set by the fleet, never by a client")),
                ));
            }
        }
        let (parts, body) = request.into_parts();
        let deadline = started
            + parts.headers.get("grpc-timeout").and_then(parse_timeout).map_or(
                self.config.max_deadline,
                |timeout| {
                    // Answer a little before the caller gives up, so the
                    // caller gets this ingress's status (and the ingress
                    // learns the node was slow) rather than a cancellation.
                    let margin = (timeout / 20).min(Duration::from_millis(50));
                    timeout.min(self.config.max_deadline).saturating_sub(margin)
                },
            );
        // The body arrives within the call's deadline, or not at all.
        let collect = Limited::new(body, self.config.max_request_bytes).collect();
        let Ok(collected) =
            tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), collect).await
        else {
            return Err(Status::deadline_exceeded(
                "the request body did not arrive within the deadline",
            ));
        };
        let body = match collected {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                return Err(self.reject(
                    &self.metrics.rejected_too_large,
                    Status::resource_exhausted(format!(
                        "request body is over the ingress limit of {} bytes",
                        self.config.max_request_bytes
                    )),
                ));
            }
            Err(error) => return Err(Status::cancelled(format!("request body not received: {error}"))),
        };
        let db = if names_db {
            let db = route::first_message(&body)
                .and_then(route::scan_db)
                .map_err(|error| {
                    self.reject(
                        &self.metrics.rejected_unroutable,
                        Status::invalid_argument(error.to_string()),
                    )
                })?;
            if let Some(route) = parts.headers.get(metadata::DATABASE_ROUTE)
                && route.as_bytes() != db.as_bytes()
            {
                return Err(self.reject(
                    &self.metrics.rejected_route_mismatch,
                    Status::invalid_argument(format!(
                        "{} {:?} does not match the request's database {db:?}; the body is authoritative",
                        metadata::DATABASE_ROUTE,
                        String::from_utf8_lossy(route.as_bytes())
                    )),
                ));
            }
            Some(db)
        } else {
            None
        };
        let response = match (target, db.as_deref()) {
            (Target::Owner, Some(db)) => {
                // A `Transact` with a request id is idempotent at the owner:
                // an ambiguous failure may be retried (same id, same bytes).
                let idempotent = path == "/corium.v1.Transactor/Transact"
                    && parts.headers.contains_key(metadata::REQUEST_ID);
                self.to_owner(&parts, &body, db, deadline, idempotent).await
            }
            (Target::Candidate, Some(db)) => {
                self.to_any(&parts, &body, &self.candidate_hops(db), deadline)
                    .await
            }
            _ => {
                let hops = self.any_hops();
                self.to_any(&parts, &body, &hops, deadline).await
            }
        };
        self.metrics.forward_seconds.observe(started.elapsed());
        response
    }

    fn candidate_hops(&self, db: &str) -> Vec<Hop> {
        let hops: Vec<Hop> = corium_fleet_common::placement_map::candidates(
            db,
            &self.members.get(),
            self.config.replicas,
            &self.map.get(),
        )
        .into_iter()
        .map(|member: &Member| Hop {
            endpoint: member.endpoint.clone(),
            lease_version: None,
        })
        .collect();
        self.suspects.order(hops, |hop: &Hop| hop.endpoint.as_str())
    }

    /// Every member, starting at a rotating offset.
    fn any_hops(&self) -> Vec<Hop> {
        let members = self.members.get();
        if members.is_empty() {
            return Vec::new();
        }
        let start = self.next_any.fetch_add(1, Ordering::Relaxed) % members.len();
        let hops: Vec<Hop> = members
            .iter()
            .cycle()
            .skip(start)
            .take(members.len())
            .map(|member| Hop {
                endpoint: member.endpoint.clone(),
                lease_version: None,
            })
            .collect();
        self.suspects.order(hops, |hop: &Hop| hop.endpoint.as_str())
    }

    /// Tries `hops` in order, moving on only after a proven connect failure.
    async fn to_any(
        &self,
        parts: &Parts,
        body: &Bytes,
        hops: &[Hop],
        deadline: Instant,
    ) -> Result<Response<Body>, Status> {
        let mut last = String::from("no node configured");
        for hop in hops {
            match self.send(parts, body, hop, deadline).await {
                Ok(response) => return Ok(response),
                Err(SendError::Connect(error)) => {
                    self.metrics.connect_retries.fetch_add(1, Ordering::Relaxed);
                    last = error;
                }
                Err(error) => return Err(self.failure(error)),
            }
        }
        Err(Status::unavailable(format!(
            "cannot connect to any transactor: {last}"
        )))
    }

    async fn hops_for(&self, db: &str) -> Result<Vec<Hop>, Status> {
        match self.cache.resolve(db).await {
            Ok(Resolution::Owned(owner)) => Ok(vec![Hop {
                endpoint: owner.endpoint,
                // 0: a hint without a version (a handoff target); the owner
                // then checks only that it holds the lease.
                lease_version: (owner.lease_version > 0).then_some(owner.lease_version),
            }]),
            Ok(Resolution::NoLiveOwner) => Ok(self.candidate_hops(db)),
            Ok(Resolution::Unknown) => Err(Status::not_found(format!("unknown database {db:?}"))),
            Err(error) => Err(Status::unavailable(format!("{error}; retry later"))),
        }
    }

    /// To the lease holder. Retried once (the body is buffered, so the retry
    /// replays exactly the same bytes) after a typed `NotOwner` — learning
    /// the hinted owner — or after every target refused the connection —
    /// re-reading the owner from storage. Nothing is retried once a node may
    /// have accepted the request, unless it is `idempotent` (a `Transact`
    /// carrying `corium-request-id`, which the owner commits at most once):
    /// then an ambiguous failure is retried once after re-resolving the owner.
    async fn to_owner(
        &self,
        parts: &Parts,
        body: &Bytes,
        db: &str,
        deadline: Instant,
        idempotent: bool,
    ) -> Result<Response<Body>, Status> {
        let mut retried = false;
        // Set by a `NotOwner` that names no owner but lists candidates (a
        // node that is not one of them answered): the retry goes there.
        let mut hinted: Option<Vec<Hop>> = None;
        loop {
            let hops = match hinted.take() {
                Some(hops) => hops,
                None => self.hops_for(db).await?,
            };
            let mut connect_error = String::new();
            let mut answered = None;
            let mut ambiguous = None;
            for hop in &hops {
                match self.send(parts, body, hop, deadline).await {
                    Ok(response) => {
                        answered = Some(response);
                        break;
                    }
                    Err(SendError::Connect(error)) => connect_error = error,
                    Err(SendError::Ambiguous(error)) if idempotent && !retried => {
                        ambiguous = Some(error);
                        break;
                    }
                    Err(error) => {
                        // The holder did not answer in time (frozen, stalled):
                        // forget it, so the next call reads the lease again
                        // and, once it lapsed, goes to the candidates (where
                        // the node is now tried last) instead of into the
                        // same node until the cache entry expires.
                        if matches!(error, SendError::Deadline) {
                            self.cache.invalidate(db).await;
                        }
                        return Err(self.failure(error));
                    }
                }
            }
            if let Some(error) = ambiguous {
                // The owner may have committed; the request id makes the
                // retry safe. Look the owner up again and send once more.
                tracing::info!(db, %error, "ambiguous failure of an idempotent transaction; retrying once");
                self.cache.invalidate(db).await;
                self.metrics.ambiguous_retries.fetch_add(1, Ordering::Relaxed);
                retried = true;
                continue;
            }
            match answered {
                None => {
                    // Every target refused the connection: the cached owner
                    // may be gone. Forget it and look again, once.
                    self.cache.invalidate(db).await;
                    if retried {
                        return Err(Status::unavailable(format!(
                            "cannot connect to the owner of {db:?}: {connect_error}; retry"
                        )));
                    }
                    self.metrics.connect_retries.fetch_add(1, Ordering::Relaxed);
                }
                Some(response) => {
                    let Some(hint) = Self::not_owner(&response) else {
                        return Ok(response);
                    };
                    self.cache.learn(&hint).await;
                    if retried || !hint.retryable {
                        return Ok(response);
                    }
                    if hint.owner_id.is_empty() && !hint.candidates.is_empty() {
                        hinted = Some(
                            hint.candidates
                                .iter()
                                .map(|candidate| Hop {
                                    endpoint: candidate.endpoint.clone(),
                                    lease_version: None,
                                })
                                .collect(),
                        );
                    }
                    self.metrics.not_owner_retries.fetch_add(1, Ordering::Relaxed);
                }
            }
            retried = true;
        }
    }

    /// The typed `NotOwner` of a trailers-only response, if it is one.
    fn not_owner(response: &Response<Body>) -> Option<not_owner::NotOwner> {
        let status = Status::from_header_map(response.headers())?;
        not_owner::from_status(&status)
    }

    /// Marks a node whose call hung or broke after sending.
    /// (Also called by [`SlowGuard`] when a caller cancels a long wait.)
    fn suspect(&self, endpoint: &str) {
        self.suspects.mark(endpoint);
        self.metrics.suspect_marks.fetch_add(1, Ordering::Relaxed);
    }

    fn failure(&self, error: SendError) -> Status {
        match error {
            SendError::Connect(error) => {
                Status::unavailable(format!("cannot connect to a transactor: {error}"))
            }
            SendError::Ambiguous(error) => {
                self.metrics.ambiguous_failures.fetch_add(1, Ordering::Relaxed);
                Status::unavailable(format!(
                    "connection to the transactor lost after the request was sent; the outcome is unknown: {error}"
                ))
            }
            SendError::Deadline => {
                Status::deadline_exceeded("deadline passed before the transactor answered")
            }
        }
    }

    async fn send(
        &self,
        parts: &Parts,
        body: &Bytes,
        hop: &Hop,
        deadline: Instant,
    ) -> Result<Response<Body>, SendError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(SendError::Deadline);
        }
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let uri: Uri = format!("{}{path}", hop.endpoint.trim_end_matches('/'))
            .parse()
            .map_err(|error| SendError::Connect(format!("bad endpoint {:?}: {error}", hop.endpoint)))?;
        let mut request = Request::new(());
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        headers.reserve(parts.headers.len() + 4);
        for (name, value) in &parts.headers {
            if forwarded(name, value) {
                headers.append(name, value.clone());
            }
        }
        headers.insert(metadata::HOP, HeaderValue::from_static("1"));
        // One correlation id across client, ingress and owner: the client's,
        // or one made here.
        if !headers.contains_key(metadata::X_REQUEST_ID) {
            headers.insert(
                metadata::X_REQUEST_ID,
                HeaderValue::from_str(&correlation_id()).expect("hex digits"),
            );
        }
        if let Some(version) = hop.lease_version {
            headers.insert(metadata::LEASE_VERSION, HeaderValue::from(version));
        }
        let millis = remaining.as_millis().clamp(1, 99_999_999);
        headers.insert(
            "grpc-timeout",
            HeaderValue::from_str(&format!("{millis}m")).expect("ascii digits"),
        );
        self.metrics.forwarded.fetch_add(1, Ordering::Relaxed);
        // If the caller goes away while this node keeps us waiting, that
        // still counts against the node (see `SlowGuard`).
        let mut waiting = SlowGuard {
            proxy: self,
            endpoint: &hop.endpoint,
            since: Instant::now(),
            armed: true,
        };
        let outcome = tokio::time::timeout(
            remaining,
            self.upstream.send(&hop.endpoint, request, body.clone()),
        )
        .await;
        waiting.armed = false;
        match outcome {
            Err(_) => {
                self.suspect(&hop.endpoint);
                Err(SendError::Deadline)
            }
            Ok(Err(upstream::Failure::Connect(error))) => Err(SendError::Connect(error)),
            Ok(Err(upstream::Failure::Ambiguous(error))) => {
                self.suspect(&hop.endpoint);
                Err(SendError::Ambiguous(error))
            }
            Ok(Ok(response)) => {
                self.suspects.clear(&hop.endpoint);
                Ok(response.map(crate::stream_end::StreamEnd::boxed))
            }
        }
    }
}

/// Whether a client's header goes on to the node: not `host` (the hop
/// sets `:authority`), not `grpc-timeout` (replaced by the remaining
/// deadline), and none of the connection-specific headers HTTP/2 forbids
/// (RFC 9113 §8.2.2; `te` only as `trailers`).
fn forwarded(name: &hyper::http::HeaderName, value: &HeaderValue) -> bool {
    use hyper::header;
    match *name {
        header::HOST | header::CONNECTION | header::TRANSFER_ENCODING | header::UPGRADE => false,
        header::TE => value == "trailers",
        _ => name != "grpc-timeout" && name != "keep-alive" && name != "proxy-connection",
    }
}

/// A correlation id for a call that arrived without `x-request-id`: 32 hex
/// digits, a random prefix drawn once per process and a counter. Unique is
/// all it needs to be; a fresh UUID per call cost a `getrandom` system call
/// on every forward (seen with `strace -c` at concurrency 1).
fn correlation_id() -> String {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    format!("{prefix:016x}{:016x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Marks a node suspect when the call waiting on it is dropped (the caller
/// cancelled) after waiting longer than [`SLOW`] for response headers.
struct SlowGuard<'a> {
    proxy: &'a Proxy,
    endpoint: &'a str,
    since: Instant,
    armed: bool,
}

/// A wait for response headers this long, abandoned, marks the node.
const SLOW: Duration = Duration::from_secs(1);

impl Drop for SlowGuard<'_> {
    fn drop(&mut self) {
        if self.armed && self.since.elapsed() >= SLOW {
            self.proxy.suspect(self.endpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_ids_are_unique_hex_of_one_length() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| correlation_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn forwards_end_to_end_headers_only() {
        let forwards = |name: &'static str, value: &'static str| {
            forwarded(
                &hyper::http::HeaderName::from_static(name),
                &HeaderValue::from_static(value),
            )
        };
        assert!(forwards("corium-request-id", "r1"));
        assert!(forwards("content-type", "application/grpc"));
        assert!(forwards("te", "trailers"));
        assert!(!forwards("te", "gzip"));
        assert!(!forwards("host", "fleet"));
        assert!(!forwards("grpc-timeout", "5S"));
        assert!(!forwards("connection", "close"));
        assert!(!forwards("keep-alive", "5"));
        assert!(!forwards("transfer-encoding", "chunked"));
    }

    #[test]
    fn parses_grpc_timeouts() {
        let parse = |text: &'static str| parse_timeout(&HeaderValue::from_static(text));
        assert_eq!(parse("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse("x"), None);
        assert_eq!(parse("10"), None);
        assert_eq!(parse(""), None);
    }
}
