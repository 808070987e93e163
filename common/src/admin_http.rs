//! The plain HTTP/1.1 admin port every fleet process serves: `/metrics`,
//! `/healthz`, `/readyz` (Kubernetes probes cannot speak gRPC over TLS, so
//! this port is plaintext), open to whoever reaches the port; and what shows
//! the fleet's inside (the ingress's `/status`, `/status.json`, a node's
//! `/debug/*`: node ids, internal endpoints, every owned database), only to
//! an operator ([`OperatorGate`]). The process supplies the answers.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use corium_protocol::authz::Guard;
use futures::future::BoxFuture;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::auth::AuthFlags;

/// One request to the admin port, as a [`Handler`] sees it.
#[derive(Clone, Debug, Default)]
pub struct AdminRequest {
    /// The path asked for.
    pub path: String,
    /// The address the connection came from.
    pub peer: Option<IpAddr>,
    /// The request's `authorization` header, if it sent one.
    pub authorization: Option<HeaderValue>,
}

impl AdminRequest {
    /// A request for `path` from `peer`, without credentials.
    #[must_use]
    pub fn new(path: impl Into<String>, peer: Option<IpAddr>) -> Self {
        Self {
            path: path.into(),
            peer,
            authorization: None,
        }
    }
}

/// Answers an admin request with `(status, body)`.
pub type Handler = Arc<dyn Fn(AdminRequest) -> BoxFuture<'static, (u16, String)> + Send + Sync>;

/// Whether `path` is answered to anyone who reaches the port: the probes
/// (the kubelet connects from the node's address, with no credential) and
/// Prometheus's scrape. Every other path, including ones not yet written,
/// goes through the [`OperatorGate`]: a new debug page is closed by default.
#[must_use]
pub fn is_open(path: &str) -> bool {
    matches!(path, "/metrics" | "/healthz" | "/readyz")
}

/// Who may read the admin paths that are not [open](is_open): a connection
/// from a loopback address (`kubectl port-forward` arrives from 127.0.0.1
/// inside the pod; a shell on the machine), or a request whose
/// `Authorization: Bearer <token>` the process's own guard authenticates as
/// an operator (`--operator-role`, as the gRPC operator surface decides).
/// Everyone else who reaches the port (it is plaintext, and often exposed
/// to the cluster for probes and scrapes) is refused: those pages list node
/// ids, internal endpoints and every owned database (issue 35).
#[derive(Clone)]
pub struct OperatorGate {
    guard: Guard,
    auth: AuthFlags,
    trust_loopback: bool,
}

/// The status of a refusal by the [`OperatorGate`].
pub const FORBIDDEN: u16 = 403;

impl OperatorGate {
    /// The gate of a process that authenticates with `guard`, built from
    /// `auth` (whose `--operator-role` says who is an operator). Loopback
    /// peers are admitted unless [`OperatorGate::trust_loopback`] says
    /// otherwise.
    #[must_use]
    pub fn new(guard: Guard, auth: AuthFlags) -> Self {
        Self {
            guard,
            auth,
            trust_loopback: true,
        }
    }

    /// Whether a loopback peer is admitted without a token. Off where every
    /// connection arrives from loopback whoever made it (a service-mesh
    /// sidecar that proxies inbound traffic from 127.0.0.6).
    #[must_use]
    pub fn trust_loopback(mut self, trust: bool) -> Self {
        self.trust_loopback = trust;
        self
    }

    /// Whether `request` may read its path: `Ok` for an open path, a
    /// loopback peer (when trusted) or an operator's token; else the
    /// refusal's status and one-line body, saying what is needed.
    ///
    /// # Errors
    /// `(403, what is needed)` for anyone else.
    pub fn check(&self, request: &AdminRequest) -> Result<(), (u16, String)> {
        if is_open(&request.path) {
            return Ok(());
        }
        if self.trust_loopback && request.peer.is_some_and(|peer| peer.to_canonical().is_loopback()) {
            return Ok(());
        }
        let credentials = crate::auth::bearer(request.authorization.as_ref().map(HeaderValue::as_bytes));
        let operator = self
            .guard
            .authenticate(&credentials)
            .is_ok_and(|principal| self.auth.is_operator(&principal));
        if operator {
            return Ok(());
        }
        tracing::debug!(path = %request.path, peer = ?request.peer, "admin request refused: not an operator");
        let from = if self.trust_loopback {
            "a connection from loopback (kubectl port-forward) or "
        } else {
            ""
        };
        Err((
            FORBIDDEN,
            format!(
                "forbidden: {} needs {from}an operator's token \
                 (Authorization: Bearer <token> of a principal with role {:?})\n",
                request.path,
                self.auth.operator_role()
            ),
        ))
    }
}

async fn answer(
    handler: Handler,
    peer: Option<IpAddr>,
    request: Request<hyper::body::Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let content_type = content_type(&path);
    let authorization = request.headers().get(hyper::header::AUTHORIZATION).cloned();
    let (status, body) = handler(AdminRequest {
        path,
        peer,
        authorization,
    })
    .await;
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // A refusal is one line of text, whatever the page would have been.
    let content_type = if status == FORBIDDEN {
        "text/plain; charset=utf-8"
    } else {
        content_type
    };
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
        crate::metrics::CONTENT_TYPE
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
            () = crate::signal::until_true(&mut shutdown) => return,
        };
        let Ok((stream, peer)) = accepted else { continue };
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                answer(Arc::clone(&handler), Some(peer.ip()), request)
            });
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

    fn gate(args: &[&str]) -> OperatorGate {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            auth: AuthFlags,
        }
        let cli =
            <Cli as clap::Parser>::try_parse_from(std::iter::once("x").chain(args.iter().copied())).unwrap();
        let guard = cli
            .auth
            .guard(Arc::new(corium_protocol::authz::AllowAll))
            .unwrap();
        OperatorGate::new(guard, cli.auth)
    }

    fn request(path: &str, peer: &str, token: Option<&str>) -> AdminRequest {
        AdminRequest {
            path: path.to_owned(),
            peer: Some(peer.parse().unwrap()),
            authorization: token.map(|token| HeaderValue::from_str(&format!("Bearer {token}")).unwrap()),
        }
    }

    const DEV: &str = corium_protocol::auth::DEFAULT_DEV_TOKEN;
    const SECRET: &str = "this-deployment-s-own-token";

    /// Issue 35: `/status.json`, `/status` and `/debug/*` list node ids,
    /// internal endpoints and every owned database; they answered anyone.
    #[test]
    fn only_loopback_or_an_operator_reads_what_is_not_a_probe_or_a_scrape() {
        // `--serve-token`'s principal is an operator.
        let gate = gate(&["--serve-token", SECRET]);
        for path in ["/status", "/status.json", "/debug/root-ops", "/anything-new"] {
            for loopback in ["127.0.0.1", "::1", "::ffff:127.0.0.1", "127.0.0.2"] {
                assert_eq!(
                    gate.check(&request(path, loopback, None)),
                    Ok(()),
                    "{path} {loopback}"
                );
            }
            let (status, body) = gate.check(&request(path, "10.0.0.1", None)).unwrap_err();
            assert_eq!(status, 403);
            assert!(body.contains("operator") && body.contains("loopback"), "{body}");
            assert_eq!(body.lines().count(), 1, "{body}");
            assert!(gate.check(&request(path, "10.0.0.1", Some("wrong"))).is_err());
            assert!(gate.check(&request(path, "10.0.0.1", Some(DEV))).is_err());
            assert!(gate.check(&request(path, "::ffff:10.0.0.1", None)).is_err());
            assert!(gate.check(&request(path, "192.0.2.2", None)).is_err());
            assert_eq!(gate.check(&request(path, "10.0.0.1", Some(SECRET))), Ok(()));
        }
        // Probes and scrapes stay open to anyone.
        for path in ["/metrics", "/healthz", "/readyz"] {
            assert_eq!(gate.check(&request(path, "10.0.0.1", None)), Ok(()), "{path}");
        }
    }

    #[test]
    fn a_token_that_authenticates_without_the_operator_role_is_refused() {
        // The development token authenticates, as a data admin: not as one
        // of these operators.
        let gate = gate(&["--operator-role", "fleet-operators"]);
        let (status, body) = gate
            .check(&request("/status.json", "10.0.0.1", Some(DEV)))
            .unwrap_err();
        assert_eq!(status, 403);
        assert!(body.contains("fleet-operators"), "{body}");
        assert_eq!(
            gate.check(&request("/status.json", "127.0.0.1", Some(DEV))),
            Ok(())
        );
    }

    #[test]
    fn loopback_can_be_distrusted() {
        let gate = gate(&["--serve-token", SECRET]).trust_loopback(false);
        let (status, body) = gate.check(&request("/status", "127.0.0.1", None)).unwrap_err();
        assert_eq!(status, 403);
        assert!(!body.contains("loopback"), "{body}");
        assert_eq!(gate.check(&request("/status", "127.0.0.1", Some(SECRET))), Ok(()));
        assert_eq!(gate.check(&request("/metrics", "127.0.0.1", None)), Ok(()));
    }
}
