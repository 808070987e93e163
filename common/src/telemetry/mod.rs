//! Process telemetry shared by the fleet binaries: `tracing` logs to
//! standard error (text, or one JSON object a line with `--log-format
//! json`), and — only when the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is
//! not `true` — spans exported over OTLP/gRPC, with the standard `OTEL_*`
//! variables for the service name, sampler and batching, and for TLS: an
//! `https://` endpoint is verified against `OTEL_EXPORTER_OTLP_CERTIFICATE`
//! (else the system's roots) and presents `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`
//! and `…_CLIENT_KEY` to a collector that asks for mTLS ([`otlp_tls`]).
//!
//! Layout:
//! - this file — [`init`] and the [`Telemetry`] guard that flushes spans at exit;
//! - [`propagation`] — W3C `traceparent` in and out of HTTP headers, so one
//!   trace runs client → ingress → owner;
//! - `json_lines` — JSON log lines carrying their trace's `trace_id`.

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

/// An OTLP setting from `env`: the traces-specific variable
/// (`OTEL_EXPORTER_OTLP_TRACES_<NAME>`) before the general one, empty as
/// unset (the OpenTelemetry specification's order).
fn otlp_setting(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .iter()
    .find_map(|variable| env(variable).filter(|value| !value.trim().is_empty()))
}

/// TLS for span export, from the standard variables in `env`: `None` for
/// an `http://` endpoint; for `https://`, the server verified against the
/// PEM file `…_CERTIFICATE` (else the system's roots), and the client
/// certificate and key `…_CLIENT_CERTIFICATE` / `…_CLIENT_KEY` presented
/// when both are set.
///
/// # Errors
/// A protocol other than gRPC, TLS files given for a plaintext endpoint,
/// half a client identity, or a file that cannot be read — each named, so
/// export is not silently plaintext or off.
fn otlp_tls(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<tonic::transport::ClientTlsConfig>, String> {
    if let Some(protocol) = otlp_setting(env, "PROTOCOL").filter(|protocol| protocol != "grpc") {
        return Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: this build exports OTLP over gRPC (grpc) only"
        ));
    }
    let endpoint = otlp_setting(env, "ENDPOINT").unwrap_or_default();
    let ca = otlp_setting(env, "CERTIFICATE");
    let identity = (
        otlp_setting(env, "CLIENT_CERTIFICATE"),
        otlp_setting(env, "CLIENT_KEY"),
    );
    if !endpoint.starts_with("https://") {
        if ca.is_some() || identity.0.is_some() || identity.1.is_some() {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_CERTIFICATE or _CLIENT_* set for {endpoint:?}, which is not https://"
            ));
        }
        return Ok(None);
    }
    let read = |path: &str| std::fs::read(path).map_err(|error| format!("cannot read {path}: {error}"));
    // The exporter may be set up before the process's other TLS.
    crate::tls::install_default_provider();
    let tls = tonic::transport::ClientTlsConfig::new();
    let tls = match ca {
        Some(path) => tls.ca_certificate(tonic::transport::Certificate::from_pem(read(&path)?)),
        None => tls.with_native_roots(),
    };
    match identity {
        (Some(cert), Some(key)) => Ok(Some(
            tls.identity(tonic::transport::Identity::from_pem(read(&cert)?, read(&key)?)),
        )),
        (None, None) => Ok(Some(tls)),
        _ => Err(
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together".to_owned(),
        ),
    }
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
    let tls = otlp_tls(&|name| std::env::var(name).ok())?;
    // The channel is made inside the runtime, whose thread then drives it.
    let exporter = runtime
        .block_on(async {
            use opentelemetry_otlp::WithTonicConfig as _;
            let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            match tls {
                Some(tls) => builder.with_tls_config(tls).build(),
                None => builder.build(),
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `otlp_tls` over a fixed environment; its refusal as text.
    fn tls(vars: &[(&str, &str)]) -> Result<bool, String> {
        let env = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        otlp_tls(&env).map(|tls| tls.is_some())
    }

    #[test]
    fn plaintext_endpoints_have_no_tls_and_refuse_tls_files() {
        assert_eq!(
            tls(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")]),
            Ok(false)
        );
        let refused = tls(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
        ])
        .unwrap_err();
        assert!(refused.contains("not https://"), "{refused}");
    }

    #[test]
    fn https_uses_the_given_ca_or_the_system_roots_and_the_traces_variables_win() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not checked until the handshake").unwrap();
        let ca = ca.to_str().unwrap();
        assert_eq!(
            tls(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317")]),
            Ok(true)
        );
        assert_eq!(
            tls(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://plain:4317"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:4317"),
                ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca),
            ]),
            Ok(true),
            "the traces endpoint is the one used"
        );
        let missing = tls(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nowhere/ca.pem"),
        ])
        .unwrap_err();
        assert!(missing.contains("/nowhere/ca.pem"), "{missing}");
        let half = tls(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", ca),
        ])
        .unwrap_err();
        assert!(half.contains("go together"), "{half}");
    }

    #[test]
    fn another_protocol_is_refused_by_name() {
        let refused = tls(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ])
        .unwrap_err();
        assert!(refused.contains("http/protobuf"), "{refused}");
        assert_eq!(
            tls(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ]),
            Ok(false)
        );
    }
}
