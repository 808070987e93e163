//! A real OTLP trace receiver on loopback — gRPC (plaintext, TLS or mTLS)
//! or HTTP with protobuf bodies: the collector's
//! `TraceService` (the protocol's own generated server), keeping every span
//! it is sent so a test can ask what arrived.

use std::path::Path;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;

/// One received span, flattened.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// `service.name` of the process that sent it.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// Trace id, 32 hex digits.
    pub trace_id: String,
    /// Span id, 16 hex digits.
    pub span_id: String,
    /// Parent span id (empty for a root).
    pub parent_span_id: String,
    /// String attributes (`key`, `value`).
    pub attributes: Vec<(String, String)>,
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<ReceivedSpan>>>);

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|value| value.value.as_ref()) {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

impl Collector {
    /// Keeps every span of `request`.
    fn record(&self, request: ExportTraceServiceRequest) {
        let mut received = Vec::new();
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| {
                    resource
                        .attributes
                        .iter()
                        .find(|attribute| attribute.key == "service.name")
                })
                .map(|attribute| text(attribute.value.as_ref()))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    received.push(ReceivedSpan {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|attribute| (attribute.key.clone(), text(attribute.value.as_ref())))
                            .collect(),
                    });
                }
            }
        }
        self.0.lock().unwrap().extend(received);
    }
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.record(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// A running receiver; it stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Receiver {
    /// Starts a receiver on a free loopback port.
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// Starts a receiver serving TLS with `identity` (a certificate and key,
    /// PEM) on a free loopback port, asking for a client certificate signed
    /// by `client_ca` when given (mTLS); its endpoint is `https://…`.
    ///
    /// # Panics
    /// When no port can be bound or the TLS settings are refused.
    pub async fn start_tls(identity: (Vec<u8>, Vec<u8>), client_ca: Option<Vec<u8>>) -> Self {
        corium_fleet_common::tls::install_default_provider();
        let mut tls = tonic::transport::ServerTlsConfig::new()
            .identity(tonic::transport::Identity::from_pem(identity.0, identity.1));
        if let Some(ca) = client_ca {
            tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        Self::serve(Some(tls)).await
    }

    async fn serve(tls: Option<tonic::transport::ServerTlsConfig>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = format!("{scheme}://{}", listener.local_addr().unwrap());
        let collector = Collector::default();
        let spans = Arc::clone(&collector.0);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            server = server.tls_config(tls).expect("the receiver's TLS settings");
        }
        tokio::spawn(
            server
                .add_service(TraceServiceServer::new(collector))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );
        Self {
            endpoint,
            spans,
            _stop: stop,
        }
    }

    /// Starts an OTLP/HTTP receiver (`POST /v1/traces`, protobuf bodies) on
    /// a free loopback port; its endpoint is `http://…` (the exporter adds
    /// the path).
    ///
    /// # Panics
    /// When no port can be bound.
    pub async fn start_http() -> Self {
        Self::serve_http(None).await
    }

    /// Starts an OTLP/HTTP receiver serving TLS with `cert` and `key` (PEM
    /// files), requiring a client certificate signed by `client_ca` when
    /// given (mTLS); its endpoint is `https://…`.
    ///
    /// # Panics
    /// When no port can be bound or the TLS material is refused.
    pub async fn start_http_tls(cert: &Path, key: &Path, client_ca: Option<&Path>) -> Self {
        corium_fleet_common::tls::install_default_provider();
        let mut config = corium_fleet_common::tls::server_config(cert, key, client_ca)
            .expect("the receiver's TLS material");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Self::serve_http(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn serve_http(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        use http_body_util::BodyExt as _;
        use prost::Message as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let endpoint = format!("{scheme}://{}", listener.local_addr().unwrap());
        let collector = Collector::default();
        let spans = Arc::clone(&collector.0);
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    _ = &mut stopped => return,
                };
                let Ok((stream, _)) = accepted else { continue };
                let collector = collector.clone();
                let serve =
                    hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                        let collector = collector.clone();
                        async move {
                            let path_ok = request.method() == hyper::Method::POST
                                && request.uri().path() == "/v1/traces";
                            let body = request.into_body().collect().await?.to_bytes();
                            let status = match ExportTraceServiceRequest::decode(body) {
                                Ok(export) if path_ok => {
                                    collector.record(export);
                                    hyper::StatusCode::OK
                                }
                                _ => hyper::StatusCode::BAD_REQUEST,
                            };
                            let mut response = hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::from(ExportTraceServiceResponse::default().encode_to_vec()),
                            ));
                            *response.status_mut() = status;
                            response
                                .headers_mut()
                                .insert("content-type", "application/x-protobuf".parse().unwrap());
                            Ok::<_, hyper::Error>(response)
                        }
                    });
                let tls = tls.clone();
                tokio::spawn(async move {
                    let http = hyper::server::conn::http1::Builder::new();
                    match tls {
                        // A handshake that fails (no client certificate
                        // under mTLS) is a connection the exporter loses.
                        Some(tls) => {
                            let handshake =
                                tokio::time::timeout(std::time::Duration::from_secs(10), tls.accept(stream));
                            if let Ok(Ok(stream)) = handshake.await {
                                let _ = http
                                    .serve_connection(hyper_util::rt::TokioIo::new(stream), serve)
                                    .await;
                            }
                        }
                        None => {
                            let _ = http
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), serve)
                                .await;
                        }
                    }
                });
            }
        });
        Self {
            endpoint,
            spans,
            _stop: stop,
        }
    }

    /// Every span received so far.
    ///
    /// # Panics
    /// Never (the lock is not poisoned by the receiver).
    #[must_use]
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }
}
