//! The admin HTTP port: `/metrics` (Prometheus text), `/healthz` (the
//! process answers) and `/readyz` (storage answers within the storage
//! timeout). Plain HTTP/1.1 so Kubernetes probes can use it.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::host::Host;

async fn answer(
    host: Arc<Host>,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body) = match request.uri().path() {
        "/metrics" => (StatusCode::OK, host.metrics.render(host.cells().len())),
        "/healthz" => (StatusCode::OK, "ok\n".to_owned()),
        "/readyz" => {
            let probe = tokio::time::timeout(host.config.storage_timeout, host.base.get_root("meta:")).await;
            match probe {
                Ok(Ok(_)) if !host.is_stopping() => (StatusCode::OK, "ready\n".to_owned()),
                Ok(Ok(_)) => (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".to_owned()),
                Ok(Err(error)) => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("storage unavailable: {error}\n"),
                ),
                Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "storage timed out\n".to_owned()),
            }
        }
        _ => (
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    Ok(response)
}

/// Serves the admin port until `shutdown` turns true.
pub async fn serve(host: Arc<Host>, listener: TcpListener, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = crate::until_true(&mut shutdown) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let host = Arc::clone(&host);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| answer(Arc::clone(&host), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(std::time::Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            // Every admin request is tiny; bound the whole connection.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(30), connection).await;
        });
    }
}
