//! The hop against real HTTP/2 servers (the `h2` crate's) on loopback: what
//! arrives, and how each way of failing is classified.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::http::{HeaderMap, HeaderValue, Method, Request, Response};
use tokio::net::{TcpListener, TcpStream};

use super::{Failure, Settings, Upstream};

/// A bound on every wait in these tests.
const BOUND: Duration = Duration::from_secs(10);

fn upstream(keepalive: Duration) -> Upstream {
    Upstream::new(Settings {
        connect_timeout: Duration::from_secs(2),
        tls: None,
        node_identity: None,
        keepalive_interval: keepalive,
        keepalive_timeout: keepalive,
    })
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, endpoint)
}

type Server = h2::server::Connection<TcpStream, Bytes>;

async fn accept(listener: &TcpListener) -> Server {
    let (tcp, _) = listener.accept().await.expect("accept");
    h2::server::handshake(tcp).await.expect("server handshake")
}

fn grpc_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("te", HeaderValue::from_static("trailers"));
    headers
}

async fn call(
    upstream: &Upstream,
    endpoint: &str,
    body: &'static [u8],
) -> Result<(Response<()>, Bytes, Option<HeaderMap>), Failure> {
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = format!("{endpoint}/corium.v1.Transactor/Status")
        .parse()
        .expect("uri");
    *request.headers_mut() = grpc_headers();
    let response = tokio::time::timeout(BOUND, upstream.send(endpoint, request, Bytes::from_static(body)))
        .await
        .expect("the call ends within the bound")?;
    let (parts, body) = response.into_parts();
    let collected = tokio::time::timeout(BOUND, body.collect())
        .await
        .expect("the body ends within the bound")
        .map_err(|error| Failure::Ambiguous(error.to_string()))?;
    let trailers = collected.trailers().cloned();
    Ok((Response::from_parts(parts, ()), collected.to_bytes(), trailers))
}

/// Answers every request on `server` with its body echoed and `grpc-status: 0`.
async fn echo(mut server: Server) {
    while let Some(Ok((request, mut respond))) = server.accept().await {
        tokio::spawn(async move {
            let (parts, mut body) = request.into_parts();
            let mut received = Vec::new();
            while let Some(Ok(chunk)) = body.data().await {
                let _ = body.flow_control().release_capacity(chunk.len());
                received.extend_from_slice(&chunk);
            }
            let mut response = Response::new(());
            response.headers_mut().insert(
                "x-seen-path",
                HeaderValue::from_str(parts.uri.path()).expect("path"),
            );
            if let Some(authority) = parts.uri.authority() {
                response.headers_mut().insert(
                    "x-seen-authority",
                    HeaderValue::from_str(authority.as_str()).expect("authority"),
                );
            }
            let mut stream = respond.send_response(response, false).expect("respond");
            stream.send_data(Bytes::from(received), false).expect("data");
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            stream.send_trailers(trailers).expect("trailers");
        });
    }
}

#[tokio::test]
async fn a_call_arrives_whole_and_its_answer_streams_back_with_trailers() {
    let (listener, endpoint) = listener().await;
    tokio::spawn(async move { echo(accept(&listener).await).await });
    let upstream = upstream(Duration::from_secs(2));
    for body in [&b"first"[..], b"second", b""] {
        let (response, echoed, trailers) = call(&upstream, &endpoint, body)
            .await
            .unwrap_or_else(|_| panic!("call"));
        assert_eq!(response.headers()["x-seen-path"], "/corium.v1.Transactor/Status");
        assert_eq!(&echoed[..], body);
        assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    }
}

#[tokio::test]
async fn nothing_listening_is_a_connect_failure() {
    let (listener, endpoint) = listener().await;
    drop(listener);
    let outcome = call(&upstream(Duration::from_secs(2)), &endpoint, b"x").await;
    assert!(matches!(outcome, Err(Failure::Connect(_))), "{:?}", outcome.err());
}

#[tokio::test]
async fn a_refused_stream_is_a_connect_failure_and_a_reset_after_acceptance_is_ambiguous() {
    let (listener, endpoint) = listener().await;
    tokio::spawn(async move {
        let mut server = accept(&listener).await;
        let mut calls = 0;
        while let Some(Ok((_request, mut respond))) = server.accept().await {
            calls += 1;
            // The first call is refused unprocessed, the second is reset
            // after the server took it.
            respond.send_reset(if calls == 1 {
                h2::Reason::REFUSED_STREAM
            } else {
                h2::Reason::INTERNAL_ERROR
            });
        }
    });
    let upstream = upstream(Duration::from_secs(2));
    let refused = call(&upstream, &endpoint, b"x").await;
    assert!(matches!(refused, Err(Failure::Connect(_))), "{:?}", refused.err());
    let reset = call(&upstream, &endpoint, b"x").await;
    assert!(matches!(reset, Err(Failure::Ambiguous(_))), "{:?}", reset.err());
}

#[tokio::test]
async fn a_connection_the_node_closed_is_replaced_before_the_next_call() {
    let (listener, endpoint) = listener().await;
    tokio::spawn(async move {
        // The first connection answers one call and closes; the next serves.
        let mut first = accept(&listener).await;
        let (_request, mut respond) = first.accept().await.expect("a call").expect("a stream");
        let mut response = Response::new(());
        response
            .headers_mut()
            .insert("grpc-status", HeaderValue::from_static("0"));
        respond.send_response(response, true).expect("respond");
        tokio::time::timeout(Duration::from_millis(200), first.accept())
            .await
            .ok();
        drop(first);
        echo(accept(&listener).await).await;
    });
    let upstream = upstream(Duration::from_secs(2));
    call(&upstream, &endpoint, b"one")
        .await
        .unwrap_or_else(|_| panic!("first call"));
    // Let the close reach the client.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (_, echoed, _) = call(&upstream, &endpoint, b"two")
        .await
        .unwrap_or_else(|error| panic!("second call: {error:?}"));
    assert_eq!(&echoed[..], b"two");
}

#[tokio::test]
async fn a_frozen_node_fails_its_calls_once_pings_go_unanswered() {
    let (listener, endpoint) = listener().await;
    let (took, mut taken) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        let mut server = accept(&listener).await;
        let request = server.accept().await.expect("a call").expect("a stream");
        let _ = took.send(()).await;
        // Frozen: the connection is never polled again (no PONG, no answer),
        // though the socket stays open.
        std::future::pending::<()>().await;
        drop((server, request));
    });
    let upstream = upstream(Duration::from_millis(200));
    let started = Instant::now();
    let outcome = call(&upstream, &endpoint, b"x").await;
    assert!(taken.recv().await.is_some(), "the node took the call");
    assert!(
        matches!(outcome, Err(Failure::Ambiguous(_))),
        "{:?}",
        outcome.err()
    );
    assert!(started.elapsed() < BOUND);
}

/// The hop forwards the client's request as it came (its URI names the
/// ingress, or nothing but a path): the node sees its own endpoint's
/// authority and the call's path.
#[tokio::test]
async fn a_request_goes_out_under_the_nodes_authority_with_the_calls_path() {
    let (listener, endpoint) = listener().await;
    tokio::spawn(async move { echo(accept(&listener).await).await });
    let upstream = upstream(Duration::from_secs(2));
    for uri in [
        "http://ingress.example:8080/corium.v1.Transactor/Status",
        "/corium.v1.Transactor/Status",
    ] {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = uri.parse().expect("uri");
        *request.headers_mut() = grpc_headers();
        let response =
            tokio::time::timeout(BOUND, upstream.send(&endpoint, request, Bytes::from_static(b"x")))
                .await
                .expect("the call ends within the bound")
                .expect("answered");
        let seen = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|value| value.to_str().unwrap().to_owned())
        };
        assert_eq!(
            seen("x-seen-path").as_deref(),
            Some("/corium.v1.Transactor/Status")
        );
        assert_eq!(
            seen("x-seen-authority").as_deref(),
            endpoint.strip_prefix("http://"),
            "{uri}: the node's authority, not the client's"
        );
    }
}
