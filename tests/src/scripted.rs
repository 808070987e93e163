//! A scripted hop in front of one node: an HTTP/2 (h2c) proxy on loopback
//! that the node advertises as its endpoint, so the ingress routes to it.
//! Every call passes through, except `Transact`, whose attempts follow a
//! script — answer a status without forwarding (the node never sees the
//! call), forward and then lose the answer (reset the stream, or cut the
//! answer mid-body), forward and answer something else, forward and hold the
//! answer — while the hop counts every `Transact` it received. Tests drive a
//! stock Corium client through the real ingress against it and read off how
//! often the request reached the hop: how often the ingress and the client
//! sent it again.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response};

use crate::backend::Backend;
use crate::fleet::Fleet;
use crate::ports::free_port;

/// The hop's error (a concrete type: hyper's bounds on a boxed error trip
/// rustc's `Send` proof for the spawned connection, rust-lang/rust#102211).
#[derive(Debug)]
pub struct HopError(String);

impl std::fmt::Display for HopError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HopError {}

fn hop_error(error: impl std::fmt::Display) -> HopError {
    HopError(error.to_string())
}

type Body = UnsyncBoxBody<Bytes, HopError>;

/// What the hop does with one `Transact` attempt.
#[derive(Clone, Debug)]
pub enum Step {
    /// Forward it and return the node's answer.
    Pass,
    /// Answer this status without forwarding: the node never sees it.
    Refuse(tonic::Status),
    /// Forward it, wait for the node's whole answer (the transaction
    /// committed), then reset the stream instead of answering.
    CommitThenReset,
    /// Forward it, then send the node's response headers and cut the answer
    /// off before its body and trailers.
    CommitThenCut,
    /// Forward it, then answer the status `make` builds from the request's
    /// `corium-request-id` (if any) instead of the node's answer.
    CommitThenAnswer(fn(Option<&str>) -> tonic::Status),
    /// Forward it, then hold the answer this long before passing it on.
    CommitThenHold(Duration),
}

/// One `Transact` the hop received.
#[derive(Clone, Debug)]
pub struct Received {
    /// Its `corium-request-id`, if it carried one.
    pub request_id: Option<String>,
    /// Its `x-request-id`: one per call a client made (the ingress makes
    /// one for a call without), the same on every attempt of that call.
    pub correlation: Option<String>,
    /// Its `grpc-timeout` in milliseconds, as the ingress sent it (the
    /// caller's deadline less the time the call spent before this hop).
    pub grpc_timeout_ms: Option<u64>,
    /// What the hop did with it.
    pub step: String,
}

/// A `grpc-timeout` value (`<digits><unit>`) in milliseconds.
fn timeout_ms(value: &str) -> Option<u64> {
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    let amount: u64 = digits.parse().ok()?;
    match unit {
        "H" => amount.checked_mul(3_600_000),
        "M" => amount.checked_mul(60_000),
        "S" => amount.checked_mul(1_000),
        "m" => Some(amount),
        "u" => Some(amount / 1_000),
        "n" => Some(amount / 1_000_000),
        _ => None,
    }
}

struct State {
    target: String,
    script: Mutex<VecDeque<Step>>,
    received: Mutex<Vec<Received>>,
    calls: AtomicUsize,
    client:
        hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
}

/// The hop: its port, its script, what it received.
pub struct ScriptedHop {
    /// The loopback port it listens on.
    pub port: u16,
    state: Arc<State>,
    accept: tokio::task::AbortHandle,
}

const TRANSACT: &str = "/corium.v1.Transactor/Transact";

impl ScriptedHop {
    /// A one-node fleet on the filesystem whose node advertises a hop in
    /// front of it, and that hop: ingresses started over the fleet route
    /// through the hop.
    ///
    /// # Panics
    /// When the hop's port cannot be bound or the node does not start.
    pub async fn in_front_of_one_node() -> (Fleet, Self) {
        let hop_port = free_port();
        let fleet = Fleet::builder(Backend::Filesystem)
            .nodes(1)
            .front(0, hop_port)
            .start()
            .await;
        let hop = Self::start(hop_port, fleet.nodes[0].endpoint()).await;
        (fleet, hop)
    }

    /// Listens on `port` (loopback) and forwards to the node at `target`
    /// (`http://127.0.0.1:PORT`). Every `Transact` passes until a script is
    /// set.
    ///
    /// # Panics
    /// When the port cannot be bound.
    pub async fn start(port: u16, target: String) -> Self {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let state = Arc::new(State {
            target,
            script: Mutex::new(VecDeque::new()),
            received: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
            client: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        });
        let accept = {
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |request| {
                            let state = Arc::clone(&state);
                            async move { state.serve(request).await }
                        });
                        let _ =
                            hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                                .await;
                    });
                }
            })
            .abort_handle()
        };
        Self { port, state, accept }
    }

    /// The endpoint the node advertises.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The steps for the next `Transact` attempts, in order (then `Pass`).
    pub fn script(&self, steps: impl IntoIterator<Item = Step>) {
        let mut script = self.state.script.lock().unwrap_or_else(PoisonError::into_inner);
        script.clear();
        script.extend(steps);
    }

    /// Every `Transact` received since the last call, and forgets them.
    #[must_use]
    pub fn take_received(&self) -> Vec<Received> {
        std::mem::take(&mut *self.state.received.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Calls of any method the hop has seen.
    #[must_use]
    pub fn calls(&self) -> usize {
        self.state.calls.load(Ordering::Relaxed)
    }
}

impl Drop for ScriptedHop {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A response body that yields the first bytes of the answer, waits long
/// enough for the headers and that DATA frame to leave (h2 drops what is
/// still queued for a stream it resets), and then fails: an answer cut off
/// mid-body.
struct CutOff {
    prefix: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for CutOff {
    type Data = Bytes;
    type Error = HopError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, HopError>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        std::task::ready!(self.pause.as_mut().poll(cx));
        Poll::Ready(Some(Err(hop_error("the scripted hop cut the answer off"))))
    }
}

impl State {
    async fn serve(&self, request: Request<Incoming>) -> Result<Response<Body>, HopError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let transact = request.uri().path() == TRANSACT;
        let step = if transact {
            let step = self.script.lock().unwrap().pop_front().unwrap_or(Step::Pass);
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            };
            self.received.lock().unwrap().push(Received {
                request_id: header(corium_fleet_wire::metadata::REQUEST_ID),
                correlation: header(corium_fleet_wire::metadata::X_REQUEST_ID),
                grpc_timeout_ms: header("grpc-timeout").as_deref().and_then(timeout_ms),
                step: format!("{step:?}"),
            });
            step
        } else {
            Step::Pass
        };
        let request_id = request
            .headers()
            .get(corium_fleet_wire::metadata::REQUEST_ID)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        if let Step::Refuse(status) = &step {
            return Ok(status.clone().into_http::<Body>());
        }
        let response = self.forward(request).await?;
        match step {
            Step::Pass => Ok(response.map(|body| body.map_err(hop_error).boxed_unsync())),
            Step::Refuse(_) => unreachable!("answered above"),
            Step::CommitThenReset => {
                let _ = response.into_body().collect().await;
                Err(hop_error(
                    "the scripted hop reset the stream after the node answered",
                ))
            }
            Step::CommitThenCut => {
                let (parts, body) = response.into_parts();
                let answer = body.collect().await.map_err(hop_error)?.to_bytes();
                let prefix = answer.slice(..answer.len().min(3));
                let cut = CutOff {
                    prefix: Some(prefix),
                    pause: Box::pin(tokio::time::sleep(Duration::from_millis(200))),
                };
                Ok(Response::from_parts(parts, cut.boxed_unsync()))
            }
            Step::CommitThenAnswer(make) => {
                let _ = response.into_body().collect().await;
                Ok(make(request_id.as_deref()).into_http::<Body>())
            }
            Step::CommitThenHold(hold) => {
                let (parts, body) = response.into_parts();
                let collected = body.collect().await.map_err(hop_error)?;
                tokio::time::sleep(hold).await;
                Ok(Response::from_parts(
                    parts,
                    collected
                        .map_err(|never: Infallible| -> HopError { match never {} })
                        .boxed_unsync(),
                ))
            }
        }
    }

    async fn forward(&self, request: Request<Incoming>) -> Result<Response<Incoming>, HopError> {
        let (parts, body) = request.into_parts();
        let body = body.collect().await.map_err(hop_error)?.to_bytes();
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str());
        let mut forwarded = Request::builder()
            .method(parts.method.clone())
            .uri(format!("{}{path}", self.target));
        for (name, value) in &parts.headers {
            if name != hyper::header::HOST {
                forwarded = forwarded.header(name, value);
            }
        }
        let forwarded = forwarded.body(Full::new(body)).map_err(hop_error)?;
        self.client.request(forwarded).await.map_err(hop_error)
    }
}
