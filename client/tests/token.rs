//! The SDK against an in-process gRPC server on 127.0.0.1 that records each
//! call's path, `authorization` and `corium-database-route` metadata and
//! answers every call with one configured status: every call carries the
//! token (unary, `Subscribe` and its reconnects, `request_status`, every
//! retry), none without one, a refused credential is never retried, and
//! every call about a database carries its route header, retries and
//! resubscribes included.

use std::time::Duration;

use corium_fleet_tests::fake_server::{Call, FakeServer};

use corium_fleet_client::{Client, Config, Error, ErrorKind, RetryPolicy};

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
        let server = FakeServer::start(code);
        let client = Client::connect(config(server.address()).with_token("s3cret"))
            .await
            .unwrap();
        for error in every_call(&client).await {
            assert_eq!(error.kind(), ErrorKind::GiveUp, "{error:?}");
            assert!(
                matches!(&error, Error::Status(status) if status.code() == code),
                "{error:?}"
            );
        }
        let seen = server.calls();
        let expected: Vec<Call> = PATHS
            .iter()
            .map(|path| Call {
                path: (*path).to_owned(),
                authorization: Some("Bearer s3cret".to_owned()),
            })
            .collect();
        // One attempt each: a refused credential is not retried.
        assert_eq!(seen, expected, "{code:?}");
    }
}

#[tokio::test]
async fn without_a_token_no_authorization_is_sent() {
    let server = FakeServer::start(tonic::Code::Unauthenticated);
    let client = Client::connect(config(server.address())).await.unwrap();
    every_call(&client).await;
    let seen = server.calls();
    assert_eq!(seen.len(), PATHS.len(), "{seen:?}");
    assert!(seen.iter().all(|call| call.authorization.is_none()), "{seen:?}");
}

#[tokio::test]
async fn every_retry_and_every_resubscribe_carries_the_token() {
    let server = FakeServer::start(tonic::Code::Unavailable);
    let client = Client::connect(config(server.address()).with_token("s3cret"))
        .await
        .unwrap();
    every_call(&client).await;
    let seen = server.calls();
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

#[tokio::test]
async fn every_call_and_every_retry_carries_the_database_route() {
    let server = FakeServer::start(tonic::Code::Unavailable);
    let client = Client::connect(config(server.address())).await.unwrap();
    every_call(&client).await;
    let routes = server.routes();
    for path in PATHS {
        let attempts: Vec<_> = routes.iter().filter(|(seen, _)| seen == path).collect();
        assert_eq!(attempts.len(), 3, "{path}: {routes:?}");
        assert!(
            attempts
                .iter()
                .all(|(_, route)| route.as_deref() == Some("orders")),
            "{path}: {routes:?}"
        );
    }
}
