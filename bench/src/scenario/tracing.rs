//! The ingress's per-call tracing work, alone: the call's `forward` span
//! with its fields, the trace context taken from the client's headers
//! (`telemetry::propagation::adopt`), the owner-resolution and hop spans,
//! and the context written into the hop's headers (`propagation::inject`),
//! under the log layer the binaries install — with span export off (the
//! default), on with every trace sampled, and on with 10 % sampled. CPU of
//! the whole process (the batch exporter runs on a thread of its own) per
//! call; the exporter receives the spans and drops them, so the cost of the
//! network is not in the figure.

use std::hint::black_box;
use std::time::Duration;

use corium_fleet_common::telemetry::propagation;
use hyper::http::{HeaderMap, HeaderValue};
use opentelemetry::trace::TracerProvider as _;
use serde::Serialize;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

use crate::stats::{Spread, spread};

/// Calls per round.
const CALLS: u32 = 100_000;

/// Nanoseconds of process CPU per call, by case.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    /// Spans for the log lines only (no `OTEL_*` variables): the default.
    pub(crate) off: Spread,
    /// Exported, every trace sampled (the client's `traceparent` says so).
    pub(crate) sampled_all: Spread,
    /// Exported, 10 % of traces sampled (no client trace context).
    pub(crate) sampled_tenth: Spread,
}

/// An exporter that takes the spans and drops them.
#[derive(Debug)]
struct Dropping;

impl opentelemetry_sdk::trace::SpanExporter for Dropping {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        black_box(batch);
        Ok(())
    }
}

/// The process's CPU time so far (user + system).
fn cpu() -> Duration {
    crate::stats::cpu_time(None)
}

/// One call's tracing work, as the ingress does it: with export off only
/// the call's own span (its correlation id on its log lines); with export
/// on, the trace context and the child spans too.
fn one_call(incoming: &HeaderMap, correlation: &str, exporting: bool) {
    let span = tracing::info_span!(
        "forward",
        method = "/corium.v1.Transactor/Transact",
        x_request_id = tracing::field::Empty,
        db = tracing::field::Empty,
    );
    if exporting {
        propagation::adopt(&span, incoming);
    }
    let _entered = span.enter();
    span.record("x_request_id", correlation);
    span.record("db", "orders");
    if !exporting {
        return;
    }
    {
        let resolving = tracing::info_span!("resolve_owner", db = "orders");
        let _resolving = resolving.enter();
        black_box(&resolving);
    }
    let hop = tracing::info_span!("hop", endpoint = "https://node-1:7001", lease_version = 3u64);
    let mut outgoing = HeaderMap::new();
    propagation::inject(&hop, &mut outgoing);
    let _hop = hop.enter();
    black_box(outgoing);
}

/// CPU nanoseconds per call under `subscriber`, with `incoming` headers.
fn per_call<S>(subscriber: S, incoming: &HeaderMap, exporting: bool) -> f64
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    tracing::subscriber::with_default(subscriber, || {
        let started = cpu();
        for i in 0..CALLS {
            one_call(incoming, if i % 2 == 0 { "corr-a" } else { "corr-b" }, exporting);
        }
        let used = cpu().saturating_sub(started);
        used.as_secs_f64() * 1e9 / f64::from(CALLS)
    })
}

/// The log layer the binaries install (text, `info`), writing nowhere.
fn lines() -> impl tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync {
    tracing_subscriber::fmt::layer()
        .with_writer(std::io::sink)
        .with_filter(tracing_subscriber::EnvFilter::new("info"))
}

/// A provider exporting to [`Dropping`] with `sampler`.
fn provider(sampler: opentelemetry_sdk::trace::Sampler) -> opentelemetry_sdk::trace::SdkTracerProvider {
    opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(Dropping)
        .with_sampler(sampler)
        .build()
}

/// [`per_call`] with export on: spans go to a provider sampling as its
/// parent says, else by `root` (shut down after the round).
fn exported_per_call(root: opentelemetry_sdk::trace::Sampler, headers: &HeaderMap) -> f64 {
    let exporting = provider(opentelemetry_sdk::trace::Sampler::ParentBased(Box::new(root)));
    let nanos = per_call(
        tracing_subscriber::registry()
            .with(lines())
            .with(tracing_opentelemetry::layer().with_tracer(exporting.tracer("bench"))),
        headers,
        true,
    );
    let _ = exporting.shutdown();
    nanos
}

/// Runs it: `rounds` rounds of each case.
pub(crate) fn run(rounds: usize) -> Result {
    let mut with_parent = HeaderMap::new();
    with_parent.insert(
        "traceparent",
        HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    );
    let without_parent = HeaderMap::new();
    let (mut off, mut all, mut tenth) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        // Export off: no propagator is set, as in a process without OTEL_*.
        off.push(per_call(
            tracing_subscriber::registry().with(lines()),
            &with_parent,
            false,
        ));
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        all.push(exported_per_call(
            opentelemetry_sdk::trace::Sampler::AlwaysOn,
            &with_parent,
        ));
        tenth.push(exported_per_call(
            opentelemetry_sdk::trace::Sampler::TraceIdRatioBased(0.1),
            &without_parent,
        ));
        opentelemetry::global::set_text_map_propagator(
            opentelemetry::propagation::TextMapCompositePropagator::new(Vec::new()),
        );
    }
    Result {
        off: spread(&off),
        sampled_all: spread(&all),
        sampled_tenth: spread(&tenth),
    }
}
