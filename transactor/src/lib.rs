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
//! - [`incoming`] — accepted connections: TCP without Nagle, TLS handshakes
//!   with the current (reloadable) certificate;
//! - [`principal`] — who is calling: the ingress's `corium-principal`, a
//!   fleet certificate, or the caller's own token;
//! - [`error`] — the crate's error and its kind;
//! - [`seams`] — the one seam tests inject through (a store wrapper, a commit
//!   observer); empty in production.
//!
//! [`run`] starts a node on given listeners until a shutdown future resolves;
//! the binary and the tests start nodes the same way.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod admin_http;
mod authz;
mod call_metrics;
mod cell;
pub mod config;
mod counting;
mod error;
mod fork;
mod host;
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
pub use seams::{CommitObserver, Seams, StoreWrapper};
pub use service::admin::FleetAdminSvc;
pub use service::catalog::FleetCatalog;
pub use service::node::Node;
pub use service::transactor::FleetTransactor;
pub use view::kind_for as view_kind;

/// The two sockets a node serves.
pub struct Listeners {
    /// gRPC (`corium.v1` and `corium.fleet.v1`).
    pub grpc: TcpListener,
    /// Admin HTTP (`/metrics`, `/healthz`, `/readyz`).
    pub admin: TcpListener,
}

/// Largest gRPC message accepted or sent (Corium's transaction batches are
/// bounded well below this).
const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// How often `--placement-map` is re-read.
const MAP_RELOAD_PERIOD: Duration = Duration::from_secs(2);
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

/// Default deadline of a call that arrives without `grpc-timeout`.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_mins(1);

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

/// Resolves once `flag` is true (or its sender is gone). Never holds the
/// receiver's borrow across an await, so the future stays `Send`.
pub(crate) async fn until_true(flag: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = flag.wait_for(|value| *value).await;
}

/// A node's host and background work (registry, standby watcher, placement
/// map, admin HTTP), started without its gRPC server: [`run`] serves it, the
/// simulation tier calls its services in-process.
pub struct Running {
    /// The node: its host (its cells and the ownership decision) and what
    /// its services share.
    pub node: Arc<service::node::Node>,
    stop: tokio::sync::watch::Sender<bool>,
    registration: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops the background work and leaves the registry (after a drain:
    /// [`host::Host::release_all`]).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.registration).await;
    }

    /// Stops the background work at once, releasing nothing and leaving the
    /// registry record to expire: what a crash leaves behind (the simulation
    /// also cuts the node's storage, so its cells' renewals fail).
    pub fn abandon(self) {
        let _ = self.stop.send(true);
        self.registration.abort();
    }
}

/// Loads `--placement-map` (checked against the members this node knows,
/// itself included) and follows the file for live reloads.
fn load_placement_map(
    host: &Arc<host::Host>,
    path: std::path::PathBuf,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut members: Vec<corium_fleet_common::placement::Member> = host.members.get().to_vec();
    if !members.iter().any(|member| member.node_id == host.config.node_id) {
        members.push(corium_fleet_common::placement::Member {
            node_id: host.config.node_id.clone(),
            zone: host.config.zone.clone(),
            weight: host.config.weight,
            endpoint: host.config.advertise.clone(),
        });
    }
    let (map, warnings) = corium_fleet_common::placement_map::Map::load_at_start(
        &path,
        &members,
        host.config.membership.replicas,
        host.config.static_members,
    )?;
    for warning in warnings {
        tracing::warn!(%warning, "placement map names a node that is not live; it is skipped until it joins");
    }
    tracing::info!(path = %path.display(), databases = map.len(), "placement map loaded");
    host.map.replace(map);
    let members = host.members.clone();
    tokio::spawn(host.map.clone().follow(
        path,
        MAP_RELOAD_PERIOD,
        move || members.get(),
        host.config.membership.replicas,
        stop,
    ));
    Ok(())
}

/// The formats this build reads beyond the first release's, listed in its
/// registry record: the fleet writes one only when every live member lists
/// it (`corium_fleet_store::registry::Features`).
pub const FEATURES: &[&str] = &[corium_fleet_store::registry::OWNED_REQUEST_IDS];

/// Writes this node's first registry record (waiting out a crashed
/// predecessor's; refusing a live duplicate).
async fn register(host: &host::Host, describe: &str) -> Result<corium_fleet_store::registry::Record, Error> {
    use corium_fleet_store::registry::{self, Record, RegistryError};
    let record = Record {
        node_id: host.config.node_id.clone(),
        incarnation: host.incarnation.clone(),
        zone: host.config.zone.clone(),
        weight: host.config.weight,
        endpoint: host.config.advertise.clone(),
        expires_unix_ms: corium_fleet_common::owner::now_unix_ms()
            .saturating_add(i64::try_from(host.config.registry_ttl.as_millis()).unwrap_or(i64::MAX)),
        owned: Vec::new(),
        load: None,
        features: FEATURES.iter().map(|feature| (*feature).to_owned()).collect(),
    };
    registry::register(host.base.as_ref(), &record)
        .await
        .map_err(|error| match error {
            RegistryError::Duplicate { .. } => Error::Config(error.to_string()),
            RegistryError::Store(source) => Error::Storage {
                storage: describe.to_owned(),
                source,
            },
        })?;
    Ok(record)
}

/// The node's shared store (wrapped by `wrap_store`, if any) and its bulk
/// prefix reader: `None` when a wrapper changed the store, so the
/// read-ahead lists and reads through the wrapper and its faults reach it.
async fn open_storage(
    config: &Config,
    wrap_store: Option<seams::StoreWrapper>,
) -> Result<
    (
        Arc<dyn corium_store::FullStore>,
        Option<Arc<dyn corium_fleet_store::prefix_read::PrefixRead>>,
    ),
    Error,
> {
    let opened = corium_fleet_store::open_store(
        &config.storage.backend,
        &config.storage.data_dir,
        config.storage_timeout * 2,
        config.storage.pool,
    )
    .await
    .map_err(Error::Open)?;
    Ok(match wrap_store {
        Some(wrap) => {
            let wrapped = wrap(Arc::clone(&opened.store)).map_err(Error::Config)?;
            // Nothing armed: the store is the store, bulk reads included.
            let unchanged = Arc::ptr_eq(&wrapped, &opened.store);
            (wrapped, unchanged.then_some(opened.prefix_read))
        }
        None => (opened.store, Some(opened.prefix_read)),
    })
}

/// Follows the registry: one read per period (one query on `PostgreSQL`,
/// `registry/follow.rs`) serves the members view (unless static) and the
/// standby watcher, which does a round per read.
fn follow_registry(
    host: &Arc<host::Host>,
    reader: Arc<dyn corium_fleet_store::prefix_read::PrefixRead>,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    let (records_tx, records_rx) = tokio::sync::watch::channel(Arc::new(Vec::new()));
    let members = (!host.config.static_members).then(|| host.members.clone());
    let features = host.features.clone();
    let loads = host.loads.clone();
    tokio::spawn(corium_fleet_store::registry::follow(
        reader,
        corium_fleet_store::registry::period(host.config.registry_renew, host.config.lease_ttl),
        host.config.storage_timeout,
        move |records| {
            if let Some(members) = &members {
                members.set_live(&records);
            }
            features.set_live(&records);
            loads.set_live(&records);
            records_tx.send_replace(Arc::new(records));
        },
        stop.clone(),
    ));
    tokio::spawn(warm_standby::run(
        Arc::clone(host),
        records_rx.clone(),
        stop.clone(),
    ));
    tokio::spawn(standby::watch(Arc::clone(host), records_rx, stop.clone()));
}

/// Applies read-replica evictions (idle, over the cap) every few seconds
/// until `stop`: moka applies them only on cache operations, and an idle
/// node performs none.
async fn sweep_replicas(node: Arc<service::node::Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period =
        (node.host.config.read_replicas.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => node.replicas.sweep().await,
            _ = stop.changed() => return,
        }
    }
}

/// Binds the read replicas' relay on loopback (`replica/relay.rs`).
async fn bind_relay(peers: &peer::Peers) -> Result<(Arc<replica::Relay>, tokio::net::TcpListener), Error> {
    let relay = replica::Relay::new(peers.token());
    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(Error::Relay)?;
    let address = listener.local_addr().map_err(Error::Relay)?;
    relay.serving_at(address);
    tracing::info!(%address, "replica relay listening on loopback");
    Ok((relay, listener))
}

/// Starts a node's host over `store` (already opened, and wrapped as the
/// caller wants), with cells opened through the storage view `view_kind`,
/// their logs read ahead through `prefix_read` (`None`: listing and reads
/// through `store`).
///
/// # Errors
/// A bad placement map, or the registry refuses this node (a live duplicate
/// id) or cannot be written.
pub async fn start(
    config: Config,
    store: Arc<dyn corium_store::FullStore>,
    prefix_read: Option<Arc<dyn corium_fleet_store::prefix_read::PrefixRead>>,
    view_kind: &'static str,
    admin: Option<TcpListener>,
    after_commit: Option<seams::CommitObserver>,
) -> Result<Running, Error> {
    let describe = config.storage.backend.describe();
    let root_ops = Arc::new(counting::CountingStore::new(store));
    let base: Arc<dyn corium_store::FullStore> = Arc::clone(&root_ops) as Arc<dyn corium_store::FullStore>;
    let incarnation = uuid::Uuid::new_v4().simple().to_string();
    let prefix_read = prefix_read.unwrap_or_else(|| {
        Arc::new(corium_fleet_store::prefix_read::ListThenRead(Arc::clone(&base)))
            as Arc<dyn corium_fleet_store::prefix_read::PrefixRead>
    });
    let template = cell::Template {
        base: Arc::clone(&base),
        view_kind,
        data_dir: config.storage.data_dir.clone(),
        owner_prefix: format!("{}/{}", config.node_id, incarnation),
        generation: std::sync::atomic::AtomicU64::new(1),
        advertise: config.advertise.clone(),
        lease_ttl_ms: i64::try_from(config.lease_ttl.as_millis()).unwrap_or(i64::MAX),
        read_ahead: read_ahead::Budget::new(
            config.activation_read_ahead_mib,
            config.warm_standby_mib,
            Arc::clone(&prefix_read),
        ),
    };
    let node_token = peer::node_token(&config)?;
    let peers = peer::Peers::new(
        config.tls.as_ref(),
        config.storage_timeout * 2,
        node_token.clone(),
        config.membership.verify_node_identity,
    )?;
    // Authorization is permit-all, as a stock transactor's without a policy
    // database, or follows `--authz-db`; authentication follows the flags.
    let client_tls = config.tls.as_ref().map(peer::Peers::client_tls).transpose()?;
    let (authorizer, policy) = authz::authorizer(&config.authz, &config.auth, node_token, client_tls);
    let guard = config
        .auth
        .guard(authorizer)
        .map_err(|error| Error::Config(error.to_string()))?;
    let host = host::Host::new(config, template, root_ops, peers, incarnation, after_commit);
    let (relay, relay_listener) = bind_relay(&host.peers).await?;
    let node = service::node::Node::new(Arc::clone(&host), guard, Arc::clone(&relay));
    if let Some(policy) = policy {
        policy.follow(host.members.clone());
    }
    tracing::info!(
        node = %host.config.node_id,
        zone = %host.config.zone,
        incarnation = %host.incarnation,
        storage = %describe,
        admin = ?admin.as_ref().and_then(|listener| listener.local_addr().ok()),
        members = host.config.membership.members.len(),
        "node serving"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The placement map is checked before this node registers, so a bad map
    // stops the process before it touches the registry or any database.
    if !host.config.static_members {
        corium_fleet_store::registry::refresh(host.base.as_ref(), &host.members).await;
    }
    if let Some(path) = host.config.membership.placement_map.clone() {
        load_placement_map(&host, path, stop_rx.clone())?;
    }
    let record = register(&host, &describe).await?;
    let owner_of = Arc::clone(&node);
    let registration = tokio::spawn(corium_fleet_store::registry::keep(
        Arc::clone(&host.base),
        record,
        host.config.registry_ttl,
        host.config.registry_renew,
        move || {
            let owned = owner_of.host.cells().iter().map(|cell| cell.db.clone()).collect();
            (owned, Some(owner_of.load()))
        },
        Arc::clone(&host.owned_changed),
        stop_rx.clone(),
    ));
    follow_registry(&host, prefix_read, &stop_rx);
    tokio::spawn(sweep_replicas(Arc::clone(&node), stop_rx.clone()));
    // On the read threads, where the replicas' own work runs.
    let relay = service::relay::serve(relay_listener, relay, stop_rx.clone());
    replica::on_read_threads(async move { drop(tokio::spawn(relay)) }).await;
    tokio::spawn(Arc::clone(&host).keep_within_budget(stop_rx.clone()));
    tokio::spawn(Arc::clone(&host).balance_load(stop_rx.clone()));
    tokio::spawn(Arc::clone(&host).retain_request_ids(stop_rx.clone()));
    if let Some(admin) = admin {
        tokio::spawn(corium_fleet_common::admin_http::serve(
            admin,
            admin_http::handler(Arc::clone(&node)),
            stop_rx,
        ));
    }
    Ok(Running {
        node,
        stop: stop_tx,
        registration,
    })
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
    let Seams {
        wrap_store,
        after_commit,
    } = seams;
    std::fs::create_dir_all(&config.storage.data_dir).map_err(|source| Error::Storage {
        storage: format!("data directory {}", config.storage.data_dir.display()),
        source: source.into(),
    })?;
    let Listeners { grpc, admin } = listeners;
    let ready = async {
        let (store, prefix_read) = open_storage(&config, wrap_store).await?;
        let kind = config.storage.backend.kind();
        let placement = corium_store::storage_backend(kind)
            .map(|backend| backend.capabilities().log_placement)
            .ok_or_else(|| Error::Config(format!("storage backend {kind:?} is not compiled in")))?;
        let view_kind = view::kind_for(placement)?;
        // Boxed: the node's start is a large future.
        Box::pin(start(
            config,
            store,
            prefix_read,
            view_kind,
            Some(admin),
            after_commit,
        ))
        .await
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
        .timeout(DEFAULT_DEADLINE)
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
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            guard.clone(),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            CatalogServer::new(service::catalog::FleetCatalog(Arc::clone(&node)))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            guard.clone(),
        ))
        .add_service(tonic::service::interceptor::InterceptedService::new(
            PeerServerServer::new(service::peer_server::FleetPeerServer(Arc::clone(&node)))
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
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
