//! Taking a call in: refusals, the buffered body, the database it names, its
//! deadline, and the request id a `Transact` travels under.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use corium_fleet_common::settings::GRPC_FRAME_HEADER;
use corium_fleet_wire::metadata;
use http_body_util::{BodyExt as _, Limited};
use hyper::body::Incoming;
use hyper::http::request::Parts;
use hyper::http::{HeaderValue, Request, Response};
use tonic::Status;

use super::Proxy;
use super::header_names::{self as names, FLEET_ONLY};
use crate::body::Body;
use crate::route::{self, Target};

/// The provider name of a principal vouched for by a client certificate
/// the TLS listener verified (`--tls-client-ca`).
pub(super) const CLIENT_CERT_PROVIDER: &str = "client-cert";

/// How long a refused call's body may take to finish arriving.
const DRAIN_FOR: Duration = Duration::from_millis(250);

/// The path of `corium.v1.Transactor/Transact`.
pub(super) const TRANSACT: &str = "/corium.v1.Transactor/Transact";
/// A thin client's `Transact` (`corium.v1.PeerServer`): the same request,
/// the same exactly-once path at the owner.
pub(super) const PEER_TRANSACT: &str = "/corium.v1.PeerServer/Transact";

/// The request id a `Transact` is forwarded under.
#[derive(Clone, Debug, Eq, PartialEq)]
pub(super) struct RequestId {
    /// UUID text.
    pub text: String,
    /// This ingress assigned it (the client sent none): it is sent with
    /// `corium-request-id-origin: ingress` and dropped if the database
    /// cannot take one.
    pub assigned: bool,
}

/// One call, taken in.
pub(super) struct Call {
    /// The request head: method, path and the client's headers (with an
    /// `x-request-id` added when it had none).
    pub parts: Parts,
    /// The whole request body, replayable.
    pub body: Bytes,
    /// Where the call goes, from its method.
    pub target: Target,
    /// The database the body names (`None` for calls that name none).
    pub db: Option<String>,
    /// When the answer is due: the client's `grpc-timeout` (less a margin),
    /// at most `--max-deadline-ms`.
    pub deadline: Instant,
    /// `Transact` only: the id the owner commits it under at most once.
    pub request_id: Option<RequestId>,
}

impl Call {
    /// Tells the client the request id its `Transact` was forwarded under
    /// (`corium-request-id` on the response), so an unknown outcome can be
    /// asked about.
    pub(super) fn stamp(&self, response: &mut Response<Body>) {
        if let Some(id) = &self.request_id
            && let Ok(value) = HeaderValue::from_str(&id.text)
        {
            response.headers_mut().insert(names::REQUEST_ID.clone(), value);
        }
        // The correlation id goes back too, so a client can quote it.
        if let Some(correlation) = self.parts.headers.get(&names::X_REQUEST_ID) {
            response
                .headers_mut()
                .insert(names::X_REQUEST_ID.clone(), correlation.clone());
        }
    }
}

/// `grpc-timeout` → duration (`<digits><H|M|S|m|u|n>`).
pub(super) fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    metadata::grpc_timeout(value.to_str().ok()?)
}

/// A UUID no other call of this process or (but for 64 random bits drawn
/// alike) of another process gets: a random half drawn once per process and
/// a counter. Unique is all a correlation id needs to be (it names a call in
/// logs and is no credential); a fresh random UUID per call cost a
/// `getrandom` system call on every forward (seen with `strace -c` at
/// concurrency 1). Never a request id: a counter is predictable.
fn unique_id() -> uuid::Uuid {
    static PREFIX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    uuid::Uuid::from_u64_pair(prefix, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A request id for a call that arrived without one: a time-ordered UUID
/// (version 7) of this call alone — its first 48 bits the time in
/// milliseconds, 74 of the rest random — unrelated to the correlation id or
/// any other id this ingress hands out. A request id is a capability:
/// whoever knows it can fence it (`Requests.Status`) or claim it first, so
/// the next one must not be guessable from any answer; 74 random bits are
/// 2^74 guesses, and an id is its principal's (design note 0019). The time
/// lets the owner tell an id older than its retention window, whose record
/// may be gone, from one never used (`--request-id-retention-secs`, design
/// note 0021), instead of guessing "not committed".
///
/// Drawn from `rand`'s `ThreadRng`: `ChaCha12` seeded from the operating
/// system and reseeded from it every 64 KiB of output, a CSPRNG kept per
/// thread. Not `uuid`'s own generators: the workspace's `uuid` has no
/// `fast-rng`, so they make a `getrandom` system call for every id.
/// Measured on one x86-64 core (release, a million ids): `new_v4` 428 ns an
/// id (68 user-space instructions, the rest in the kernel), `ThreadRng` 44
/// ns (341 instructions, a `ChaCha` block amortized over four ids): a tenth
/// of the time, and under 0.3 % of the ~122,000 instructions a forwarded
/// call costs (`scripts/bench/instructions.sh`, which counts user space
/// only).
fn assigned_request_id() -> String {
    let random: [u8; 10] = rand::random();
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
    uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// A correlation id for a call that arrived without `x-request-id`: 32 hex
/// digits. Marked sensitive: a value used once is sent as a never-indexed
/// HPACK literal instead of filling the hop's and the client's header
/// tables.
fn correlation_id() -> HeaderValue {
    let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
    #[allow(
        clippy::expect_used,
        reason = "lowercase hex digits are always a valid header value"
    )]
    let mut value = HeaderValue::from_str(unique_id().simple().encode_lower(&mut hex)).expect("hex digits");
    value.set_sensitive(true);
    value
}

/// A body's chunks as they arrive: the usual one-chunk body is kept as it
/// is (no copy); more chunks are joined.
#[derive(Default)]
enum Collected {
    #[default]
    Empty,
    One(Bytes),
    Many(bytes::BytesMut),
}

impl Collected {
    fn push(&mut self, data: Bytes) {
        *self = match std::mem::take(self) {
            Self::Empty => Self::One(data),
            Self::One(first) => {
                let mut joined = bytes::BytesMut::with_capacity(first.len() + data.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
                Self::Many(joined)
            }
            Self::Many(mut joined) => {
                joined.extend_from_slice(&data);
                Self::Many(joined)
            }
        };
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Self::Empty => Bytes::new(),
            Self::One(data) => data,
            Self::Many(joined) => joined.freeze(),
        }
    }
}

impl Proxy {
    /// Takes `request` in, or refuses it with the status the client gets.
    pub(super) async fn intake(
        &self,
        request: Request<Incoming>,
        caller: &super::Caller,
    ) -> Result<Call, Status> {
        let started = Instant::now();
        let (mut parts, body) = request.into_parts();
        let (target, db_field, transact) = match self.head(&mut parts, caller) {
            Ok(head) => head,
            Err(status) => {
                self.drain(body).await;
                return Err(status);
            }
        };
        // One correlation id across client, ingress, owner and every
        // attempt of the call: the client's, or one made here.
        if !parts.headers.contains_key(&names::X_REQUEST_ID) {
            parts
                .headers
                .insert(names::X_REQUEST_ID.clone(), correlation_id());
        }
        if let Some(correlation) = parts
            .headers
            .get(&names::X_REQUEST_ID)
            .and_then(|value| value.to_str().ok())
        {
            tracing::Span::current().record("x_request_id", correlation);
        }
        let deadline = self.deadline(&parts, started);
        let body = self.body(body, deadline).await?;
        let db = if db_field == route::DbField::None {
            None
        } else {
            let db = self.routed_db(&parts, &body, db_field)?;
            tracing::Span::current().record("db", db.as_str());
            Some(db)
        };
        // A read on this connection waits for the connection's own writes
        // (`session.rs`), unless the client named a basis itself.
        if target == route::Target::Replica
            && !parts.headers.contains_key(&names::MIN_BASIS)
            && let Some(basis) = db
                .as_deref()
                .and_then(|db| caller.written.get(corium_fleet_common::names::home(db)))
        {
            parts
                .headers
                .insert(names::MIN_BASIS.clone(), HeaderValue::from(basis));
        }
        // A saga step (a `Transact` on a branch) takes no request id of
        // this ingress's: the owner records ids in a database, not in a
        // branch (a client's own id is refused there, typed).
        let on_branch = db
            .as_deref()
            .is_some_and(|db| corium_fleet_common::names::home(db) != db);
        let request_id = if transact && !on_branch {
            self.request_id(&parts)
        } else {
            None
        };
        Ok(Call {
            parts,
            body,
            target,
            db,
            deadline,
            request_id,
        })
    }

    /// The checks a call's head must pass before its body is read: a method
    /// the fleet serves, no fleet-only metadata, a caller stock Corium would
    /// accept, within its rate. Returns where it goes, where its database
    /// is named, and whether it is a `Transact`.
    fn head(
        &self,
        parts: &mut Parts,
        caller: &super::Caller,
    ) -> Result<(Target, route::DbField, bool), Status> {
        let path = parts.uri.path();
        let Some((target, db_field)) = route::classify(path) else {
            return Err(Self::reject(
                &self.metrics.rejected_unknown_method,
                Status::unimplemented(format!("method {path} is not served by Corium Fleet")),
            ));
        };
        let transact = path == TRANSACT || path == PEER_TRANSACT;
        for key in FLEET_ONLY {
            if parts.headers.contains_key(key) {
                return Err(Self::reject(
                    &self.metrics.loop_preventions,
                    Status::invalid_argument(format!("{key} is set by the fleet, never by a client")),
                ));
            }
        }
        let client = self.authenticate(&mut parts.headers, caller)?;
        // The rate counts against the principal, once it is known (an
        // anonymous caller is its address).
        if let Some(client) = client {
            self.limits.rate(&client).inspect_err(|_| {
                self.metrics.rejected_limit.fetch_add(1, Ordering::Relaxed);
            })?;
        }
        Ok((target, db_field, transact))
    }

    /// Lets the rest of a refused call's body arrive (discarded; at most
    /// [`DRAIN_FOR`] and the body limit) before the refusal is sent. An
    /// answer sent while the client is still sending ends the stream with
    /// `RST_STREAM(NO_ERROR)` after it (RFC 9113 §8.1), and curl 7.88 then
    /// drops the answer: 30 of 200 unauthenticated `curl` calls saw no
    /// `grpc-status` once calls ran in their connection's task and answered
    /// sooner (2 of 200 before). The call keeps its places while it waits;
    /// the bound keeps a refused caller from holding them longer than that.
    async fn drain(&self, body: Incoming) {
        let mut body = Limited::new(body, self.config.max_request_bytes + GRPC_FRAME_HEADER);
        let _ =
            tokio::time::timeout(DRAIN_FOR, async { while let Some(Ok(_)) = body.frame().await {} }).await;
    }

    /// Who the caller is, by stock Corium's rules; refuses `UNAUTHENTICATED`
    /// where a credential is required and missing or wrong. Over an mTLS hop
    /// the bearer token stops here and the principal travels instead.
    /// Returns whom the per-client rate counts against (`None` without one,
    /// or when no rate is set).
    fn authenticate(
        &self,
        headers: &mut hyper::http::HeaderMap,
        caller: &super::Caller,
    ) -> Result<Option<crate::limits::ClientKey>, Status> {
        let certificate = caller.certificate.as_deref();
        let authorization = headers.get(hyper::http::header::AUTHORIZATION);
        let credentials = corium_fleet_common::auth::bearer(authorization.map(HeaderValue::as_bytes));
        let principal = match certificate {
            // A verified client certificate is a credential of its own when
            // no token is presented (a token, when sent, decides).
            Some(name) if credentials.bearer.is_none() && !self.guard.is_disabled() => {
                corium_protocol::authz::Principal::new(CLIENT_CERT_PROVIDER, name)
            }
            _ => self
                .guard
                .authenticate(&credentials)
                .map_err(|error| Self::reject(&self.metrics.rejected_unauthenticated, error.to_status()))?,
        };
        if self.envelope {
            headers.remove(hyper::http::header::AUTHORIZATION);
            #[allow(
                clippy::expect_used,
                reason = "the envelope is URL-safe base64, always a valid header value"
            )]
            let value = if principal.is_anonymous() {
                self.anonymous.clone()
            } else {
                HeaderValue::from_str(&corium_fleet_common::auth::encode(&principal))
                    .expect("base64 is a valid header value")
            };
            headers.insert(names::PRINCIPAL.clone(), value);
        }
        Ok(if !self.limits.rates() {
            None
        } else if principal.is_anonymous() {
            caller.ip.map(crate::limits::ClientKey::Address)
        } else {
            Some(crate::limits::ClientKey::Principal(
                format!("{}:{}", principal.provider, principal.subject).into(),
            ))
        })
    }

    /// When the answer to a call that arrived at `started` is due: the
    /// client's `grpc-timeout` less a margin, at most `--max-deadline-ms`.
    fn deadline(&self, parts: &Parts, started: Instant) -> Instant {
        started
            + parts.headers.get("grpc-timeout").and_then(parse_timeout).map_or(
                self.config.max_deadline,
                |timeout| {
                    // Answer a little before the caller gives up, so the
                    // caller gets this ingress's status (and the ingress
                    // learns the node was slow) rather than a cancellation.
                    let margin = (timeout / 20).min(Duration::from_millis(50));
                    timeout.min(self.config.max_deadline).saturating_sub(margin)
                },
            )
    }

    /// The whole request body (so it can be replayed), within the size
    /// limit, before `deadline`, and with no pause longer than
    /// `--body-progress-timeout-ms`.
    async fn body(&self, body: Incoming, deadline: Instant) -> Result<Bytes, Status> {
        let mut body = Limited::new(body, self.config.max_request_bytes + GRPC_FRAME_HEADER);
        let mut collected = Collected::default();
        let received = loop {
            // The next frame within the progress bound and the deadline.
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = left.min(self.config.body_progress_timeout);
            let Ok(frame) = tokio::time::timeout(wait, body.frame()).await else {
                if wait < left {
                    return Err(Self::reject(
                        &self.metrics.rejected_body_stalled,
                        Status::deadline_exceeded(format!(
                            "the request body stopped arriving for {} ms",
                            self.config.body_progress_timeout.as_millis()
                        )),
                    ));
                }
                return Err(Status::deadline_exceeded(
                    "the request body did not arrive within the deadline",
                ));
            };
            match frame {
                None => break Ok(()),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        collected.push(data);
                    }
                }
                Some(Err(error)) => break Err(error),
            }
        };
        match received {
            Ok(()) => Ok(collected.into_bytes()),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(Self::reject(
                &self.metrics.rejected_too_large,
                Status::resource_exhausted(format!(
                    "request message is over the limit of {} bytes (--max-request-bytes)",
                    self.config.max_request_bytes
                )),
            )),
            Err(error) => Err(Status::cancelled(format!("request body not received: {error}"))),
        }
    }

    /// The database `body` names in field 1 of its first message, which a
    /// route header, if sent, must agree with (the body is authoritative).
    fn routed_db(&self, parts: &Parts, body: &[u8], field: route::DbField) -> Result<String, Status> {
        let scan = route::scanner(parts.uri.path(), field);
        let db = route::first_message(body).and_then(scan).map_err(|error| {
            Self::reject(
                &self.metrics.rejected_unroutable,
                Status::invalid_argument(error.to_string()),
            )
        })?;
        // Corium's name rule before any lookup: junk never costs a storage
        // read, and the client learns it is junk (not "try again").
        corium_fleet_common::names::check(&db).map_err(|error| {
            Self::reject(
                &self.metrics.rejected_unroutable,
                Status::invalid_argument(error.to_string()),
            )
        })?;
        if let Some(route) = parts.headers.get(&names::DATABASE_ROUTE)
            && route.as_bytes() != db.as_bytes()
        {
            return Err(Self::reject(
                &self.metrics.rejected_route_mismatch,
                Status::invalid_argument(format!(
                    "{} {:?} does not match the request's database {db:?}; the body is authoritative",
                    metadata::DATABASE_ROUTE,
                    String::from_utf8_lossy(route.as_bytes())
                )),
            ));
        }
        Ok(db)
    }

    /// The request id a `Transact` is forwarded under: the client's, else
    /// (with `--assign-request-ids`) a fresh one of this ingress's, else none.
    fn request_id(&self, parts: &Parts) -> Option<RequestId> {
        match parts.headers.get(&names::REQUEST_ID) {
            // The owner validates the client's id.
            Some(value) => Some(RequestId {
                text: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                assigned: false,
            }),
            None if self.config.assign_request_ids => {
                self.metrics.request_ids_assigned.fetch_add(1, Ordering::Relaxed);
                Some(RequestId {
                    text: assigned_request_id(),
                    assigned: true,
                })
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correlation_ids_are_unique_hex_of_one_length() {
        let ids: std::collections::HashSet<String> = (0..1000)
            .map(|_| correlation_id().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        );
        assert!(correlation_id().is_sensitive());
    }

    #[test]
    fn assigned_request_ids_are_unique_uuids() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| assigned_request_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids.iter().all(|id| uuid::Uuid::parse_str(id).is_ok()));
    }

    /// An assigned request id is a capability (whoever knows it can fence
    /// it or claim it first), so none may be guessed from another: each is
    /// a v7 UUID whose 74 bits after its time are random of their own,
    /// sharing nothing with the ids before it nor with any correlation id
    /// (`x-request-id`, returned on every answer). A per-process prefix and
    /// a counter fail every check here; the time is the id's own (its
    /// record's age, for the retention window).
    #[test]
    fn assigned_request_ids_are_random_and_unrelated_to_correlation_ids() {
        let mut correlation_halves = std::collections::HashSet::new();
        let mut request_ids = Vec::new();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        for _ in 0..1000 {
            let correlation = correlation_id();
            let correlation = u128::from_str_radix(correlation.to_str().unwrap(), 16).unwrap();
            let (high, low) = uuid::Uuid::from_u128(correlation).as_u64_pair();
            correlation_halves.insert(high);
            correlation_halves.insert(low);
            request_ids.push(uuid::Uuid::parse_str(&assigned_request_id()).unwrap());
        }
        for id in &request_ids {
            assert_eq!(id.get_version(), Some(uuid::Version::SortRand), "{id}");
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122, "{id}");
            let millis = id.as_u128() >> 80;
            assert!(millis >= before && millis < before + 60_000, "{id}: its time");
            let (high, low) = id.as_u64_pair();
            assert!(
                !correlation_halves.contains(&high) && !correlation_halves.contains(&low),
                "{id} shares a half with a correlation id"
            );
        }
        // The random half: no two alike, no counter.
        let lows: std::collections::HashSet<u64> = request_ids.iter().map(|id| id.as_u64_pair().1).collect();
        assert_eq!(
            lows.len(),
            request_ids.len(),
            "every id has random bits of its own"
        );
        for pair in request_ids.windows(2) {
            let (first, second) = (pair[0].as_u64_pair(), pair[1].as_u64_pair());
            assert_ne!(first.1.wrapping_add(1), second.1, "a counter: {pair:?}");
        }
        // Every bit after the time that is not the version or variant is
        // set in about half of the ids (a counter or a fixed prefix leaves
        // bits constant). (The version is the high nibble of byte 6, the
        // variant the top two bits of byte 8; the time the top 48 bits.)
        let fixed = (0xf_u128 << 76) | (0x3_u128 << 62);
        for bit in (0..80).filter(|bit| fixed & (1_u128 << bit) == 0) {
            let set = request_ids
                .iter()
                .filter(|id| id.as_u128() & (1_u128 << bit) != 0)
                .count();
            assert!((350..=650).contains(&set), "bit {bit} set in {set} of 1000 ids");
        }
    }

    /// The units are `wire::metadata::grpc_timeout`'s (tested there); here,
    /// that a header value reaches it, and one that is not text does not.
    #[test]
    fn parses_grpc_timeout_headers() {
        assert_eq!(
            parse_timeout(&HeaderValue::from_static("100m")),
            Some(Duration::from_millis(100))
        );
        assert_eq!(parse_timeout(&HeaderValue::from_static("x")), None);
        assert_eq!(parse_timeout(&HeaderValue::from_bytes(b"1\xffS").unwrap()), None);
    }
}
