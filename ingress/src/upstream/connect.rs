//! Opening a connection to a node: TCP, then TLS (ALPN h2) for `https://`
//! or HTTP/2 with prior knowledge for `http://`, then the HTTP/2 handshake;
//! a task drives the connection and PINGs it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper::http::Uri;
use hyper::http::uri::{Authority, Scheme};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How connections to nodes are made and watched.
pub(crate) struct Settings {
    /// Bound on TCP connect + TLS + HTTP/2 handshake.
    pub connect_timeout: Duration,
    /// The fleet CA and this ingress's client identity, for `https://`
    /// endpoints, as currently on disk (each new connection takes the
    /// current one); `None`: an `https://` endpoint is a connect failure.
    pub tls: Option<Arc<corium_fleet_common::cert_reload::Reloading<rustls::ClientConfig>>>,
    /// A PING this often…
    pub keepalive_interval: Duration,
    /// …unanswered this long closes the connection and fails its calls.
    pub keepalive_timeout: Duration,
    /// With mTLS: the node id a node's certificate must name for an
    /// endpoint (`--verify-node-identity`), so a registry record pointing
    /// a node's id at someone else's endpoint is refused at the handshake.
    /// `None`: the certificate is checked against the endpoint's host name.
    pub node_identity: Option<NodeOf>,
}

/// The node id of the member at an endpoint, if it is one.
pub(crate) type NodeOf = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Flow-control window of one stream from a node: the most a stream whose
/// client does not read can hold here.
const STREAM_WINDOW: u32 = 256 * 1024;

/// Flow-control window of a whole connection to a node: 1,024 stalled
/// streams' worth, so a few cannot stall the rest (hyper's client
/// defaults, used before, were 2 MiB and 5 MiB: three stalled streams
/// stalled every call).
const CONNECTION_WINDOW: u32 = 1024 * STREAM_WINDOW;

/// The scheme and authority every request on a connection is sent under:
/// the endpoint's, parsed once when the connection opens.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    pub scheme: Scheme,
    pub authority: Authority,
}

/// Connects to `endpoint`; `ended` runs once the connection is gone.
pub(super) async fn open(
    settings: &Settings,
    endpoint: &str,
    ended: impl FnOnce() + Send + 'static,
) -> Result<(h2::client::SendRequest<Bytes>, Origin), String> {
    let uri: Uri = endpoint
        .parse()
        .map_err(|error| format!("bad endpoint {endpoint:?}: {error}"))?;
    let (Some(scheme), Some(authority)) = (uri.scheme().cloned(), uri.authority().cloned()) else {
        return Err(format!(
            "endpoint {endpoint:?} is not an absolute http:// or https:// address"
        ));
    };
    let origin = Origin { scheme, authority };
    let secure = match uri.scheme_str() {
        Some("https") => true,
        // With the mTLS hop configured, never dial a node in cleartext: the
        // principal would travel unprotected to whoever answers.
        Some("http") if settings.tls.is_some() => {
            return Err(format!(
                "endpoint {endpoint:?} is cleartext but the hop to nodes is mutual TLS; refused"
            ));
        }
        Some("http") => false,
        _ => return Err(format!("endpoint {endpoint:?} is neither http:// nor https://")),
    };
    let host = uri
        .host()
        .ok_or_else(|| format!("endpoint {endpoint:?} names no host"))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let tcp = TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|error| format!("tcp connect: {error}"))?;
    tcp.set_nodelay(true)
        .map_err(|error| format!("TCP_NODELAY: {error}"))?;
    if secure {
        let Some(tls) = &settings.tls else {
            return Err(format!(
                "{endpoint} needs TLS, and no --upstream-ca is configured"
            ));
        };
        // The name the node's certificate must carry: its node id when
        // identities are verified, else the endpoint's host.
        let expected = match &settings.node_identity {
            Some(node_of) => node_of(endpoint).ok_or_else(|| {
                format!("{endpoint} is no member's endpoint; its node id cannot be verified")
            })?,
            None => host.clone(),
        };
        let name = rustls::pki_types::ServerName::try_from(expected.clone())
            .map_err(|error| format!("server name {expected:?}: {error}"))?;
        let stream = tokio_rustls::TlsConnector::from(tls.current())
            .connect(name, tcp)
            .await
            .map_err(|error| format!("tls handshake: {error}"))?;
        Ok((handshake(settings, stream, ended).await?, origin))
    } else {
        Ok((handshake(settings, tcp, ended).await?, origin))
    }
}

async fn handshake<IO>(
    settings: &Settings,
    io: IO,
    ended: impl FnOnce() + Send + 'static,
) -> Result<h2::client::SendRequest<Bytes>, String>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, mut connection) = h2::client::Builder::new()
        .enable_push(false)
        // Stream isolation on the one connection to a node: a stream whose
        // client stops reading keeps at most STREAM_WINDOW of the node's
        // data here, and the connection window holds many times that, so
        // stalled streams cannot use up the window every other call to the
        // node shares (design note 0012).
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_send_buffer_size(1024 * 1024)
        .max_header_list_size(16 * 1024)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(|error| format!("http/2 handshake: {error}"))?;
    // Taken once per connection; only a second call returns `None`.
    let Some(mut ping_pong) = connection.ping_pong() else {
        return Err("http/2 connection without its PING handle".to_owned());
    };
    let interval = settings.keepalive_interval;
    let timeout = settings.keepalive_timeout;
    tokio::spawn(async move {
        let keepalive = async move {
            loop {
                tokio::time::sleep(interval).await;
                match tokio::time::timeout(timeout, ping_pong.ping(h2::Ping::opaque())).await {
                    Ok(Ok(_pong)) => {}
                    Ok(Err(error)) => return format!("ping failed: {error}"),
                    Err(_) => return format!("no PING answer within {timeout:?}"),
                }
            }
        };
        tokio::select! {
            outcome = connection => {
                if let Err(error) = outcome {
                    tracing::debug!(%error, "transactor connection ended");
                }
            }
            reason = keepalive => {
                // Dropping the connection fails every call still on it.
                tracing::warn!(%reason, "closing an unresponsive transactor connection");
            }
        }
        ended();
    });
    Ok(send)
}
