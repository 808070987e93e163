//! One attempt: the call's bytes to one node, with the fleet's metadata and
//! the remaining deadline, and how it failed if it did.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use corium_fleet_wire::metadata;
use http_body_util::BodyExt as _;
use hyper::http::{HeaderValue, Request, Response};

use super::Proxy;
use super::header_names as names;
use super::intake::{Call, RequestId};
use crate::body::{Body, BoxError};
use crate::upstream;

/// Where one attempt goes.
#[derive(Clone, Debug)]
pub(super) struct Hop {
    /// The node's internal endpoint (`http://…` or `https://…`).
    pub endpoint: String,
    /// The lease version routed on (owner hops only).
    pub lease_version: Option<u64>,
}

/// How one attempt failed.
#[derive(Debug)]
pub(super) enum SendError {
    /// Never reached the node: safe to try another.
    Connect(String),
    /// Sent; the outcome is unknown.
    Ambiguous(String),
    /// The deadline passed before the answer.
    Deadline,
}

impl Proxy {
    /// Sends `call` to `hop` under `id` (the assigned request id, when the
    /// attempt carries one; a client's own id travels in its headers). With
    /// `whole`, a streamed answer is read to its end before it is returned,
    /// so a break after the response headers is an ambiguous failure (which
    /// a call with a request id retries) rather than a cut-off answer.
    pub(super) async fn send(
        &self,
        call: &Call,
        hop: &Hop,
        id: Option<&RequestId>,
        whole: bool,
    ) -> Result<Response<Body>, SendError> {
        let remaining = call.deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(SendError::Deadline);
        }
        let parts = &call.parts;
        let mut request = Request::new(());
        *request.method_mut() = parts.method.clone();
        // The path; the upstream sends it under the node's own authority.
        *request.uri_mut() = parts.uri.clone();
        let headers = request.headers_mut();
        headers.reserve(parts.headers.len() + 6);
        for (name, value) in &parts.headers {
            if forwarded(name, value) {
                headers.append(name, value.clone());
            }
        }
        headers.insert(names::HOP.clone(), HeaderValue::from_static("1"));
        if let Some(id) = id.filter(|id| id.assigned)
            && let Ok(mut value) = HeaderValue::from_str(&id.text)
        {
            // Used once: a never-indexed literal (see `correlation_id`).
            value.set_sensitive(true);
            headers.insert(names::REQUEST_ID.clone(), value);
            headers.insert(
                names::REQUEST_ID_ORIGIN.clone(),
                HeaderValue::from_static(metadata::ORIGIN_INGRESS),
            );
        }
        if let Some(version) = hop.lease_version {
            headers.insert(names::LEASE_VERSION.clone(), HeaderValue::from(version));
        }
        // The node's span is a child of this attempt's.
        let span = hop_span(hop, headers);
        headers.insert(names::GRPC_TIMEOUT.clone(), grpc_timeout(remaining));
        // Over the node's learned limit: refused here, at no cost to it.
        let permit = match self.node_limits.acquire(&hop.endpoint) {
            Ok(permit) => permit,
            Err(status) => {
                self.metrics.rejected_node_limit.fetch_add(1, Ordering::Relaxed);
                return Ok(crate::body::status_response(&status));
            }
        };
        self.metrics.forwarded.fetch_add(1, Ordering::Relaxed);
        // If the caller goes away while this node keeps us waiting, that
        // still counts against the node (see `SlowGuard`).
        let mut waiting = SlowGuard {
            proxy: self,
            endpoint: &hop.endpoint,
            since: Instant::now(),
            armed: true,
        };
        let exchange = async {
            let response = self
                .upstream
                .send(&hop.endpoint, request, call.body.clone())
                .await?;
            if !whole || response.headers().contains_key("grpc-status") {
                // Streamed through, or a trailers-only answer (complete). A
                // subscription whose client stops reading is ended.
                let response = response.map(crate::stream_end::StreamEnd::boxed);
                if crate::route::is_subscribe(parts.uri.path())
                    && !response.headers().contains_key("grpc-status")
                {
                    let (timeout, metrics) = (self.config.stream_stall_timeout, Arc::clone(&self.metrics));
                    return Ok(response.map(|body| crate::stall::watched(body, timeout, metrics)));
                }
                return Ok(response);
            }
            let (parts, body) = response.into_parts();
            let collected = body
                .collect()
                .await
                .map_err(|error| upstream::Failure::Ambiguous(format!("the answer broke off: {error}")))?;
            Ok(Response::from_parts(
                parts,
                collected
                    .map_err(|never| -> BoxError { match never {} })
                    .boxed_unsync(),
            ))
        };
        let outcome = tokio::time::timeout(remaining, tracing::Instrument::instrument(exchange, span)).await;
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
                permit.observe(response.headers());
                Ok(response)
            }
        }
    }

    /// Marks a node whose call hung or broke after sending.
    /// (Also called by [`SlowGuard`] when a caller cancels a long wait.)
    pub(super) fn suspect(&self, endpoint: &str) {
        self.suspects.mark(endpoint);
        self.metrics.suspect_marks.fetch_add(1, Ordering::Relaxed);
    }
}

/// `grpc-timeout` for `remaining`, in milliseconds (at least 1, at most the
/// eight digits gRPC allows), written without `format!`. Marked sensitive: it
/// differs on nearly every call, so it is sent as a never-indexed literal
/// rather than filling the hop's HPACK table.
fn grpc_timeout(remaining: Duration) -> HeaderValue {
    use std::io::Write as _;
    let millis = remaining.as_millis().clamp(1, 99_999_999);
    let mut text = [0u8; 9];
    let mut rest = &mut text[..];
    #[allow(
        clippy::expect_used,
        reason = "millis is clamped to eight digits: with the unit they fit the nine bytes"
    )]
    write!(rest, "{millis}m").expect("nine bytes hold eight digits and a unit");
    let written = 9 - rest.len();
    #[allow(
        clippy::expect_used,
        reason = "ascii digits and `m` are always a valid header value"
    )]
    let mut value = HeaderValue::from_bytes(&text[..written]).expect("ascii digits");
    value.set_sensitive(true);
    value
}

/// The span of one attempt, its trace context written into the hop's
/// `headers` — made only when spans are exported (a trace needs it; a log
/// line has the call's own span).
fn hop_span(hop: &Hop, headers: &mut hyper::http::HeaderMap) -> tracing::Span {
    if !corium_fleet_common::telemetry::exporting() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!("hop", endpoint = %hop.endpoint, lease_version = hop.lease_version);
    corium_fleet_common::telemetry::propagation::inject(&span, headers);
    span
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

/// Marks a node suspect when the call waiting on it is dropped (the caller
/// cancelled) after waiting longer than [`SLOW`] for its answer.
struct SlowGuard<'a> {
    proxy: &'a Proxy,
    endpoint: &'a str,
    since: Instant,
    armed: bool,
}

/// A wait for an answer this long, abandoned, marks the node.
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
    fn grpc_timeouts_are_whole_milliseconds_within_grpc_limits() {
        let text = |d: Duration| grpc_timeout(d).to_str().unwrap().to_owned();
        assert_eq!(text(Duration::from_micros(10)), "1m");
        assert_eq!(text(Duration::from_millis(29_999)), "29999m");
        assert_eq!(text(Duration::from_secs(1_000_000)), "99999999m");
        assert!(grpc_timeout(Duration::from_secs(1)).is_sensitive());
        assert_eq!(
            metadata::grpc_timeout(&text(Duration::from_millis(250))),
            Some(Duration::from_millis(250))
        );
    }
}
