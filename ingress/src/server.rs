//! The client listener: gRPC over HTTP/2 with prior knowledge (h2c), one
//! task per connection, graceful drain on shutdown.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::proxy::Proxy;

/// How long shutdown waits for in-flight calls and streams.
const DRAIN: Duration = Duration::from_secs(20);

/// Serves clients until `shutdown` resolves, then drains (bounded).
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>, shutdown: impl Future<Output = ()> + Send) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = Arc::clone(&proxy);
        let service = hyper::service::service_fn(move |request| Arc::clone(&proxy).handle(request));
        let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_secs(20))
            .keep_alive_timeout(Duration::from_secs(10))
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "client connection ended");
            }
        });
    }
    tracing::info!("ingress shutting down; draining connections");
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the drain period; closing");
    }
}
