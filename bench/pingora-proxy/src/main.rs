//! A minimal [Pingora](https://crates.io/crates/pingora) gRPC reverse proxy:
//! the Pingora row of the proxy comparison `scripts/bench/proxies.sh`.
//!
//! Why it exists: issue 23 asks for the ingress's overhead beside the proxies
//! one could put in front of a fleet instead, and design note 0004 set Pingora
//! aside (routing and retry rules it cannot express) without measuring it. This
//! binary is that measurement's other side: the least Pingora needs to route a
//! fleet's gRPC calls, and nothing the ingress adds (no owner lookup, no
//! retries, no limits), so its row is a floor for "a Pingora-based ingress".
//!
//! What it does:
//! - listens on one loopback address (`--listen`), HTTP/2 cleartext with prior
//!   knowledge (h2c, as h2load and gRPC clients send it; Pingora's
//!   `HttpServerOptions::h2c` peeks for the HTTP/2 preface and falls back to
//!   HTTP/1.1 without it);
//! - reads the `corium-database-route` request header and looks the database
//!   up in a static map given on the command line (`--route bench=127.0.0.1:7000`,
//!   repeatable); the call is forwarded over HTTP/2 to that upstream, headers,
//!   body and trailers as they are (`te: trailers` kept: Pingora leaves an
//!   HTTP/2 request's headers alone on an HTTP/2 hop);
//! - a missing or unknown route is answered as gRPC `NOT_FOUND`, trailers-only:
//!   HTTP 200 with `content-type: application/grpc`, `grpc-status: 5` and a
//!   `grpc-message`, in one HEADERS frame that ends the stream (Pingora writes
//!   a response header with end-of-stream directly, so no HTTP 404 is needed);
//! - upstream either h2c (default) or, with `--upstream-ca`, `--upstream-cert`,
//!   `--upstream-key` and `--upstream-server-name` (all four or none), TLS
//!   (rustls) with that client certificate, the
//!   upstream's certificate verified against the CA for `--upstream-server-name`
//!   (also the SNI; the script passes the node's name, as it does to
//!   `HAProxy`'s `verifyhost` and Envoy's `sni`), ALPN h2;
//! - one worker thread (`--threads`, default 1: the counterpart of `HAProxy`'s
//!   `nbthread 1` and Envoy's `--concurrency 1`); calls to one upstream share
//!   HTTP/2 connections (up to 100 streams each; Pingora's default is one
//!   stream per connection);
//! - every request has a deadline: 10 s (`--timeout-ms`) to connect (TCP and
//!   TLS), for each upstream read and write, and for each downstream write, so
//!   a call whose upstream stalls ends within 10 s of the stall (Pingora has no
//!   downstream read timeout on HTTP/2; an idle client connection is closed
//!   after 5 minutes). An upstream that fails or times out is answered by
//!   Pingora's own error response (an HTTP 5xx, not a gRPC status): the bench
//!   fails on any response that is not 2xx.
//!
//! Built outside the workspace (`bench/pingora-proxy`, its own lock), so
//! `cargo build --workspace` and `make test` never compile Pingora:
//! `cargo build --release --manifest-path bench/pingora-proxy/Cargo.toml --target-dir target/pingora`
//! (needs `cmake`: pingora-core builds zlib-ng).
//! Logs go to stderr through `env_logger` (`RUST_LOG`, default `warn`).

#![warn(missing_docs)]
#![warn(clippy::all, clippy::pedantic)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clap::Parser;
use pingora::apps::HttpServerOptions;
use pingora::connectors::ConnectorOptions;
use pingora::http::ResponseHeader;
use pingora::prelude::{HttpPeer, ProxyHttp, Result, Session};
use pingora::proxy::ProxyServiceBuilder;
use pingora::server::Server;
use pingora::server::configuration::ServerConf;

/// The request header naming the database (the fleet's routing key).
const DATABASE_ROUTE: &str = "corium-database-route";
/// gRPC status `NOT_FOUND`.
const GRPC_NOT_FOUND: &str = "5";
/// Concurrent HTTP/2 streams on one upstream connection.
const MAX_H2_STREAMS: usize = 100;

/// Command line.
#[derive(Parser, Debug)]
#[command(
    name = "corium-fleet-pingora-proxy",
    about = "A minimal Pingora gRPC proxy (bench row)"
)]
struct Args {
    /// Loopback address to listen on, h2c (e.g. 127.0.0.1:7100).
    #[arg(long)]
    listen: SocketAddr,
    /// A route DB=HOST:PORT (repeatable): calls whose `corium-database-route`
    /// is DB go to HOST:PORT.
    #[arg(long = "route", value_parser = parse_route, required = true)]
    routes: Vec<(String, SocketAddr)>,
    /// CA (PEM) that signs the upstream's certificate; with --upstream-cert,
    /// --upstream-key and --upstream-server-name, makes the upstream hop TLS.
    #[arg(long, requires_all = ["upstream_cert", "upstream_key", "upstream_server_name"])]
    upstream_ca: Option<String>,
    /// Client certificate (PEM) presented to the upstream.
    #[arg(long, requires_all = ["upstream_ca", "upstream_key"])]
    upstream_cert: Option<String>,
    /// Private key (PEM) of --upstream-cert.
    #[arg(long, requires_all = ["upstream_ca", "upstream_cert"])]
    upstream_key: Option<String>,
    /// Name the upstream's certificate is verified for, also sent as SNI.
    #[arg(long, requires = "upstream_ca")]
    upstream_server_name: Option<String>,
    /// Worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Connect, read and write timeout, milliseconds.
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
}

/// Parses `DB=HOST:PORT`.
fn parse_route(s: &str) -> std::result::Result<(String, SocketAddr), String> {
    let (db, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("route {s:?} is not DB=HOST:PORT"))?;
    if db.is_empty() {
        return Err(format!("route {s:?} has an empty database name"));
    }
    let addr = addr.parse().map_err(|e| format!("route {s:?}: {e}"))?;
    Ok((db.to_owned(), addr))
}

/// The proxy: a database name → upstream peer map, built once.
struct Router {
    /// Upstream peer (address, TLS settings, timeouts) by database name.
    peers: HashMap<String, HttpPeer>,
    /// Downstream write timeout.
    timeout: Duration,
}

/// Per-request state: the peer chosen in `request_filter`.
#[derive(Default)]
struct Ctx {
    /// The route's peer, cloned from the map.
    peer: Option<HttpPeer>,
}

impl Router {
    /// Builds one peer per route.
    fn new(args: &Args) -> Self {
        // clap makes the four TLS flags all or none.
        let tls = args.upstream_ca.is_some();
        let timeout = Duration::from_millis(args.timeout_ms);
        let sni = args.upstream_server_name.clone().unwrap_or_default();
        let peers = args
            .routes
            .iter()
            .map(|(db, addr)| {
                let mut peer = HttpPeer::new(*addr, tls, sni.clone());
                // HTTP/2 only: over cleartext this is h2c with prior knowledge,
                // over TLS ALPN h2.
                peer.options.set_http_version(2, 2);
                peer.options.max_h2_streams = MAX_H2_STREAMS;
                peer.options.connection_timeout = Some(timeout);
                peer.options.total_connection_timeout = Some(timeout);
                peer.options.read_timeout = Some(timeout);
                peer.options.write_timeout = Some(timeout);
                peer.options.idle_timeout = Some(Duration::from_mins(1));
                peer.options.verify_cert = true;
                peer.options.verify_hostname = true;
                (db.clone(), peer)
            })
            .collect();
        Self { peers, timeout }
    }
}

/// A trailers-only gRPC error response (HTTP 200, status in the headers).
fn grpc_error(status: &str, message: &str) -> Result<Box<ResponseHeader>> {
    let mut resp = ResponseHeader::build(200, Some(3))?;
    resp.insert_header("content-type", "application/grpc")?;
    resp.insert_header("grpc-status", status)?;
    resp.insert_header("grpc-message", message)?;
    Ok(Box::new(resp))
}

#[async_trait]
impl ProxyHttp for Router {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        session.set_write_timeout(Some(self.timeout));
        let route = session
            .req_header()
            .headers
            .get(DATABASE_ROUTE)
            .and_then(|v| v.to_str().ok());
        let message = match route {
            None => "no corium-database-route header",
            Some(db) => {
                if let Some(peer) = self.peers.get(db) {
                    ctx.peer = Some(peer.clone());
                    return Ok(false);
                }
                "no route for this database"
            }
        };
        session
            .write_response_header(grpc_error(GRPC_NOT_FOUND, message)?, true)
            .await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        // request_filter answered every request without a peer.
        let peer = ctx.peer.take().expect("request_filter chose a peer");
        Ok(Box::new(peer))
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    if !args.listen.ip().is_loopback() {
        eprintln!("--listen {} is not a loopback address", args.listen);
        return ExitCode::from(2);
    }
    if args.threads == 0 {
        eprintln!("--threads must be at least 1");
        return ExitCode::from(2);
    }

    let conf = ServerConf {
        threads: args.threads,
        // SIGTERM: stop at once (no grace period for in-flight calls), within 1 s.
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let conf = Arc::clone(&server.configuration);

    // The connector's TLS settings: the CA and the client certificate. With
    // none, the upstream hop is h2c and no certificate is loaded.
    let mut client = ConnectorOptions::from_server_conf(&conf);
    if let (Some(ca), Some(cert), Some(key)) = (&args.upstream_ca, &args.upstream_cert, &args.upstream_key) {
        client.ca_file = Some(ca.clone());
        client.cert_key_file = Some((cert.clone(), key.clone()));
    }
    let mut server_options = HttpServerOptions::default();
    server_options.h2c = true;
    server_options.h2_idle_timeout = Some(Duration::from_mins(5));

    let mut service = ProxyServiceBuilder::new(&conf, Router::new(&args))
        .name("corium-fleet-pingora-proxy")
        .server_options(server_options)
        .client_options(client)
        .build();
    service.add_tcp(&args.listen.to_string());

    server.add_service(service);
    server.run_forever()
}
