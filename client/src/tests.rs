//! The SDK against an in-process gRPC server on 127.0.0.1 that records each
//! call's path and `authorization` metadata and answers every call with one
//! configured status: every call carries the token (unary, `Subscribe` and
//! its reconnects, `request_status`, every retry), none without one, and a
//! refused credential is never retried.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tonic::body::Body;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;

use crate::{Client, Config, Error, ErrorKind, RetryPolicy};

/// One call the fake server saw.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    path: String,
    authorization: Option<String>,
}

type Seen = Arc<Mutex<Vec<Call>>>;

/// A gRPC service named `N::NAME` that records every call and answers it
/// with `answer`.
struct Fake<N> {
    seen: Seen,
    answer: tonic::Code,
    name: PhantomData<fn() -> N>,
}

impl<N> Clone for Fake<N> {
    fn clone(&self) -> Self {
        Self {
            seen: Arc::clone(&self.seen),
            answer: self.answer,
            name: PhantomData,
        }
    }
}

trait Name {
    const NAME: &'static str;
}
struct Transactor;
impl Name for Transactor {
    const NAME: &'static str = "corium.v1.Transactor";
}
struct Catalog;
impl Name for Catalog {
    const NAME: &'static str = "corium.v1.Catalog";
}
struct Requests;
impl Name for Requests {
    const NAME: &'static str = "corium.fleet.v1.Requests";
}

impl<N: Name> NamedService for Fake<N> {
    const NAME: &'static str = N::NAME;
}

impl<N> Service<http::Request<Body>> for Fake<N> {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        self.seen.lock().unwrap().push(Call {
            path: request.uri().path().to_owned(),
            authorization: request
                .headers()
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
        });
        std::future::ready(Ok(tonic::Status::new(self.answer, "fake").into_http()))
    }
}

/// A server answering every call with `answer`; its address, what it saw,
/// and its task (abort it when done).
fn serve(answer: tonic::Code) -> (String, Seen, tokio::task::JoinHandle<()>) {
    fn fake<N>(seen: &Seen, answer: tonic::Code) -> Fake<N> {
        Fake {
            seen: Arc::clone(seen),
            answer,
            name: PhantomData,
        }
    }
    let seen = Seen::default();
    let incoming = tonic::transport::server::TcpIncoming::bind(([127, 0, 0, 1], 0).into()).unwrap();
    let address = format!("http://{}", incoming.local_addr().unwrap());
    let router = tonic::transport::Server::builder()
        .add_service(fake::<Transactor>(&seen, answer))
        .add_service(fake::<Catalog>(&seen, answer))
        .add_service(fake::<Requests>(&seen, answer));
    let task = tokio::spawn(async move {
        let _ = router.serve_with_incoming(incoming).await;
    });
    (address, seen, task)
}

fn config(address: &str) -> Config {
    let mut config = Config::new(address).with_retry(RetryPolicy {
        budget: Duration::from_secs(10),
        max_attempts: 3,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
    });
    config.request_timeout = Duration::from_secs(5);
    config
}

/// Makes every kind of call once; returns each one's error.
async fn every_call(client: &Client) -> Vec<Error> {
    let db = client.database("orders");
    let subscribe = async {
        tokio::time::timeout(Duration::from_secs(20), db.subscribe(0).next())
            .await
            .expect("the subscription gives up in time")
    };
    vec![
        db.create("[]").await.unwrap_err(),
        db.transact_edn("[]").await.unwrap_err(),
        db.status().await.unwrap_err(),
        db.request_status("9b1de1a6-6c1e-4a5e-9f3b-0d0c6c1f2a10")
            .await
            .unwrap_err(),
        subscribe.await.unwrap_err(),
    ]
}

const PATHS: [&str; 5] = [
    "/corium.v1.Catalog/CreateDatabase",
    "/corium.v1.Transactor/Transact",
    "/corium.v1.Transactor/Status",
    "/corium.fleet.v1.Requests/Status",
    "/corium.v1.Transactor/Subscribe",
];

#[tokio::test]
async fn every_call_carries_the_token_and_refused_credentials_are_not_retried() {
    for code in [tonic::Code::Unauthenticated, tonic::Code::PermissionDenied] {
        let (address, seen, server) = serve(code);
        let client = Client::connect(config(&address).with_token("s3cret"))
            .await
            .unwrap();
        for error in every_call(&client).await {
            assert_eq!(error.kind(), ErrorKind::GiveUp, "{error:?}");
            assert!(
                matches!(&error, Error::Status(status) if status.code() == code),
                "{error:?}"
            );
        }
        let seen = seen.lock().unwrap().clone();
        let expected: Vec<Call> = PATHS
            .iter()
            .map(|path| Call {
                path: (*path).to_owned(),
                authorization: Some("Bearer s3cret".to_owned()),
            })
            .collect();
        // One attempt each: a refused credential is not retried.
        assert_eq!(seen, expected, "{code:?}");
        server.abort();
    }
}

#[tokio::test]
async fn without_a_token_no_authorization_is_sent() {
    let (address, seen, server) = serve(tonic::Code::Unauthenticated);
    let client = Client::connect(config(&address)).await.unwrap();
    every_call(&client).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), PATHS.len(), "{seen:?}");
    assert!(seen.iter().all(|call| call.authorization.is_none()), "{seen:?}");
    server.abort();
}

#[tokio::test]
async fn every_retry_and_every_resubscribe_carries_the_token() {
    let (address, seen, server) = serve(tonic::Code::Unavailable);
    let client = Client::connect(config(&address).with_token("s3cret"))
        .await
        .unwrap();
    every_call(&client).await;
    let seen = seen.lock().unwrap().clone();
    for path in PATHS {
        let attempts: Vec<_> = seen.iter().filter(|call| call.path == path).collect();
        assert_eq!(attempts.len(), 3, "{path}: {seen:?}");
        assert!(
            attempts
                .iter()
                .all(|call| call.authorization.as_deref() == Some("Bearer s3cret")),
            "{path}: {seen:?}"
        );
    }
    server.abort();
}

#[tokio::test]
async fn a_token_that_is_not_metadata_is_a_configuration_error() {
    let error = Client::connect(Config::new("http://127.0.0.1:1").with_token("two\nlines"))
        .await
        .err()
        .expect("refused");
    assert!(matches!(error, Error::Config(_)), "{error:?}");
}

#[tokio::test]
async fn the_interceptor_handed_out_attaches_the_token() {
    use tonic::service::Interceptor as _;
    let client = Client::connect(Config::new("http://127.0.0.1:1").with_token("s3cret"))
        .await
        .unwrap();
    let request = client.interceptor().call(tonic::Request::new(())).unwrap();
    assert_eq!(
        request.metadata().get("authorization").unwrap().to_str().unwrap(),
        "Bearer s3cret"
    );
}
