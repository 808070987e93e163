//! W3C trace context across the hop: the `traceparent` (and `tracestate`)
//! a request arrived with becomes the parent of the span that serves it,
//! and a forwarded request carries the current span's. With span export off
//! the global propagator is a no-op: nothing is read, and the client's own
//! headers travel on untouched.

use hyper::http::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

struct Reading<'a>(&'a HeaderMap);

impl Extractor for Reading<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(hyper::http::HeaderName::as_str).collect()
    }
}

struct Writing<'a>(&'a mut HeaderMap);

impl Injector for Writing<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(name), Ok(value)) = (
            hyper::http::HeaderName::from_bytes(key.as_bytes()),
            hyper::http::HeaderValue::from_str(&value),
        ) {
            self.0.insert(name, value);
        }
    }
}

/// Makes the trace context in `headers` (if any) the parent of `span`.
pub fn adopt(span: &tracing::Span, headers: &HeaderMap) {
    let parent =
        opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&Reading(headers)));
    let _ = span.set_parent(parent);
}

/// Writes `span`'s trace context into `headers` (replacing the caller's),
/// when spans are exported.
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    let context = span.context();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut Writing(headers));
    });
}
