//! The forwarding path: one request in, one hop out to the node that must
//! answer it, bytes untouched.
//!
//! 1. [`intake`] refuses what cannot be routed safely (unknown methods,
//!    client-supplied fleet metadata, bodies over the limit or naming no
//!    database, a route header that disagrees with the body), buffers the
//!    body (so it can be replayed), reads `db` from field 1, and gives a
//!    `Transact` without a request id one of the ingress's own;
//! 2. [`owner`] sends owner-dependent calls to the lease holder, retrying
//!    what is provably unsent (a typed `NotOwner`, a refused connection)
//!    and — for a `Transact` with a request id — what is ambiguous, with the
//!    same id, until the deadline; [`replica`] sends `PeerServer` reads to
//!    a read replica (the owner last); [`any`] sends the rest to a candidate
//!    or any node; a candidate lacking an encrypted database's key is
//!    passed by ([`key_refusals`]);
//! 3. [`hop`] is one attempt: the fleet metadata, the remaining deadline,
//!    and a classification of how it failed;
//! 4. [`redact`] strips a node's internal endpoints and zones from a typed
//!    `NotOwner` passed on to the client.
//!
//! Every answer the ingress makes up is one the stock clients read right
//! (`docs/design/0009-stock-client-statuses.md`).

mod any;
mod header_names;
mod hop;
mod intake;
mod key_refusals;
mod owner;
mod redact;
mod replica;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::body::Incoming;
use hyper::http::{Request, Response};

use crate::body::{Body, status_response};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::owner_cache;
use crate::route::Target;
use crate::upstream::{self, Upstream};

/// Who is on the other end of a client connection.
#[derive(Clone)]
pub(crate) struct Caller {
    /// The peer's address (open-call caps are per address, and so are rate
    /// limits of anonymous callers).
    pub ip: Option<std::net::IpAddr>,
    /// The first name of the client certificate the TLS listener verified
    /// (`--tls-client-ca`), if one was presented.
    pub certificate: Option<Arc<str>>,
    /// Calls open on the connection (its idle clock).
    pub activity: Arc<crate::connection_life::Activity>,
    /// What `Transact` calls on this connection committed, per database
    /// (read-your-writes for its `PeerServer` reads, `session.rs`).
    pub written: Arc<crate::session::Written>,
}

/// The ingress's request handler.
pub(crate) struct Proxy {
    config: Config,
    cache: owner_cache::Cache,
    upstream: Upstream,
    /// The ingress's counters, shared with the admin `/metrics` endpoint.
    pub metrics: Arc<Metrics>,
    limits: crate::limits::Limits,
    /// Retries that cost a node work, as a fraction of calls taken.
    retry_budget: crate::retry_budget::RetryBudget,
    /// Places for calls held while their database's ownership moves.
    failover: Arc<crate::failover_buffer::FailoverBuffer>,
    /// Calls open at each node, learned from its refusals.
    node_limits: crate::node_limits::NodeLimits,
    /// Placement members (static, or followed from the node registry).
    members: corium_fleet_store::registry::Members,
    /// The operator placement map (empty without `--placement-map`).
    map: corium_fleet_common::placement_map::Watched,
    next_any: AtomicUsize,
    /// Nodes whose calls recently hung: tried last by candidate routing.
    suspects: crate::suspects::Suspects,
    /// Authenticates every call with stock Corium's providers.
    guard: corium_protocol::authz::Guard,
    /// Whether the principal travels as `corium-principal` (the hop is
    /// mTLS, so the owner can tell this ingress from anyone else) instead
    /// of the client's `authorization` header, which the owner then checks
    /// itself.
    envelope: bool,
    /// `corium-principal` of the anonymous caller, encoded once.
    anonymous: hyper::http::HeaderValue,
}

impl Proxy {
    /// A handler for `config` forwarding to `members` (cold databases to
    /// their candidates, the placement `map` first), finding owners through
    /// `cache` and counting into `metrics`.
    ///
    /// # Panics
    /// Never: an encoded principal is base64, a valid header value.
    pub(crate) fn new(
        config: Config,
        members: corium_fleet_store::registry::Members,
        map: corium_fleet_common::placement_map::Watched,
        cache: owner_cache::Cache,
        guard: corium_protocol::authz::Guard,
        metrics: Arc<Metrics>,
        tls: Option<Arc<corium_fleet_common::cert_reload::Reloading<rustls::ClientConfig>>>,
    ) -> Self {
        let failover = crate::failover_buffer::FailoverBuffer::new(
            config.failover_buffer.per_database,
            config.failover_buffer.calls,
            config.failover_buffer.bytes,
        );
        // The hop speaks mTLS to `https://` members (fleet CA, this
        // ingress's client certificate, `tls`) and h2c to `http://` ones.
        let upstream = Upstream::new(upstream::Settings {
            connect_timeout: config.connect_timeout,
            tls,
            // A frozen owner (paused process, stalled VM) still accepts
            // bytes into its socket; HTTP/2 PINGs notice it within ~5 s and
            // fail what is in flight on that connection instead of letting
            // every call wait out its deadline.
            keepalive_interval: upstream::KEEPALIVE_INTERVAL,
            keepalive_timeout: upstream::KEEPALIVE_TIMEOUT,
            node_identity: config.membership.verify_node_identity.then(|| {
                let members = members.clone();
                let node_of: upstream::NodeOf = Arc::new(move |endpoint: &str| {
                    members
                        .get()
                        .iter()
                        .find(|member| member.endpoint == endpoint)
                        .map(|member| member.node_id.clone())
                });
                node_of
            }),
        });
        let limits = crate::limits::Limits::new(
            config.max_concurrent_requests,
            config.max_streams_per_client,
            config.rate_limit_per_client,
        );
        let retry_budget = crate::retry_budget::RetryBudget::new(
            config.retry_budget.ratio,
            config.retry_budget.min_per_second,
        );
        let node_limits = crate::node_limits::NodeLimits::new(config.adaptive_node_limit);
        let envelope = config.upstream.is_some();
        #[allow(
            clippy::expect_used,
            reason = "the envelope is URL-safe base64, always a valid header value"
        )]
        let anonymous = hyper::http::HeaderValue::from_str(&corium_fleet_common::auth::encode(
            &corium_protocol::authz::Principal::anonymous(),
        ))
        .expect("base64 is a valid header value");
        Self {
            guard,
            envelope,
            anonymous,
            config,
            cache,
            upstream,
            metrics,
            limits,
            retry_budget,
            failover,
            node_limits,
            members,
            map,
            next_any: AtomicUsize::new(0),
            suspects: crate::suspects::Suspects::default(),
        }
    }

    /// The places for calls held while their database's ownership moves
    /// (its `/metrics`).
    #[must_use]
    pub(crate) fn failover_buffer(&self) -> Arc<crate::failover_buffer::FailoverBuffer> {
        Arc::clone(&self.failover)
    }

    /// Serves one request from `client`; every failure is a gRPC status.
    ///
    /// # Errors
    /// Never: the error type is [`Infallible`](std::convert::Infallible),
    /// as a hyper service needs a `Result`.
    pub(crate) async fn handle(
        self: Arc<Self>,
        client: Caller,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, std::convert::Infallible> {
        use tracing::Instrument as _;
        // One span per call: its method, correlation id and database (so
        // every log line of the call names them), a child of the trace
        // context the client sent.
        let span = tracing::info_span!(
            "forward",
            method = request.uri().path(),
            x_request_id = tracing::field::Empty,
            db = tracing::field::Empty,
        );
        if corium_fleet_common::telemetry::exporting() {
            corium_fleet_common::telemetry::propagation::adopt(&span, request.headers());
        }
        let call = self.metrics.calls.begin(request.uri().path());
        // Boxed: the call's future is large, and hyper moves the future it
        // is given several times before it first runs (memcpy was 11 % of
        // the ingress's instructions per call, design note 0018).
        let response = Box::pin(self.serve(client, request)).instrument(span).await?;
        // Counted by method and status when the status passes: now for a
        // trailers-only answer, else at the end of the body.
        Ok(
            match corium_fleet_common::metrics::calls::code_of(response.headers()) {
                Some(code) => {
                    call.end(code);
                    response
                }
                None => response.map(|body| {
                    http_body_util::BodyExt::boxed_unsync(corium_fleet_common::metrics::calls::Observed::new(
                        body, call,
                    ))
                }),
            },
        )
    }

    async fn serve(
        self: Arc<Self>,
        client: Caller,
        request: Request<Incoming>,
    ) -> Result<Response<Body>, std::convert::Infallible> {
        let open_call = client.activity.call();
        let subscribe = crate::route::is_subscribe(request.uri().path());
        let mut admitted = match self.limits.admit(client.ip) {
            Ok(admission) => admission,
            Err(status) => {
                self.metrics.rejected_limit.fetch_add(1, Ordering::Relaxed);
                return Ok(status_response(&status));
            }
        };
        self.retry_budget.deposit();
        let started = std::time::Instant::now();
        let response = match self.intake(request, &client).await {
            Ok(call) => {
                let response = match (call.target, call.db.clone()) {
                    // A saga branch's calls go to its database's owner,
                    // which hosts the branch (`names::home`).
                    (Target::Owner, Some(db)) => {
                        self.to_owner(&call, corium_fleet_common::names::home(&db)).await
                    }
                    (Target::Candidate, Some(db)) => self.to_candidates(&call, &db).await,
                    (Target::Replica, Some(db)) => self.to_replicas(&call, &db).await,
                    _ => self.to_any(&call, &self.any_hops()).await,
                };
                self.metrics.forward_seconds.observe(started.elapsed());
                let mut response = response.unwrap_or_else(|status| status_response(&status));
                redact::not_owner(&mut response);
                call.stamp(&mut response);
                if let Some(db) = &call.db
                    && let Some(basis) = response
                        .headers()
                        .get(&header_names::BASIS_T)
                        .and_then(|value| value.to_str().ok()?.parse().ok())
                {
                    client.written.record(corium_fleet_common::names::home(db), basis);
                }
                tracing::debug!(
                    elapsed_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                    "answered"
                );
                response
            }
            Err(status) => status_response(&status),
        };
        // The concurrency slot is held until the response headers: a long
        // stream does not hold one for its whole life. The client's
        // open-call place and its connection's activity live with the body.
        let stream = admitted.stream.take();
        drop(admitted);
        // A subscription ends first when its connection leaves (age,
        // shutdown): the client resumes it on a new connection.
        let response = if subscribe {
            let leaving = client.activity.leaving();
            response.map(|body| crate::leaving::watched(body, leaving))
        } else {
            response
        };
        Ok(crate::body::holding(response, (stream, open_call)))
    }

    /// Counts a refusal in `counter` and returns its status.
    fn reject(counter: &std::sync::atomic::AtomicU64, status: tonic::Status) -> tonic::Status {
        counter.fetch_add(1, Ordering::Relaxed);
        status
    }
}
