//! A recording fake of the fleet's gRPC services on 127.0.0.1, for clients
//! tested without a fleet (the SDK, the `corium-fleet` CLI): every call to
//! `corium.v1.Transactor`, `corium.v1.Catalog`, `corium.fleet.v1.FleetAdmin`
//! or `corium.fleet.v1.Requests` is recorded (its path, `authorization` and
//! `corium-database-route` metadata) and answered with one configured
//! status.

use std::convert::Infallible;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

/// One call the fake server saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    /// The gRPC path (`/package.Service/Method`).
    pub path: String,
    /// Its `authorization` metadata, if any.
    pub authorization: Option<String>,
}

/// A call and its `corium-database-route` metadata, if any.
type Seen = Arc<Mutex<Vec<(Call, Option<String>)>>>;

/// The server: calls are recorded until it is dropped (which stops it).
pub struct FakeServer {
    address: String,
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl FakeServer {
    /// Starts a server answering every call with `answer`, on a free
    /// loopback port (inside a Tokio runtime).
    ///
    /// # Panics
    /// When no loopback port can be bound.
    #[must_use]
    pub fn start(answer: tonic::Code) -> Self {
        fn fake<const SERVICE: usize>(seen: &Seen, answer: tonic::Code) -> Fake<SERVICE> {
            Fake {
                seen: Arc::clone(seen),
                answer,
            }
        }
        let seen = Seen::default();
        let incoming = tonic::transport::server::TcpIncoming::bind(([127, 0, 0, 1], 0).into()).unwrap();
        let address = format!("http://{}", incoming.local_addr().unwrap());
        // One service per entry of `SERVICES`.
        let router = tonic::transport::Server::builder()
            .add_service(fake::<0>(&seen, answer))
            .add_service(fake::<1>(&seen, answer))
            .add_service(fake::<2>(&seen, answer))
            .add_service(fake::<3>(&seen, answer));
        let task = tokio::spawn(async move {
            let _ = router.serve_with_incoming(incoming).await;
        });
        Self { address, seen, task }
    }

    /// Where it listens: `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Every call seen so far, in order.
    #[must_use]
    pub fn calls(&self) -> Vec<Call> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(call, _)| call.clone())
            .collect()
    }

    /// Every call's path and `corium-database-route` metadata, in order.
    #[must_use]
    pub fn routes(&self) -> Vec<(String, Option<String>)> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(call, route)| (call.path.clone(), route.clone()))
            .collect()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The services faked, by their full gRPC names.
const SERVICES: [&str; 4] = [
    "corium.v1.Transactor",
    "corium.v1.Catalog",
    "corium.fleet.v1.FleetAdmin",
    "corium.fleet.v1.Requests",
];

/// The gRPC service `SERVICES[SERVICE]`, recording every call and answering
/// it with `answer`.
#[derive(Clone)]
struct Fake<const SERVICE: usize> {
    seen: Seen,
    answer: tonic::Code,
}

impl<const SERVICE: usize> NamedService for Fake<SERVICE> {
    const NAME: &'static str = SERVICES[SERVICE];
}

impl<const SERVICE: usize> Service<http::Request<Body>> for Fake<SERVICE> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner).push((
            Call {
                path: request.uri().path().to_owned(),
                authorization: header(&request, "authorization"),
            },
            header(&request, corium_fleet_wire::metadata::DATABASE_ROUTE),
        ));
        std::future::ready(Ok(tonic::Status::new(self.answer, "fake").into_http()))
    }
}

/// A request's metadata value `name`, if it is text.
fn header(request: &http::Request<Body>, name: &str) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}
