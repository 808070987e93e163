//! The plain HTTP/1.1 admin port every fleet process serves: `/metrics`,
//! `/healthz`, `/readyz` (Kubernetes probes cannot speak gRPC over TLS, so
//! this port is plaintext). The process supplies the answers.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

/// Answers a request path with `(status, body)`.
pub type Handler = Arc<dyn Fn(String) -> BoxFuture<'static, (u16, String)> + Send + Sync>;

async fn answer(
    handler: Handler,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let content_type = content_type(&path);
    let (status, body) = handler(path).await;
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    Ok(response)
}

/// The media type of an admin path's answer: Prometheus's text format for
/// `/metrics` (a scrape without it is refused by Prometheus 3), JSON under
/// `/debug/` and for `/status.json`, HTML for the ingress's `/status` page,
/// plain text for the probes.
fn content_type(path: &str) -> &'static str {
    if path == "/metrics" {
        "text/plain; version=0.0.4; charset=utf-8"
    } else if path.starts_with("/debug/") || path == "/status.json" {
        "application/json"
    } else if path == "/status" {
        "text/html; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    }
}

/// Serves the admin port until `shutdown` turns true. Every connection is
/// bounded (10 s to send headers, 30 s in all).
pub async fn serve(
    listener: TcpListener,
    handler: Handler,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| answer(Arc::clone(&handler), request));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(10))
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(Duration::from_secs(30), connection).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_served_as_the_prometheus_text_format() {
        assert_eq!(
            content_type("/metrics"),
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(content_type("/debug/root-ops"), "application/json");
        assert_eq!(content_type("/readyz"), "text/plain; charset=utf-8");
        assert_eq!(content_type("/status"), "text/html; charset=utf-8");
        assert_eq!(content_type("/status.json"), "application/json");
    }
}
