//! The span exporter the standard `OTEL_EXPORTER_OTLP_*` variables ask for:
//! OTLP over gRPC (the default) or over HTTP (`…_PROTOCOL=http/protobuf`),
//! each in the clear for an `http://` endpoint and over TLS for `https://`
//! — the collector verified against the PEM file `…_CERTIFICATE` (else the
//! system's roots), and `…_CLIENT_CERTIFICATE` / `…_CLIENT_KEY` presented
//! when both are set (a collector that asks for mTLS). Each variable has a
//! traces-specific form (`OTEL_EXPORTER_OTLP_TRACES_…`) that wins, as the
//! OpenTelemetry specification orders them.

use std::path::Path;
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};

/// What OTLP/HTTP waits for one export unless `…_TIMEOUT` says otherwise
/// (the specification's default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How spans leave the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Protocol {
    /// OTLP/gRPC (`grpc`, the default).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`).
    HttpProtobuf,
}

/// The TLS files for an `https://` collector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Tls {
    /// The CA that signed the collector's certificate (`None`: the
    /// system's roots).
    pub(super) ca: Option<String>,
    /// A client certificate and key, for a collector that asks for one.
    pub(super) identity: Option<(String, String)>,
}

/// The exporter's settings, read from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Settings {
    pub(super) protocol: Protocol,
    /// `None` for an `http://` endpoint.
    pub(super) tls: Option<Tls>,
    /// One export's deadline (HTTP; gRPC reads the variable itself).
    pub(super) timeout: Duration,
}

/// An OTLP setting from `env`: the traces-specific variable before the
/// general one, empty as unset.
fn setting(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    [
        format!("OTEL_EXPORTER_OTLP_TRACES_{name}"),
        format!("OTEL_EXPORTER_OTLP_{name}"),
    ]
    .iter()
    .find_map(|variable| env(variable).filter(|value| !value.trim().is_empty()))
}

impl Settings {
    /// The settings `env` (a variable's value by name) gives.
    ///
    /// # Errors
    /// A protocol this build does not speak (`http/json`), TLS files for a
    /// plaintext endpoint, or half a client identity — each named, so
    /// export is never silently plaintext or off.
    pub(super) fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let protocol = match setting(env, "PROTOCOL").as_deref() {
            None | Some("grpc") => Protocol::Grpc,
            Some("http/protobuf") => Protocol::HttpProtobuf,
            Some(other) => {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={other}: this build exports OTLP as grpc or http/protobuf"
                ));
            }
        };
        let timeout = setting(env, "TIMEOUT")
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        let endpoint = setting(env, "ENDPOINT").unwrap_or_default();
        let ca = setting(env, "CERTIFICATE");
        let (cert, key) = (setting(env, "CLIENT_CERTIFICATE"), setting(env, "CLIENT_KEY"));
        if !endpoint.starts_with("https://") {
            if ca.is_some() || cert.is_some() || key.is_some() {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_CERTIFICATE or _CLIENT_* set for {endpoint:?}, which is not https://"
                ));
            }
            return Ok(Self {
                protocol,
                tls: None,
                timeout,
            });
        }
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => {
                return Err(
                    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE and OTEL_EXPORTER_OTLP_CLIENT_KEY go together"
                        .to_owned(),
                );
            }
        };
        Ok(Self {
            protocol,
            tls: Some(Tls { ca, identity }),
            timeout,
        })
    }

    /// The exporter (inside the export runtime: gRPC's channel and HTTP's
    /// connections live on its thread).
    ///
    /// # Errors
    /// A TLS file that cannot be read or used, or the exporter's own
    /// refusal of the endpoint.
    pub(super) fn exporter(&self) -> Result<opentelemetry_otlp::SpanExporter, String> {
        // The exporter may be set up before the process's other TLS.
        crate::tls::install_default_provider();
        let built = match self.protocol {
            Protocol::Grpc => {
                let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
                match &self.tls {
                    Some(tls) => builder.with_tls_config(tonic_tls(tls)?).build(),
                    None => builder.build(),
                }
            }
            Protocol::HttpProtobuf => {
                let client =
                    super::http_client::HttpExport::new(rustls_config(self.tls.as_ref())?, self.timeout);
                opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_http_client(client)
                    .build()
            }
        };
        built.map_err(|error| error.to_string())
    }
}

fn read(path: &str) -> Result<Vec<u8>, String> {
    crate::tls::read(Path::new(path)).map_err(|error| error.to_string())
}

/// gRPC's TLS: the CA or the system's roots, and the identity.
fn tonic_tls(tls: &Tls) -> Result<tonic::transport::ClientTlsConfig, String> {
    let config = tonic::transport::ClientTlsConfig::new();
    let config = match &tls.ca {
        Some(path) => config.ca_certificate(tonic::transport::Certificate::from_pem(read(path)?)),
        None => config.with_native_roots(),
    };
    Ok(match &tls.identity {
        Some((cert, key)) => config.identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?)),
        None => config,
    })
}

/// HTTP's TLS: the same roots and identity as rustls settings (`None`:
/// a plaintext endpoint, which the connector serves in the clear, so no
/// roots are read).
fn rustls_config(tls: Option<&Tls>) -> Result<rustls::ClientConfig, String> {
    let roots = match tls.map(|tls| tls.ca.as_deref()) {
        Some(Some(ca)) => crate::tls::roots(Path::new(ca)).map_err(|error| error.to_string())?,
        Some(None) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots
        }
        None => rustls::RootCertStore::empty(),
    };
    let builder = rustls::ClientConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .with_root_certificates(roots);
    match tls.and_then(|tls| tls.identity.as_ref()) {
        Some((cert, key)) => {
            let certs = crate::tls::certificates(Path::new(cert)).map_err(|error| error.to_string())?;
            let key = crate::tls::private_key(Path::new(key)).map_err(|error| error.to_string())?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|error| format!("{cert}: {error}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings over a fixed environment.
    fn settings(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let env = |name: &str| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        };
        Settings::from_env(&env)
    }

    #[test]
    fn plaintext_endpoints_have_no_tls_and_refuse_tls_files() {
        let plain = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")]).unwrap();
        assert_eq!(
            (plain.protocol, plain.tls, plain.timeout),
            (Protocol::Grpc, None, DEFAULT_TIMEOUT)
        );
        let refused = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
        ])
        .unwrap_err();
        assert!(refused.contains("not https://"), "{refused}");
    }

    #[test]
    fn https_takes_the_ca_and_identity_and_the_traces_variables_win() {
        let tls = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://plain:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/me.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/me.key"),
        ])
        .unwrap()
        .tls;
        assert_eq!(
            tls,
            Some(Tls {
                ca: Some("/ca.pem".to_owned()),
                identity: Some(("/me.pem".to_owned(), "/me.key".to_owned())),
            })
        );
        let roots = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317")]).unwrap();
        assert_eq!(roots.tls, Some(Tls::default()), "the system's roots");
        let half = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4317"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/me.key"),
        ])
        .unwrap_err();
        assert!(half.contains("go together"), "{half}");
    }

    #[test]
    fn http_protobuf_is_spoken_and_http_json_refused_by_name() {
        let http = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap();
        assert_eq!(
            (http.protocol, http.timeout),
            (Protocol::HttpProtobuf, Duration::from_millis(2500))
        );
        let refused = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(refused.contains("http/json"), "{refused}");
    }

    #[test]
    fn a_missing_tls_file_is_named() {
        let tls = Tls {
            ca: Some("/nowhere/ca.pem".to_owned()),
            identity: None,
        };
        let missing = tonic_tls(&tls).unwrap_err();
        assert!(missing.contains("/nowhere/ca.pem"), "{missing}");
        let missing = rustls_config(Some(&tls)).unwrap_err();
        assert!(missing.contains("/nowhere/ca.pem"), "{missing}");
    }
}
