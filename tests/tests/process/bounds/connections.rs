//! Client connections: caps in total and per address, the preface, idle
//! and body-progress bounds, and the cap on calls one client has open.

use std::time::Duration;

use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet, http_get};

use super::TTL;

/// A filesystem fleet and one ingress started with `flags`.
async fn start_with_one_ingress(flags: &[&str]) -> Fleet {
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, flags).await;
    fleet
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_client_cap_are_closed_and_places_come_back() {
    use tokio::io::AsyncReadExt as _;
    let fleet = start_with_one_ingress(&["--max-connections-per-client", "3"]).await;
    let ingress = &fleet.ingresses[0];
    let port = ingress.grpc;
    // Three idle sockets (not even an HTTP/2 preface) take the client's places.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    // The fourth is closed as soon as it is accepted.
    let mut fourth = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), fourth.read(&mut buffer))
        .await
        .expect("closed at once, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_ingress_rejected_connections_total")
            .is_some_and(|count| count >= 1.0),
        "{metrics}"
    );
    // Closing one gives its place back: a real call is served again.
    held.pop();
    let address = ingress.endpoint();
    corium_fleet_tests::eventually(
        Duration::from_secs(10),
        "a call after a place came back",
        async || corium::create(&address, "after-the-cap").await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_nothing_is_closed_after_the_preface_timeout() {
    use tokio::io::AsyncReadExt as _;
    let fleet = start_with_one_ingress(&["--preface-timeout-ms", "1000"]).await;
    let ingress = &fleet.ingresses[0];
    let mut silent = tokio::net::TcpStream::connect(("127.0.0.1", ingress.grpc))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buffer))
        .await
        .expect("closed by the ingress, not left open");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let closed_after = started.elapsed();
    eprintln!("silent socket closed after {closed_after:?}");
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_ingress_preface_timeouts_total")
            .is_some_and(|count| count >= 1.0),
        "{metrics}"
    );
    assert!(
        closed_after >= Duration::from_millis(900),
        "closed before the timeout: {closed_after:?}"
    );
    // A client that speaks is served as before (retried: on a loaded
    // machine a client may itself be slow to send its preface).
    let address = ingress.endpoint();
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "a call from a client that speaks",
        async || corium::create(&address, "spoken").await,
    )
    .await;
}

/// A raw HTTP/2 connection to `port`, driven in the background; the
/// returned handle finishes when the connection ends.
async fn raw_connection(
    port: u16,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::StreamBody<BodyFrames>>,
    tokio::task::JoinHandle<()>,
) {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, driver)
}

type Frame = Result<hyper::body::Frame<bytes::Bytes>, std::convert::Infallible>;
type BodyFrames = futures::channel::mpsc::Receiver<Frame>;
type StreamingRequest = hyper::Request<http_body_util::StreamBody<BodyFrames>>;

/// A gRPC request for `path` whose body frames the caller sends.
fn streaming_request(address: &str, path: &str) -> (StreamingRequest, futures::channel::mpsc::Sender<Frame>) {
    let (tx, rx) = futures::channel::mpsc::channel(4);
    let request = hyper::Request::post(format!("{address}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(http_body_util::StreamBody::new(rx))
        .unwrap();
    (request, tx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_stock_clients_carry_on() {
    let fleet = start_with_one_ingress(&["--max-connection-idle-ms", "1000"]).await;
    let ingress = &fleet.ingresses[0];
    let address = ingress.endpoint();
    assert!(corium::create(&address, "idle").await.unwrap());
    // A connection that never sends a request (past its preface) is
    // closed after the idle bound.
    let (_sender, driver) = raw_connection(ingress.grpc).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(15), driver)
        .await
        .expect("the idle connection was closed")
        .unwrap();
    let lived = started.elapsed();
    eprintln!("idle connection closed after {lived:?}");
    assert!(
        lived >= Duration::from_millis(900),
        "closed before the idle bound: {lived:?}"
    );
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_ingress_connections_closed_idle_total")
            .is_some_and(|count| count >= 1.0),
        "{metrics}"
    );
    // A stock client keeps one channel; across idle closes it reconnects
    // and every call succeeds.
    let channel = corium::channel(&address).await;
    let mut transactor = corium_protocol::pb::transactor_client::TransactorClient::new(channel);
    for i in 0..3 {
        transactor
            .transact(corium::transact_request("idle", &format!("after-idle-{i}")))
            .await
            .unwrap_or_else(|status| panic!("call {i} after an idle close: {status:?}"));
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let log = corium::log(&address, "idle").await.unwrap();
    assert_eq!(corium::count_names_with_prefix(&log, "after-idle-"), 3, "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_open_calls_is_refused_with_a_hint_until_one_ends() {
    let fleet = start_with_one_ingress(&["--max-streams-per-client", "3"]).await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, "streams").await.unwrap());
    let subscribe = async || {
        corium_protocol::pb::transactor_client::TransactorClient::new(corium::channel(&address).await)
            .subscribe(corium_fleet_tests::corium::subscribe_request("streams", 0))
            .await
    };
    // Three open streams fill the client's places (over any connections).
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(subscribe().await.unwrap());
    }
    let refused = corium::transact(&address, "streams", "over", &[])
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert!(
        corium_fleet_wire::overload::retry_after(&refused).is_some(),
        "a retry hint: {refused:?}"
    );
    // One stream ends; its place comes back.
    drop(open.pop());
    corium_fleet_tests::eventually(Duration::from_secs(10), "a place came back", async || {
        corium::transact(&address, "streams", "after", &[])
            .await
            .map(drop)
    })
    .await;
    let log = corium::log(&address, "streams").await;
    // The refused write never ran.
    let names: Vec<String> = log
        .unwrap_or_default()
        .into_iter()
        .flat_map(|(_, names)| names)
        .collect();
    assert!(!names.iter().any(|name| name == "over"), "{names:?}");
    assert!(names.iter().any(|name| name == "after"), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_arriving_is_refused_after_the_progress_bound() {
    use futures::SinkExt as _;
    let fleet = start_with_one_ingress(&["--body-progress-timeout-ms", "700"]).await;
    let ingress = &fleet.ingresses[0];
    let address = ingress.endpoint();
    assert!(corium::create(&address, "slow").await.unwrap());
    let (mut sender, _driver) = raw_connection(ingress.grpc).await;
    let (request, mut body) = streaming_request(&address, "/corium.v1.Transactor/Transact");
    // Half of a real request, then nothing.
    let framed = corium::frame(&prost::Message::encode_to_vec(&corium::transact_request(
        "slow", "half",
    )));
    let half = framed.len() / 2;
    body.send(Ok(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(
        &framed[..half],
    ))))
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let response = tokio::time::timeout(Duration::from_secs(20), sender.send_request(request))
        .await
        .expect("answered while the body is still pending")
        .unwrap();
    let waited = started.elapsed();
    let status = tonic::Status::from_header_map(response.headers()).expect("a trailers-only status");
    eprintln!("stalled body refused after {waited:?}: {status:?}");
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("stopped arriving"), "{status:?}");
    assert!(waited >= Duration::from_millis(600), "{waited:?}");
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert_eq!(
        corium_fleet_tests::metric(
            &metrics,
            "corium_fleet_ingress_rejected_requests_total{reason=\"body_stalled\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    // A body sent in two parts with a pause inside the bound is served.
    let (request, mut body) = streaming_request(&address, "/corium.v1.Transactor/Transact");
    let framed = corium::frame(&prost::Message::encode_to_vec(&corium::transact_request(
        "slow", "whole",
    )));
    let (mut sender, _driver) = raw_connection(ingress.grpc).await;
    let answer = tokio::spawn(async move { sender.send_request(request).await });
    body.send(Ok(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(
        &framed[..half],
    ))))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    body.send(Ok(hyper::body::Frame::data(bytes::Bytes::copy_from_slice(
        &framed[half..],
    ))))
    .await
    .unwrap();
    drop(body);
    let response = tokio::time::timeout(Duration::from_secs(20), answer)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(response.status(), 200);
    let log = corium::log(&address, "slow").await.unwrap();
    let names: Vec<String> = log
        .into_iter()
        .flat_map(|(_, names)| names)
        .filter(|name| name == "half" || name == "whole")
        .collect();
    assert_eq!(names, ["whole"], "only the whole request committed");
}
