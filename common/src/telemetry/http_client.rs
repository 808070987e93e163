//! The client OTLP/HTTP export posts with: hyper over the process's rustls
//! (`ring`), `https://` and `http://` alike, with the TLS settings gRPC
//! export uses (`export.rs`). Each export has a deadline, and a response
//! body is read up to 4 MiB (a collector answers with a few bytes).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::HttpError;

/// The most of a collector's answer that is read.
const MAX_RESPONSE_BYTES: usize = 4 << 20;

/// Posts OTLP/HTTP exports.
#[derive(Debug)]
pub(super) struct HttpExport {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// One export's deadline, connecting included.
    timeout: Duration,
    /// The export runtime: the batch processor calls from a thread of its
    /// own, so each exchange runs here.
    runtime: tokio::runtime::Handle,
}

impl HttpExport {
    /// A client verifying `https://` collectors with `tls`; made inside the
    /// export runtime, whose handle it keeps.
    pub(super) fn new(tls: rustls::ClientConfig, timeout: Duration) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for HttpExport {
    async fn send_bytes(
        &self,
        request: hyper::http::Request<Bytes>,
    ) -> Result<hyper::http::Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = hyper::http::Request::from_parts(parts, Full::new(body));
        let (client, timeout) = (self.client.clone(), self.timeout);
        let exchange = async move {
            let response = client.request(request).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE_BYTES).collect().await?.to_bytes();
            Ok::<_, HttpError>(hyper::http::Response::from_parts(parts, body))
        };
        self.runtime
            .spawn(async move {
                tokio::time::timeout(timeout, exchange).await.map_err(|_| {
                    HttpError::from(format!("no answer from the collector within {timeout:?}"))
                })?
            })
            .await?
    }
}
