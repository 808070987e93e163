//! A client listener: gRPC over HTTP/2 — cleartext with prior knowledge
//! (h2c) or TLS with ALPN h2 — one task per connection, graceful drain on
//! shutdown.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::connections::{Connections, Slot};
use crate::proxy::{Caller, Proxy};

/// How long shutdown waits for in-flight calls and streams.
const DRAIN: Duration = Duration::from_secs(20);
/// Bound on a client's TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

fn serve_connection<IO>(
    graceful: &hyper_util::server::graceful::GracefulShutdown,
    proxy: &Arc<Proxy>,
    client: Caller,
    stream: IO,
    slot: Slot,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let proxy = Arc::clone(proxy);
    let service =
        hyper::service::service_fn(move |request| Arc::clone(&proxy).handle(client.clone(), request));
    let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .serve_connection(TokioIo::new(stream), service);
    let connection = graceful.watch(connection);
    tokio::spawn(async move {
        // The connection's place is held until it ends.
        let _slot = slot;
        if let Err(error) = connection.await {
            tracing::debug!(%error, "client connection ended");
        }
    });
}

/// Serves clients until `shutdown` turns true, then drains (bounded).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<corium_fleet_common::cert_reload::Reloading<rustls::ServerConfig>>>,
    proxy: Arc<Proxy>,
    connections: Arc<Connections>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let (tls_tx, mut tls_rx) =
        tokio::sync::mpsc::channel::<(tokio_rustls::server::TlsStream<TcpStream>, Slot)>(64);
    let (plain_tx, mut plain_rx) = tokio::sync::mpsc::channel::<(TcpStream, Slot)>(64);
    let preface = connections.preface_timeout();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some((stream, slot)) = tls_rx.recv() => {
                let (tcp, session) = stream.get_ref();
                // A verified client certificate (--tls-client-ca) names the
                // caller; rustls has checked it against the CA.
                let certificate = session
                    .peer_certificates()
                    .and_then(|certs| certs.first())
                    .and_then(|leaf| corium_fleet_common::tls::names(leaf).into_iter().next())
                    .map(Arc::<str>::from);
                let client = Caller {
                    ip: tcp.peer_addr().ok().map(|addr| addr.ip()),
                    certificate,
                };
                serve_connection(&graceful, &proxy, client, stream, slot);
                continue;
            }
            Some((stream, slot)) = plain_rx.recv() => {
                let client = Caller {
                    ip: stream.peer_addr().ok().map(|addr| addr.ip()),
                    certificate: None,
                };
                serve_connection(&graceful, &proxy, client, stream, slot);
                continue;
            }
            () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => break,
        };
        let (stream, _) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(slot) = connections.admit(stream.peer_addr().ok().map(|addr| addr.ip())) else {
            // Over a cap: closed before any TLS or HTTP/2 work.
            proxy
                .metrics
                .rejected_connections
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        match &tls {
            None => {
                // The client speaks first (the HTTP/2 preface): a socket that
                // sends nothing within the timeout is closed, off the accept
                // loop, and its place given back.
                let plain_tx = plain_tx.clone();
                let metrics = Arc::clone(&proxy.metrics);
                tokio::spawn(async move {
                    // `peek` waits for a byte (or the end); `readable` may
                    // report a fresh socket ready before anything arrived.
                    let mut first = [0u8; 1];
                    match tokio::time::timeout(preface, stream.peek(&mut first)).await {
                        Ok(Ok(_)) => {
                            let _ = plain_tx.send((stream, slot)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%error, "client connection failed"),
                        Err(_) => {
                            metrics
                                .preface_timeouts
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            tracing::debug!("client sent nothing within the preface timeout");
                        }
                    }
                });
            }
            Some(config) => {
                // Handshake off the accept loop, bounded, with the
                // certificate current now; the finished stream comes back to
                // be watched by the graceful drain.
                let acceptor = TlsAcceptor::from(config.current());
                let tls_tx = tls_tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let _ = tls_tx.send((stream, slot)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%error, "client TLS handshake failed"),
                        Err(_) => tracing::debug!("client TLS handshake timed out"),
                    }
                });
            }
        }
    }
    tracing::info!("ingress shutting down; draining connections");
    if tokio::time::timeout(DRAIN, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after the drain period; closing");
    }
}
