//! Process telemetry shared by the fleet binaries: `tracing` logs to
//! standard error (text, or one JSON object a line with `--log-format
//! json`), and — only when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is
//! not `true` — spans exported over OTLP/gRPC, with the standard `OTEL_*`
//! variables for the service name, sampler and batching, and for the
//! transport: gRPC or HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`),
//! each over TLS for an `https://` endpoint (`export`).
//!
//! Layout:
//! - this file — [`init`] and the [`Telemetry`] guard that flushes spans at exit;
//! - [`propagation`] — W3C `traceparent` in and out of HTTP headers, so one
//!   trace runs client → ingress → owner;
//! - `json_lines` — JSON log lines carrying their trace's `trace_id`;
//! - `export` — the exporter the standard variables ask for (protocol, TLS);
//! - `http_client` — the HTTP client OTLP/HTTP export posts with.

mod export;
mod http_client;
mod json_lines;
pub mod propagation;

use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written.
#[derive(
    Clone, Copy, Debug, Default, Eq, PartialEq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (colour only on a terminal).
    #[default]
    Text,
    /// One JSON object a line, with the fields of the current spans (the
    /// correlation id among them) and, while spans are exported, the
    /// `trace_id` and `span_id` of the trace it belongs to.
    Json,
}

/// Whether spans are exported (set once, by [`init`]).
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether spans are exported. Spans that only matter to a trace (each
/// hop, each owner resolution) are made only then: with export off, the
/// call's own span, which puts its correlation id on its log lines, is all
/// a call pays for.
#[must_use]
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Keeps span export running; dropping it flushes what is buffered.
#[must_use = "dropping the guard stops span export"]
pub struct Telemetry {
    exporting: Option<Exporting>,
}

struct Exporting {
    provider: opentelemetry_sdk::trace::SdkTracerProvider,
    /// The exporter's gRPC channel lives on this runtime's thread (the
    /// batch processor exports from a thread of its own).
    _runtime: tokio::runtime::Runtime,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(exporting) = self.exporting.take()
            && let Err(error) = exporting.provider.shutdown()
        {
            eprintln!("span export did not flush: {error}");
        }
    }
}

/// Whether the standard variables ask for span export.
fn export_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|value| value.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// The OTLP exporter and provider for `service` (`OTEL_SERVICE_NAME`
/// wins), or why not.
fn start_export(service: &str) -> Result<Exporting, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the export runtime: {error}"))?;
    let settings = export::Settings::from_env(&|name| std::env::var(name).ok())?;
    // The channel is made inside the runtime, whose thread then drives it.
    let exporter = runtime
        .block_on(async { settings.exporter() })
        .map_err(|error| format!("cannot build the OTLP exporter: {error}"))?;
    let service = std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| service.to_owned());
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service)
                .build(),
        )
        .build();
    Ok(Exporting {
        provider,
        _runtime: runtime,
    })
}

/// Installs the global subscriber: `filter` (`EnvFilter` syntax, default
/// `info`; an invalid filter falls back to `info`) for log lines in
/// `format`, and span export as the `OTEL_*` variables say, as `service`.
pub fn init(filter: Option<&str>, format: LogFormat, service: &str) -> Telemetry {
    let filter = || {
        tracing_subscriber::EnvFilter::try_new(filter.unwrap_or("info"))
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
    };
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .event_format(json_lines::JsonLines::new())
            .with_writer(std::io::stderr)
            .with_filter(filter())
            .boxed(),
    };
    let (spans, exporting) = if export_configured() {
        match start_export(service) {
            Ok(exporting) => {
                let tracer = exporting.provider.tracer("corium-fleet");
                opentelemetry::global::set_text_map_propagator(
                    opentelemetry_sdk::propagation::TraceContextPropagator::new(),
                );
                let layer = tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(filter());
                EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
                (Some(layer), Some(exporting))
            }
            Err(error) => {
                eprintln!("{service}: span export off: {error}");
                (None, None)
            }
        }
    } else {
        (None, None)
    };
    tracing_subscriber::registry().with(lines).with(spans).init();
    Telemetry { exporting }
}
