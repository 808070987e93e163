//! A client listener: gRPC over HTTP/2 — cleartext with prior knowledge
//! (h2c) or TLS with ALPN h2 — one task per connection, its calls run
//! inside it (`call_tasks.rs`), graceful drain on shutdown.

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::call_tasks::{CallTasks, WithCalls};
use crate::connection_life::{self, Activity, Closed, Life};
use crate::connections::{Connections, Slot};
use crate::proxy::{Caller, Proxy};

/// Bound on a client's TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Largest header block a client may send (HTTP/2 SETTINGS).
const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// How client connections are served.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionSettings {
    /// HTTP/2 streams one connection may have open at once.
    pub max_streams: u32,
    /// When connections are closed (idle, age).
    pub life: Life,
    /// How long shutdown waits for calls and streams in flight.
    pub drain: Duration,
}

/// Every connection task holds a clone; the drain ends when all are gone.
type Draining = tokio::sync::mpsc::Sender<()>;

struct Connection {
    client: Caller,
    slot: Slot,
    settings: ConnectionSettings,
    shutdown: tokio::sync::watch::Receiver<bool>,
    draining: Draining,
}

fn serve_connection<IO>(proxy: &Arc<Proxy>, stream: IO, connection: Connection)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Connection {
        client,
        slot,
        settings,
        shutdown,
        draining,
    } = connection;
    let activity = Arc::clone(&client.activity);
    let proxy = Arc::clone(proxy);
    let metrics = Arc::clone(&proxy.metrics);
    let service =
        hyper::service::service_fn(move |request| Arc::clone(&proxy).handle(client.clone(), request));
    let calls = CallTasks::default();
    let connection = hyper::server::conn::http2::Builder::new(calls.clone())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(10))
        .max_concurrent_streams(settings.max_streams)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    let connection = WithCalls::new(connection, &calls);
    tokio::spawn(async move {
        // The connection's place is held until it ends.
        let _slot = slot;
        let _draining = draining;
        // Counted as the close is decided: the GOAWAY goes out on the
        // connection's next poll, so a client never sees a close the
        // metrics do not yet show.
        let close = |connection: std::pin::Pin<&mut WithCalls<_>>, why: Closed| {
            let counter = match why {
                Closed::Idle => Some(&metrics.connections_closed_idle),
                Closed::Aged => Some(&metrics.connections_closed_aged),
                Closed::ByClient | Closed::Shutdown => None,
            };
            if let Some(counter) = counter {
                counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            hyper::server::conn::http2::Connection::graceful_shutdown(connection.get_mut().connection());
        };
        let (result, closed) =
            connection_life::run(connection, close, &activity, settings.life, shutdown).await;
        if let Err(error) = result {
            tracing::debug!(%error, ?closed, "client connection ended");
        }
    });
}

/// The client speaks first (the HTTP/2 preface): a cleartext socket that
/// sends nothing within `preface` is closed, off the accept loop, and its
/// place given back; one that speaks goes back to be served.
async fn await_preface(
    stream: TcpStream,
    slot: Slot,
    preface: Duration,
    served: tokio::sync::mpsc::Sender<(TcpStream, Slot)>,
    metrics: Arc<crate::metrics::Metrics>,
) {
    // `peek` waits for a byte (or the end); `readable` may report a fresh
    // socket ready before anything arrived.
    let mut first = [0u8; 1];
    match tokio::time::timeout(preface, stream.peek(&mut first)).await {
        Ok(Ok(_)) => {
            let _ = served.send((stream, slot)).await;
        }
        Ok(Err(error)) => tracing::debug!(%error, "client connection failed"),
        Err(_) => {
            metrics
                .preface_timeouts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!("client sent nothing within the preface timeout");
        }
    }
}

/// A TLS handshake off the accept loop, bounded, with the certificate
/// current now; the finished stream goes back to be served.
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    slot: Slot,
    served: tokio::sync::mpsc::Sender<(tokio_rustls::server::TlsStream<TcpStream>, Slot)>,
) {
    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            let _ = served.send((stream, slot)).await;
        }
        Ok(Err(error)) => tracing::debug!(%error, "client TLS handshake failed"),
        Err(_) => tracing::debug!("client TLS handshake timed out"),
    }
}

/// Serves clients until `shutdown` turns true, then drains (bounded).
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Arc<corium_fleet_common::cert_reload::Reloading<rustls::ServerConfig>>>,
    proxy: Arc<Proxy>,
    connections: Arc<Connections>,
    settings: ConnectionSettings,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let (draining, mut drained) = tokio::sync::mpsc::channel::<()>(1);
    let for_connections = shutdown.clone();
    let connection = |client: Caller, slot: Slot| Connection {
        client,
        slot,
        settings,
        shutdown: for_connections.clone(),
        draining: draining.clone(),
    };
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
                    activity: Activity::new(),
                    written: std::sync::Arc::default(),
                };
                serve_connection(&proxy, stream, connection(client, slot));
                continue;
            }
            Some((stream, slot)) = plain_rx.recv() => {
                let client = Caller {
                    ip: stream.peer_addr().ok().map(|addr| addr.ip()),
                    certificate: None,
                    activity: Activity::new(),
                    written: std::sync::Arc::default(),
                };
                serve_connection(&proxy, stream, connection(client, slot));
                continue;
            }
            () = corium_fleet_common::signal::until_true(&mut shutdown) => break,
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
                tokio::spawn(await_preface(
                    stream,
                    slot,
                    preface,
                    plain_tx.clone(),
                    Arc::clone(&proxy.metrics),
                ));
            }
            Some(config) => {
                tokio::spawn(handshake(
                    TlsAcceptor::from(config.current()),
                    stream,
                    slot,
                    tls_tx.clone(),
                ));
            }
        }
    }
    tracing::info!("ingress shutting down; draining connections");
    // Every connection saw the shutdown signal and sent its GOAWAY; the
    // channel closes when the last connection task ends.
    drop(draining);
    if tokio::time::timeout(settings.drain, drained.recv())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the drain period; closing");
    }
}
