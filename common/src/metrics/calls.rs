//! Rate, errors and duration of every gRPC call, in Prometheus's
//! conventions: `<prefix>_requests_total{method,kind,code}`,
//! `<prefix>_request_duration_seconds{method,kind}` (to the call's end: its
//! last byte and status) and `<prefix>_requests_in_flight`.
//!
//! The methods are those Corium's and the fleet's service descriptors
//! declare (`corium_fleet_proto::methods`), plus `other` for any other
//! path, so a client cannot grow the series; `kind` is the method's RPC kind
//! (`unary`, `server_stream`, …), so a latency alert can leave streams out
//! without naming them. The table holds a row per method, made at start: a
//! call finds its row by a hashed lookup of its path and records into atomic
//! counts and the row's own histogram; a method's series appear once it was
//! called. A call's status is read from a trailers-only answer's
//! headers, or from the trailers when its body ends ([`Observed`]); a body
//! dropped before its end is `CANCELLED`.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use corium_fleet_proto::methods;
use hyper::body::{Body, Frame};
use hyper::http::HeaderMap;

use super::{Histogram, Scrape, duration_histogram};

/// The label of a call to a path no service declares.
const OTHER: &str = "other";

/// gRPC status code names, by number (the `code` label).
const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// One tier's call metrics (cheap to clone: the table is shared).
#[derive(Clone)]
pub struct Calls(Arc<Table>);

/// Per method (in `methods::all()` order, then `other`): its counts by
/// status code and its durations.
struct Table {
    counts: Vec<[AtomicU64; CODES.len()]>,
    durations: Vec<Histogram>,
    in_flight: AtomicI64,
}

impl Default for Calls {
    fn default() -> Self {
        let rows = methods::all().len() + 1;
        Self(Arc::new(Table {
            counts: (0..rows).map(|_| Default::default()).collect(),
            durations: (0..rows).map(|_| duration_histogram()).collect(),
            in_flight: AtomicI64::new(0),
        }))
    }
}

/// The row of `path` in the table (the last, `other`, for any other path).
fn method_index(path: &str) -> usize {
    methods::index(path).unwrap_or(methods::all().len())
}

/// The `method` and `kind` labels of row `index`.
fn labels(index: usize) -> (&'static str, &'static str) {
    methods::all()
        .get(index)
        .map_or((OTHER, OTHER), |method| (method.path, method.kind.as_str()))
}

/// A status code read from `headers` (`grpc-status`), if there is one.
#[must_use]
pub fn code_of(headers: &HeaderMap) -> Option<usize> {
    let code: usize = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    Some(code.min(CODES.len() - 1))
}

impl Calls {
    /// A call to `path` begins; it is counted when [`Call::end`] is called
    /// or the guard is dropped (`CANCELLED`).
    #[must_use]
    pub fn begin(&self, path: &str) -> Call {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
        Call {
            table: Arc::clone(&self.0),
            method: method_index(path),
            started: Instant::now(),
            ended: false,
        }
    }

    /// Writes the series named `<prefix>_…` (only methods called so far).
    pub fn collect(&self, scrape: &mut Scrape<'_>, prefix: &str) {
        let table = &self.0;
        scrape.counters(
            &format!("{prefix}_requests_total"),
            "gRPC calls finished, by method, RPC kind and status code.",
            table.counts.iter().enumerate().flat_map(|(index, codes)| {
                let (method, kind) = labels(index);
                CODES.iter().zip(codes).filter_map(move |(code, count)| {
                    let count = count.load(Ordering::Relaxed);
                    (count > 0).then_some(([("method", method), ("kind", kind), ("code", *code)], count))
                })
            }),
        );
        // A row's histogram has observations once its counts do (a call
        // records both).
        let called = |index: &usize| {
            table.counts[*index]
                .iter()
                .any(|count| count.load(Ordering::Relaxed) > 0)
        };
        scrape.histograms(
            &format!("{prefix}_request_duration_seconds"),
            "Time from a call's arrival to its status, by method and RPC kind (a stream's lasts as long as its client keeps it).",
            (0..table.durations.len()).filter(called).map(|index| {
                let (method, kind) = labels(index);
                ([("method", method), ("kind", kind)], &table.durations[index])
            }),
        );
        scrape.gauge(
            &format!("{prefix}_requests_in_flight"),
            "gRPC calls begun and not finished.",
            table.in_flight.load(Ordering::Relaxed).max(0),
        );
    }
}

/// One call being measured.
pub struct Call {
    table: Arc<Table>,
    method: usize,
    started: Instant,
    ended: bool,
}

impl Call {
    /// The call ended with `code` (a gRPC status number).
    pub fn end(mut self, code: usize) {
        self.record(code);
    }

    fn record(&mut self, code: usize) {
        if self.ended {
            return;
        }
        self.ended = true;
        let table = &self.table;
        table.in_flight.fetch_sub(1, Ordering::Relaxed);
        table.counts[self.method][code.min(CODES.len() - 1)].fetch_add(1, Ordering::Relaxed);
        table.durations[self.method].observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // Dropped before its status: the caller or the server gave up.
        self.record(1);
    }
}

/// A response body that ends its [`Call`] with the status in its trailers
/// (or `UNKNOWN` if it ends without one, `CANCELLED` if dropped before).
pub struct Observed<B> {
    inner: B,
    call: Option<Call>,
}

impl<B> Observed<B> {
    /// `inner`, ending `call` when its status passes.
    pub const fn new(inner: B, call: Call) -> Self {
        Self {
            inner,
            call: Some(call),
        }
    }
}

impl<B> Body for Observed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref()
                    && let Some(call) = self.call.take()
                {
                    call.end(code_of(trailers).unwrap_or(2));
                }
            }
            // Broken, or ended without a status.
            Poll::Ready(Some(Err(_)) | None) => {
                if let Some(call) = self.call.take() {
                    call.end(2);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(calls: &Calls) -> String {
        let calls = calls.clone();
        super::super::exposition(&super::super::registry(move |scrape| {
            calls.collect(scrape, "test");
        }))
    }

    #[test]
    fn calls_are_counted_by_method_kind_and_code_and_unknown_paths_share_one_series() {
        let calls = Calls::default();
        calls.begin("/corium.v1.Transactor/Transact").end(0);
        calls.begin("/corium.v1.Transactor/Transact").end(8);
        calls.begin("/no.such/Method").end(12);
        drop(calls.begin("/corium.v1.Transactor/Sync"));
        calls.begin("/corium.v1.PeerServer/Subscribe").end(14);
        let out = exposition(&calls);
        for line in [
            "test_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"OK\"} 1",
            "test_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"RESOURCE_EXHAUSTED\"} 1",
            "test_requests_total{method=\"other\",kind=\"other\",code=\"UNIMPLEMENTED\"} 1",
            "test_requests_total{method=\"/corium.v1.Transactor/Sync\",kind=\"unary\",code=\"CANCELLED\"} 1",
            "test_requests_total{method=\"/corium.v1.PeerServer/Subscribe\",kind=\"server_stream\",code=\"UNAVAILABLE\"} 1",
            "test_requests_in_flight 0",
            "test_request_duration_seconds_bucket{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",le=\"60\"} 2",
        ] {
            assert!(out.lines().any(|got| got == line), "{line:?} missing from\n{out}");
        }
    }

    #[test]
    fn every_declared_method_has_its_own_row_and_streams_are_told_by_kind() {
        let create = method_index("/corium.v1.Catalog/CreateDatabase");
        assert_eq!(labels(create), ("/corium.v1.Catalog/CreateDatabase", "unary"));
        assert_eq!(labels(method_index("/x")), (OTHER, OTHER));
        assert_eq!(
            labels(method_index("/corium.fleet.v1.Requests/Status")).0,
            "/corium.fleet.v1.Requests/Status"
        );
        assert_eq!(
            labels(method_index("/corium.v1.PeerServer/Query")),
            ("/corium.v1.PeerServer/Query", "server_stream")
        );
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", "14".parse().unwrap());
        assert_eq!(code_of(&headers), Some(14));
    }
}
