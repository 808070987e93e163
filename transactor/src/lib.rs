//! Corium Fleet transactor node: hosts databases as cells (one Corium
//! `TransactorNode` per database over a filtered view of one shared store),
//! decides ownership before every owner-dependent call, answers a typed
//! `NotOwner` when it is not the lease holder, and takes over databases whose
//! owner's lease lapsed.
//!
//! Layout:
//! - [`config`] — flags, config file, validation;
//! - [`view`] — the storage view backend that scopes a cell to its database;
//! - [`read_ahead`] — a database's log read in one go while its cell opens;
//! - [`cell`] — opening, draining, evicting one database's cell;
//! - [`fork`] — fleet-wide reservation of fork target names;
//! - [`host`] — all cells of a node and the ownership decision;
//! - [`counting`] — the shared store, counting root operations per database;
//! - [`peer`] — calls to other nodes' admin service (handoff, drain);
//! - [`request_id`] — exactly-once `Transact`: durable request ids at the owner;
//! - [`replica`] — hosted read replicas: `PeerServer` reads served from a
//!   replica that follows the owner, at least as far as the client asked;
//! - [`standby`] — standing of each database and the takeover watcher;
//! - [`warm_standby`] — the databases this node keeps warm as their first
//!   standby, refreshed while their owner serves;
//! - [`hot_standby`] — the databases this node follows as their first
//!   standby, their values kept current from the owner's stream and
//!   promoted in place by a handoff or a takeover here (Corium's warm start);
//! - [`service`] — `corium.v1` `Transactor`/`Catalog` and the fleet admin
//!   service;
//! - [`authz`] — `--authz-db`: stock Corium's policy authorizer, following
//!   the policy database from the fleet;
//! - [`work_limits`] — overload shedding: calls running and waiting, per
//!   database and per principal, refused `RESOURCE_EXHAUSTED` with a hint;
//! - [`waiters`] — calls waiting for a basis, outside the work places, and
//!   how far ahead a basis may be asked for;
//! - [`call_metrics`] — calls by method and status code, and their durations;
//! - [`admin_http`], [`metrics`] — `/metrics`, `/healthz`, `/readyz`;
//! - [`allocator`] — what jemalloc says the process holds (the memory
//!   budget's measure), when the binary runs on it;
//! - [`incoming`] — accepted connections: TCP without Nagle, TLS handshakes
//!   with the current (reloadable) certificate;
//! - [`principal`] — who is calling: the ingress's `corium-principal`, a
//!   fleet certificate, or the caller's own token;
//! - [`error`] — the crate's error and its kind;
//! - [`seams`] — the one seam tests inject through (a store wrapper, a commit
//!   observer); empty in production;
//! - [`start`](mod@start) — a node started without its gRPC server: storage,
//!   host, registration and background work ([`Running`]).
//!
//! [`run`] starts a node on given listeners until a shutdown future resolves;
//! the binary and the tests start nodes the same way.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
// The layout above names the crate's private modules, for its contributors
// (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

mod admin_http;
pub mod allocator;
mod authz;
mod call_metrics;
mod cell;
pub mod config;
mod counting;
mod error;
mod fork;
mod host;
mod hot_standby;
mod incoming;
mod metrics;
mod peer;
mod principal;
mod read_ahead;
mod replica;
mod request_id;
mod seams;
mod service;
mod standby;
mod start;
mod view;
mod waiters;
mod warm_standby;
mod work_limits;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use corium_fleet_common::cert_reload::{Reload, Reloading};
use corium_fleet_proto::fleet::fleet_admin_server::FleetAdminServer;
use corium_fleet_proto::fleet::requests_server::RequestsServer;
use corium_protocol::pb::catalog_server::CatalogServer;
use corium_protocol::pb::peer_server_server::PeerServerServer;
use corium_protocol::pb::transactor_server::TransactorServer;
use tokio::net::TcpListener;

pub use config::{Args, Config};
pub use error::Error;
pub use host::Host;
pub use seams::{CommitObserver, Hooks, Seams, StoreWrapper};
pub use service::admin::FleetAdminSvc;
pub use service::catalog::FleetCatalog;
pub use service::node::Node;
pub use service::transactor::FleetTransactor;
pub use start::{Running, start};
pub use view::kind_for as view_kind;

/// The two sockets a node serves.
pub struct Listeners {
    /// gRPC (`corium.v1` and `corium.fleet.v1`).
    pub grpc: TcpListener,
    /// Admin HTTP (`/metrics`, `/healthz`, `/readyz`).
    pub admin: TcpListener,
}

/// The span one call is served in: its method and correlation id (so
/// every log line of the call names it), a child of the trace context it
/// arrived with (the ingress's hop, or the client's).
fn call_span(request: &tonic::codegen::http::Request<()>) -> tracing::Span {
    let correlation = request
        .headers()
        .get(corium_fleet_wire::metadata::X_REQUEST_ID)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let span = tracing::info_span!("call", method = request.uri().path(), x_request_id = correlation,);
    corium_fleet_common::telemetry::propagation::adopt(&span, request.headers());
    span
}

/// The node's mTLS material, reloaded when its files change (or on SIGHUP)
/// until `stop`: new connections get the new certificate.
fn server_tls(
    node: &service::node::Node,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Option<Arc<Reloading<rustls::ServerConfig>>>, Error> {
    let Some(tls) = &node.host.config.tls else {
        return Ok(None);
    };
    let files = vec![
        tls.identity.cert.clone(),
        tls.identity.key.clone(),
        tls.ca.clone(),
    ];
    let (cert, key, ca) = (
        tls.identity.cert.clone(),
        tls.identity.key.clone(),
        tls.ca.clone(),
    );
    let reloading = Reloading::new("server", &tls.identity.cert, files, move || {
        corium_fleet_common::tls::server_config(&cert, &key, Some(&ca))
    })?;
    let material: Vec<Arc<dyn Reload>> = vec![Arc::clone(&reloading) as Arc<dyn Reload>];
    let _ = node.tls_material.set(material.clone());
    tokio::spawn(corium_fleet_common::cert_reload::watch(material, stop));
    Ok(Some(reloading))
}

/// Until `ready` resolves (storage opened, the node registered — which waits
/// out a crashed predecessor's registry record, up to its TTL), every
/// connection to the gRPC port is accepted and closed at once. A bound
/// listener completes TCP handshakes by itself, so without this a caller
/// (the ingress routing to a restarted top candidate) would send a call
/// into a socket nobody reads and wait out its keepalive or deadline; a
/// closed connection sends it to the next candidate at once. Found by the
/// process tier of the fault suite (docs/design/0007-fault-suite.md).
async fn refuse_until<T>(listener: TcpListener, ready: impl Future<Output = T>) -> (TcpListener, T) {
    let mut ready = std::pin::pin!(ready);
    loop {
        tokio::select! {
            output = &mut ready => return (listener, output),
            accepted = listener.accept() => {
                if let Ok((stream, peer)) = accepted {
                    tracing::debug!(%peer, "not ready yet; connection closed");
                    drop(stream);
                }
            }
        }
    }
}

/// Runs a node until `shutdown` resolves, then releases every held lease
/// (draining in-flight calls first) and stops serving.
///
/// # Errors
/// When storage cannot be opened or the server fails.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    run_with(config, listeners, shutdown, Seams::default()).await
}

/// [`run`], with what a test injects through `seams`.
///
/// # Errors
/// When storage cannot be opened, a seam refuses, or the server fails.
pub async fn run_with(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send,
    seams: Seams,
) -> Result<(), Error> {
    corium_fleet_common::tls::install_default_provider();
    let Seams { wrap_store, hooks } = seams;
    std::fs::create_dir_all(&config.storage.data_dir).map_err(|source| Error::Storage {
        storage: format!("data directory {}", config.storage.data_dir.display()),
        source: source.into(),
    })?;
    let Listeners { grpc, admin } = listeners;
    let ready = async {
        let (store, prefix_read) = start::open_storage(&config, wrap_store).await?;
        let kind = config.storage.backend.kind();
        let placement = corium_store::storage_backend(kind)
            .map(|backend| backend.capabilities().log_placement)
            .ok_or_else(|| Error::Config(format!("storage backend {kind:?} is not compiled in")))?;
        let view_kind = view::kind_for(placement)?;
        // Boxed: the node's start is a large future.
        Box::pin(start(config, store, prefix_read, view_kind, Some(admin), hooks)).await
    };
    let (grpc, started) = refuse_until(grpc, ready).await;
    let Running {
        node,
        stop: stop_tx,
        registration,
    } = started?;
    let host = Arc::clone(&node.host);
    tracing::info!(grpc = ?grpc.local_addr().ok(), "serving gRPC");

    let reload_stop = stop_tx.subscribe();
    let releasing = Arc::clone(&host);
    let graceful = async move {
        shutdown.await;
        tracing::info!("shutdown requested; releasing leases");
        releasing.release_all().await;
        let _ = stop_tx.send(true);
    };
    let tls = server_tls(&node, reload_stop)?;
    let mut server = tonic::transport::Server::builder()
        .timeout(service::DEFAULT_DEADLINE)
        .trace_fn(call_span)
        .layer(call_metrics::CallMetricsLayer(host.metrics.calls.clone()));
    let guard = principal::Identify::new(
        node.guard.clone(),
        host.config.ingress_identities.clone(),
        Arc::clone(&host.metrics),
        host.members.clone(),
    );
    let router = server
        .add_service(tonic::service::interceptor::InterceptedService::new(
            TransactorServer::new(service::transactor::FleetTransactor(Arc::clone(&node)))
                .max_decoding_message_size(host.config.max_request_bytes)
                .max_encoding_message_size(service::MAX_MESSAGE_BYTES),
            guard.clone(),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            CatalogServer::new(service::catalog::FleetCatalog(Arc::clone(&node)))
                .max_decoding_message_size(host.config.max_request_bytes)
                .max_encoding_message_size(service::MAX_MESSAGE_BYTES),
            guard.clone(),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            PeerServerServer::new(service::peer_server::FleetPeerServer(Arc::clone(&node)))
                .max_decoding_message_size(host.config.max_request_bytes)
                .max_encoding_message_size(service::MAX_MESSAGE_BYTES),
            guard.clone(),
        ))
        .add_service(FleetAdminServer::with_interceptor(
            service::admin::FleetAdminSvc(Arc::clone(&node)),
            guard.clone(),
        ))
        .add_service(RequestsServer::with_interceptor(
            service::requests::FleetRequests(Arc::clone(&node)),
            guard,
        ));
    match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(incoming::tls(grpc, tls), graceful)
                .await?;
        }
        None => {
            router
                .serve_with_incoming_shutdown(incoming::plain(grpc), graceful)
                .await?;
        }
    }
    // Leave the registry before exiting, so the others drop this node now
    // (and a restart under the same id is not refused as a duplicate).
    let _ = tokio::time::timeout(Duration::from_secs(5), registration).await;
    tracing::info!(node = %host.config.node_id, "node stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt as _;

    #[tokio::test]
    async fn connections_before_ready_are_closed_then_the_listener_is_handed_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<u8>();
        let refusing = tokio::spawn(super::refuse_until(listener, async { ready_rx.await.unwrap() }));
        let mut early = tokio::net::TcpStream::connect(address).await.unwrap();
        let mut buffer = [0u8; 1];
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), early.read(&mut buffer))
            .await
            .expect("closed at once, not left hanging");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        ready_tx.send(7).unwrap();
        let (listener, output) = refusing.await.unwrap();
        assert_eq!(output, 7);
        let (_late, accepted) = tokio::join!(tokio::net::TcpStream::connect(address), listener.accept());
        assert!(accepted.is_ok(), "the same listener serves once ready");
    }
}
