//! The client OTLP/HTTP export posts with: opentelemetry-http's hyper client
//! (its deadline per export, its 4 MiB bound on a collector's answer) over a
//! rustls connector with the TLS settings gRPC export uses (`export.rs`),
//! `https://` and `http://` alike. The batch span processor calls from a
//! thread of its own, outside any runtime, so each export runs on the export
//! runtime this client was made in.

use std::time::Duration;

use bytes::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{HttpClient, HttpError};

/// Posts OTLP/HTTP exports.
#[derive(Debug)]
pub(super) struct HttpExport {
    client: HyperClient<hyper_rustls::HttpsConnector<HttpConnector>>,
    /// The export runtime, where each exchange runs.
    runtime: tokio::runtime::Handle,
}

impl HttpExport {
    /// A client verifying `https://` collectors with `tls`, each export
    /// bounded by `timeout` (connecting included); made inside the export
    /// runtime, whose handle it keeps.
    pub(super) fn new(tls: rustls::ClientConfig, timeout: Duration) -> Self {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Self {
            client: HyperClient::new(connector, timeout, None),
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for HttpExport {
    async fn send_bytes(
        &self,
        request: hyper::http::Request<Bytes>,
    ) -> Result<hyper::http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move { client.send_bytes(request).await })
            .await?
    }
}
