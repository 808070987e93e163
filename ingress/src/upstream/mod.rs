//! The hop to a transactor: one multiplexed HTTP/2 connection per node, on
//! the `h2` crate directly.
//!
//! Why not hyper's client: hyper hands a request body to a separate pipe
//! task that waits for flow-control capacity the connection task assigns
//! only after it flushed the HEADERS frame, so every forwarded unary call
//! cost two writes (and two wake-ups of the transactor) where one does
//! (`strace -c` at concurrency 1; see `docs/design/0008-upstream-h2.md`).
//! Here the HEADERS and the one DATA frame are queued together, before the
//! connection task runs, and leave in one write.
//!
//! Layout:
//! - this file — the connection pool and [`Upstream::send`], which tells a
//!   request that provably never reached the node ([`Failure::Connect`])
//!   from one whose outcome is unknown ([`Failure::Ambiguous`]);
//! - [`connect`] — TCP (+ TLS with ALPN h2, or h2c), the HTTP/2 handshake,
//!   and the PING keepalive that fails a frozen node's calls;
//! - [`body`] — the owner's response body, streamed through.

mod body;
mod connect;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use hyper::http::{Request, Response};

pub(crate) use body::ResponseBody;
pub(crate) use connect::{NodeOf, Settings};

/// How a hop failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The request never reached the node (no connection, a refused
    /// stream): safe to send elsewhere.
    Connect(String),
    /// The request may have reached the node; its outcome is unknown.
    Ambiguous(String),
}

/// A live connection to one node.
#[derive(Clone)]
struct Connection {
    /// Tells this connection from its successors when it ends.
    id: u64,
    send: h2::client::SendRequest<Bytes>,
    /// The node's scheme and authority, which every request on it carries.
    origin: connect::Origin,
}

/// One connect attempt, shared by every call waiting for it.
type Connecting = Shared<BoxFuture<'static, Result<Connection, Arc<str>>>>;

/// A node's entry in the pool: its connection, or the attempt to open one.
enum Slot {
    /// A connect in flight: every caller waits for this one attempt.
    Connecting(Connecting),
    /// An open connection, shared by every call to the node.
    Ready(Connection),
}

/// Connections to the fleet's nodes, keyed by endpoint (`http://…` for
/// h2c, `https://…` for mTLS).
pub(crate) struct Upstream {
    settings: Arc<Settings>,
    slots: Arc<Mutex<HashMap<String, Slot>>>,
    next_id: AtomicU64,
}

impl Upstream {
    /// A pool with no connections yet: each node's is opened by the first
    /// call to it, under `settings`.
    #[must_use]
    pub(crate) fn new(settings: Settings) -> Self {
        Self {
            settings: Arc::new(settings),
            slots: Arc::default(),
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends `request` with `body`, its whole request body, to `endpoint`
    /// under the endpoint's scheme and authority (the request's URI gives
    /// only the path); returns once the response headers arrive.
    ///
    /// A connection found closed before the request went out is replaced
    /// once; a `REFUSED_STREAM` answer (RFC 9113 §8.7: not processed) is a
    /// [`Failure::Connect`]. Dropping the returned future before the
    /// response cancels the stream (`RST_STREAM(CANCEL)`).
    ///
    /// # Errors
    /// [`Failure`], classified as above.
    pub(crate) async fn send(
        &self,
        endpoint: &str,
        request: Request<()>,
        body: Bytes,
    ) -> Result<Response<ResponseBody>, Failure> {
        let mut request = request;
        let mut replaced = false;
        loop {
            let (connection, fresh) = self.connection(endpoint).await?;
            let mut send = match connection.send.clone().ready().await {
                Ok(send) => send,
                Err(error) => {
                    // Nothing was sent: the connection had already ended.
                    self.forget(endpoint, connection.id);
                    if fresh || replaced {
                        return Err(Failure::Connect(format!("{endpoint}: {error}")));
                    }
                    replaced = true;
                    continue;
                }
            };
            *request.uri_mut() = on(&connection.origin, request.uri())
                .map_err(|error| Failure::Connect(format!("{endpoint}: {error}")))?;
            let (response, mut stream) = send.send_request(request, body.is_empty()).map_err(|error| {
                // Refused before anything was queued (the connection ended
                // between `ready` and now).
                self.forget(endpoint, connection.id);
                Failure::Connect(format!("{endpoint}: {error}"))
            })?;
            if !body.is_empty() {
                // Queued beside the HEADERS frame, before the connection
                // task flushes: one write for the whole request.
                stream
                    .send_data(body, true)
                    .map_err(|error| Failure::Ambiguous(format!("{endpoint}: {error}")))?;
            }
            return match response.await {
                Ok(response) => Ok(response.map(ResponseBody::new)),
                Err(error) if error.reason() == Some(h2::Reason::REFUSED_STREAM) => {
                    Err(Failure::Connect(format!("{endpoint}: stream refused: {error}")))
                }
                Err(error) => Err(Failure::Ambiguous(format!("{endpoint}: {error}"))),
            };
        }
    }

    /// The node's connection, connecting if there is none; `true` if this
    /// call waited for a new one.
    async fn connection(&self, endpoint: &str) -> Result<(Connection, bool), Failure> {
        let connecting = {
            let mut slots = lock(&self.slots);
            match slots.get(endpoint) {
                Some(Slot::Ready(connection)) => return Ok((connection.clone(), false)),
                Some(Slot::Connecting(connecting)) => connecting.clone(),
                None => {
                    let connecting = self.start_connect(endpoint);
                    slots.insert(endpoint.to_owned(), Slot::Connecting(connecting.clone()));
                    connecting
                }
            }
        };
        match connecting.await {
            Ok(connection) => Ok((connection, true)),
            Err(error) => Err(Failure::Connect(error.to_string())),
        }
    }

    /// One connect attempt, run as its own task so a caller that gives up
    /// does not abandon it for the callers still waiting.
    fn start_connect(&self, endpoint: &str) -> Connecting {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let settings = Arc::clone(&self.settings);
        let slots = Arc::clone(&self.slots);
        let endpoint = endpoint.to_owned();
        let task = tokio::spawn({
            let endpoint = endpoint.clone();
            async move {
                let ended = {
                    let slots = Arc::clone(&slots);
                    let endpoint = endpoint.clone();
                    move || forget(&slots, &endpoint, id)
                };
                let outcome = match tokio::time::timeout(
                    settings.connect_timeout,
                    connect::open(&settings, &endpoint, ended),
                )
                .await
                {
                    Ok(Ok((send, origin))) => Ok(Connection { id, send, origin }),
                    Ok(Err(error)) => Err(Arc::<str>::from(format!("{endpoint}: {error}"))),
                    Err(_) => Err(Arc::<str>::from(format!(
                        "{endpoint}: no connection within {:?}",
                        settings.connect_timeout
                    ))),
                };
                let mut slots = lock(&slots);
                match &outcome {
                    Ok(connection) => {
                        slots.insert(endpoint, Slot::Ready(connection.clone()));
                    }
                    Err(_) => {
                        slots.remove(&endpoint);
                    }
                }
                outcome
            }
        });
        let slots = Arc::clone(&self.slots);
        async move {
            task.await.unwrap_or_else(|error| {
                // The attempt died before it could clear its slot: clear it
                // here, or every later call would wait on this failure.
                let mut slots = lock(&slots);
                if matches!(slots.get(&endpoint), Some(Slot::Connecting(_))) {
                    slots.remove(&endpoint);
                }
                Err(Arc::<str>::from(format!(
                    "{endpoint}: connect task failed: {error}"
                )))
            })
        }
        .boxed()
        .shared()
    }

    fn forget(&self, endpoint: &str, id: u64) {
        forget(&self.slots, endpoint, id);
    }
}

/// `uri`'s path under `origin`.
fn on(
    origin: &connect::Origin,
    uri: &hyper::http::Uri,
) -> Result<hyper::http::Uri, hyper::http::uri::InvalidUriParts> {
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = Some(origin.scheme.clone());
    parts.authority = Some(origin.authority.clone());
    parts.path_and_query = Some(
        uri.path_and_query()
            .cloned()
            .unwrap_or_else(|| hyper::http::uri::PathAndQuery::from_static("/")),
    );
    hyper::http::Uri::from_parts(parts)
}

fn lock(slots: &Mutex<HashMap<String, Slot>>) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
    slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Drops `endpoint`'s connection if it is still connection `id`.
fn forget(slots: &Mutex<HashMap<String, Slot>>, endpoint: &str, id: u64) {
    let mut slots = lock(slots);
    if matches!(slots.get(endpoint), Some(Slot::Ready(connection)) if connection.id == id) {
        slots.remove(endpoint);
    }
}

/// The keepalive defaults: a PING every 2 s, a connection whose PING goes
/// unanswered for 3 s is closed and its calls fail (a frozen node is noticed
/// in ~5 s instead of each call waiting out its deadline).
pub(crate) const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
/// How long a PING may go unanswered before its connection is closed (see
/// [`KEEPALIVE_INTERVAL`]).
pub(crate) const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);

#[cfg(test)]
mod tests;
