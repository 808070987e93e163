//! `PostgreSQL` connections that acknowledge what they receive at once.
//!
//! A large row (an index blob of 40–500 KB) arrives in the server's 8 KB
//! writes. Linux delays the receiver's ACK by up to 40 ms once a connection
//! looks interactive, and where a path's MSS is larger than those writes
//! (loopback's 64 KB; jumbo frames, 9,000 bytes, inside many cloud networks)
//! the receiver sees only "small" segments and waits for the timer, while
//! the server waits for that ACK before it sends on. Measured inside a node
//! on loopback (docs/design/0015): blob reads of 0.5 ms outside a node took
//! 43 or 87 ms inside one, most of a 4,000-transaction handoff's 500 ms;
//! with quick ACKs the same handoff took 38–43 ms.
//!
//! [`QuickAckConnect`] opens the TCP connection itself (one host, as the
//! fleet's `postgres://` URLs name) and wraps it in [`QuickAckStream`], which
//! re-arms `TCP_QUICKACK` after every read (the kernel clears it as it goes);
//! TLS, authentication and everything else are tokio-postgres's
//! (`Config::connect_raw`). Anything else — several hosts, a Unix socket, a
//! failed connect whose error must be reported — goes through
//! tokio-postgres's own `connect`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use deadpool_postgres::tokio_postgres::config::Host;
use deadpool_postgres::tokio_postgres::tls::MakeTlsConnect;
use deadpool_postgres::tokio_postgres::{self, Client, Config};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_postgres_rustls::MakeRustlsConnect;

type BoxFuture<'a, T> = Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A TCP stream that asks for an immediate ACK after every read.
pub struct QuickAckStream(TcpStream);

impl QuickAckStream {
    /// Wraps `stream`, without Nagle's delay on its writes.
    ///
    /// # Errors
    /// The socket refuses the option.
    pub fn new(stream: TcpStream) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        let quick = Self(stream);
        quick.quick_ack();
        Ok(quick)
    }

    fn quick_ack(&self) {
        // Best effort: a socket that refuses it only acknowledges later.
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }
}

impl AsyncRead for QuickAckStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = self.get_mut();
        let read = Pin::new(&mut this.0).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.quick_ack();
        }
        read
    }
}

impl AsyncWrite for QuickAckStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

/// The one TCP host and port `config` names, if that is all it names.
fn single_tcp_host(config: &Config) -> Option<(String, u16)> {
    let [Host::Tcp(host)] = config.get_hosts() else {
        return None;
    };
    if !config.get_hostaddrs().is_empty() {
        return None;
    }
    let port = match config.get_ports() {
        [] => 5432,
        [port] => *port,
        _ => return None,
    };
    Some((host.clone(), port))
}

/// Connects to `host:port` within `timeout`, with the keepalive `config` asks for.
async fn open_tcp(config: &Config, host: &str, port: u16) -> io::Result<TcpStream> {
    let connecting = TcpStream::connect((host, port));
    let stream = match config.get_connect_timeout() {
        Some(timeout) => tokio::time::timeout(*timeout, connecting)
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "connect timed out"))??,
        None => connecting.await?,
    };
    if config.get_keepalives() {
        let mut keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive)?;
    }
    Ok(stream)
}

/// Drives a connection until it closes, as deadpool's own connect does.
fn drive<S>(connection: S) -> JoinHandle<()>
where
    S: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "postgres connection closed");
        }
    })
}

/// deadpool's connector for the fleet's pools: [`QuickAckStream`]s.
pub struct QuickAckConnect {
    /// TLS as Corium's own store makes it (the platform's roots).
    pub tls: MakeRustlsConnect,
}

impl deadpool_postgres::Connect for QuickAckConnect {
    fn connect(
        &self,
        config: &Config,
    ) -> BoxFuture<'_, Result<(Client, JoinHandle<()>), tokio_postgres::Error>> {
        let mut tls = self.tls.clone();
        let config = config.clone();
        Box::pin(async move {
            if let Some((host, port)) = single_tcp_host(&config)
                && let Ok(stream) = open_tcp(&config, &host, port).await
                && let Ok(stream) = QuickAckStream::new(stream)
            {
                let Ok(connector) = MakeTlsConnect::<QuickAckStream>::make_tls_connect(&mut tls, &host);
                let (client, connection) = config.connect_raw(stream, connector).await?;
                return Ok((client, drive(connection)));
            }
            let (client, connection) = config.connect(tls).await?;
            Ok((client, drive(connection)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_tcp_host_is_dialled_directly() {
        let one: Config = "postgres://u@db.example:6543/x".parse().unwrap();
        assert_eq!(single_tcp_host(&one), Some(("db.example".into(), 6543)));
        let default_port: Config = "postgres://u@db.example/x".parse().unwrap();
        assert_eq!(single_tcp_host(&default_port), Some(("db.example".into(), 5432)));
        let two: Config = "host=a,b user=u dbname=x".parse().unwrap();
        assert_eq!(single_tcp_host(&two), None);
        let socket: Config = "host=/run/postgresql user=u dbname=x".parse().unwrap();
        assert_eq!(single_tcp_host(&socket), None);
    }

    #[tokio::test]
    async fn reads_rearm_quick_ack_and_bytes_pass_through() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            socket.write_all(&vec![7; 200_000]).await.unwrap();
            let mut reply = [0; 4];
            socket.read_exact(&mut reply).await.unwrap();
            reply
        });
        let mut stream = QuickAckStream::new(TcpStream::connect(address).await.unwrap()).unwrap();
        let mut received = vec![0; 200_000];
        stream.read_exact(&mut received).await.unwrap();
        assert!(received.iter().all(|&byte| byte == 7));
        assert!(socket2::SockRef::from(&stream.0).tcp_quickack().is_ok());
        stream.write_all(b"done").await.unwrap();
        assert_eq!(&server.await.unwrap(), b"done");
    }
}
