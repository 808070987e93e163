//! The node's accepted gRPC connections: TCP with Nagle's algorithm off,
//! and — with mTLS — the TLS handshake done here, with the configuration
//! current at accept time, so rotated certificates apply to new connections
//! without a restart (`corium_fleet_common::cert_reload`).
//!
//! Nagle is off because a response's HEADERS, DATA and trailers frames may
//! leave in separate writes, and with Nagle on each small write after the
//! first waits for the peer's delayed ACK (40 ms on Linux). Measured:
//! `Transact` with a request id (a larger answer) took 44 ms at p50 instead
//! of 0.6 ms before this.

use std::sync::Arc;
use std::time::Duration;

use corium_fleet_common::cert_reload::Reloading;
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};

/// Bound on a caller's TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Handshaken connections waiting for the server to take them.
const BACKLOG: usize = 64;

fn nodelay(stream: &TcpStream) {
    if let Err(error) = stream.set_nodelay(true) {
        tracing::debug!(%error, "cannot set TCP_NODELAY");
    }
}

/// Cleartext connections.
pub(crate) fn plain(listener: TcpListener) -> impl futures::Stream<Item = std::io::Result<TcpStream>> {
    use futures::StreamExt as _;
    TcpListenerStream::new(listener).map(|accepted| accepted.inspect(nodelay))
}

/// mTLS connections, each handshaken with `config` as it is when the
/// connection arrives. Handshakes run off the accept loop, bounded, so a
/// slow or silent caller holds up no one; one that fails is dropped.
pub(crate) fn tls(
    listener: TcpListener,
    config: Arc<Reloading<rustls::ServerConfig>>,
) -> impl futures::Stream<Item = std::io::Result<tokio_rustls::server::TlsStream<TcpStream>>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                // The server stopped taking connections.
                () = sender.closed() => return,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            nodelay(&stream);
            let acceptor = tokio_rustls::TlsAcceptor::from(config.current());
            let sender = sender.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let _ = sender.send(Ok(stream)).await;
                    }
                    Ok(Err(error)) => tracing::debug!(%error, "tls handshake failed"),
                    Err(_) => tracing::debug!("tls handshake timed out"),
                }
            });
        }
    });
    ReceiverStream::new(receiver)
}
