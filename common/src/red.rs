//! Rate, errors and duration of every gRPC call, by method and status
//! code, in Prometheus's conventions: `<prefix>_requests_total{method,code}`,
//! `<prefix>_request_duration_seconds{method}` (to the call's end: its last
//! byte and status) and `<prefix>_requests_in_flight`.
//!
//! The methods are a fixed list (every path either tier serves, plus
//! `other`), so a client cannot grow the series; the counters are atomics
//! in a table, so recording costs no lock. A call's status is read from a
//! trailers-only answer's headers, or from the trailers when its body ends
//! ([`Observed`]); a body dropped before its end is `CANCELLED`.

use std::fmt::Write as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper::http::HeaderMap;

use crate::prometheus::Histogram;

/// Every method either tier serves, by path.
pub const METHODS: [&str; 28] = [
    "/corium.v1.Transactor/Transact",
    "/corium.v1.Transactor/SagaCommit",
    "/corium.v1.Transactor/SagaFinish",
    "/corium.v1.Transactor/Subscribe",
    "/corium.v1.Transactor/Sync",
    "/corium.v1.Transactor/Status",
    "/corium.v1.Catalog/CreateDatabase",
    "/corium.v1.Catalog/DeleteDatabase",
    "/corium.v1.Catalog/ForkDatabase",
    "/corium.v1.Catalog/ListDatabases",
    "/corium.v1.Catalog/RequestIndex",
    "/corium.v1.Catalog/SetIndexPolicy",
    "/corium.v1.Catalog/AlterSchema",
    "/corium.v1.Catalog/GetStorageInfo",
    "/corium.v1.Catalog/KeyStatus",
    "/corium.v1.Catalog/RotateStorageKey",
    "/corium.v1.Catalog/RewrapKeys",
    "/corium.v1.Catalog/GcDeletedDatabases",
    "/corium.fleet.v1.FleetAdmin/NodeStatus",
    "/corium.fleet.v1.FleetAdmin/FleetStatus",
    "/corium.fleet.v1.FleetAdmin/DatabasePlacement",
    "/corium.fleet.v1.FleetAdmin/Handoff",
    "/corium.fleet.v1.FleetAdmin/Activate",
    "/corium.fleet.v1.FleetAdmin/Prepare",
    "/corium.fleet.v1.Requests/Status",
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "other",
];

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
pub struct Red(Arc<Table>);

struct Table {
    counts: Vec<[AtomicU64; CODES.len()]>,
    durations: Vec<Histogram>,
    in_flight: AtomicI64,
}

impl Default for Red {
    fn default() -> Self {
        Self(Arc::new(Table {
            counts: METHODS.iter().map(|_| Default::default()).collect(),
            durations: METHODS.iter().map(|_| Histogram::default()).collect(),
            in_flight: AtomicI64::new(0),
        }))
    }
}

/// The index of `path` in [`METHODS`] (`other` for any other path).
fn method_index(path: &str) -> usize {
    METHODS
        .iter()
        .position(|method| *method == path)
        .unwrap_or(METHODS.len() - 1)
}

/// A status code read from `headers` (`grpc-status`), if there is one.
#[must_use]
pub fn code_of(headers: &HeaderMap) -> Option<usize> {
    let code: usize = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    Some(code.min(CODES.len() - 1))
}

impl Red {
    /// A call to `path` begins; it is counted when [`Call::end`] is called
    /// or the guard is dropped (`CANCELLED`).
    #[must_use]
    pub fn begin(&self, path: &str) -> Call {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
        Call {
            red: Arc::clone(&self.0),
            method: method_index(path),
            started: Instant::now(),
            ended: false,
        }
    }

    /// Appends the exposition, the series named `<prefix>_…`.
    pub fn render(&self, out: &mut String, prefix: &str) {
        let table = &self.0;
        let _ = writeln!(
            out,
            "# HELP {prefix}_requests_total gRPC calls finished, by method and status code.\n# TYPE {prefix}_requests_total counter"
        );
        for (method, codes) in METHODS.iter().zip(&table.counts) {
            for (code, count) in CODES.iter().zip(codes) {
                let count = count.load(Ordering::Relaxed);
                if count > 0 {
                    let _ = writeln!(
                        out,
                        "{prefix}_requests_total{{method=\"{method}\",code=\"{code}\"}} {count}"
                    );
                }
            }
        }
        let name = format!("{prefix}_request_duration_seconds");
        let _ = writeln!(
            out,
            "# HELP {name} Time from a call's arrival to its status, by method.\n# TYPE {name} histogram"
        );
        for (method, histogram) in METHODS.iter().zip(&table.durations) {
            if histogram.count() > 0 {
                histogram.render_series(out, &name, &format!("method=\"{method}\""));
            }
        }
        let _ = writeln!(
            out,
            "# HELP {prefix}_requests_in_flight gRPC calls begun and not finished.\n# TYPE {prefix}_requests_in_flight gauge\n{prefix}_requests_in_flight {}",
            table.in_flight.load(Ordering::Relaxed).max(0)
        );
    }
}

/// One call being measured.
pub struct Call {
    red: Arc<Table>,
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
        let red = &self.red;
        red.in_flight.fetch_sub(1, Ordering::Relaxed);
        red.counts[self.method][code.min(CODES.len() - 1)].fetch_add(1, Ordering::Relaxed);
        red.durations[self.method].observe(self.started.elapsed());
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

    #[test]
    fn calls_are_counted_by_method_and_code_and_unknown_paths_share_one_series() {
        let red = Red::default();
        red.begin("/corium.v1.Transactor/Transact").end(0);
        red.begin("/corium.v1.Transactor/Transact").end(8);
        red.begin("/no.such/Method").end(12);
        drop(red.begin("/corium.v1.Transactor/Sync"));
        let mut out = String::new();
        red.render(&mut out, "test");
        assert!(
            out.contains("test_requests_total{method=\"/corium.v1.Transactor/Transact\",code=\"OK\"} 1"),
            "{out}"
        );
        assert!(out.contains("code=\"RESOURCE_EXHAUSTED\"} 1"), "{out}");
        assert!(
            out.contains("test_requests_total{method=\"other\",code=\"UNIMPLEMENTED\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("method=\"/corium.v1.Transactor/Sync\",code=\"CANCELLED\"} 1"),
            "{out}"
        );
        assert!(out.contains("test_requests_in_flight 0"), "{out}");
        assert!(
            out.contains(
                "test_request_duration_seconds_bucket{method=\"/corium.v1.Transactor/Transact\",le=\"60\"} 2"
            ),
            "{out}"
        );
    }

    #[test]
    fn every_method_every_tier_routes_has_its_own_series() {
        assert_eq!(method_index("/corium.v1.Catalog/CreateDatabase"), 6);
        assert_eq!(method_index("/x"), METHODS.len() - 1);
        let mut headers = HeaderMap::new();
        headers.insert("grpc-status", "14".parse().unwrap());
        assert_eq!(code_of(&headers), Some(14));
    }
}
