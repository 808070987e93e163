//! Corium Fleet ingress: the stateless tier that is the one client address.
//! It reads the routing key (the `corium-database-route` header, else field
//! 1 of the first request message), finds the lease holder through a short
//! `moka` owner cache filled from the database root in storage, and forwards
//! the call's bytes one hop to it, sending again only what provably did not
//! commit — or, for a `Transact` with a request id (its own, or one the
//! ingress assigns), anything, with the same id.
//! It never hosts a database.
//!
//! Layout:
//! - [`config`] — flags, config file, validation;
//! - [`body`] — the response body type and a status as a response;
//! - [`route`] — method classes and the minimal protobuf scan for `db`;
//! - [`limits`] — concurrency, open calls per client, per-client rate
//!   (keyed by principal);
//! - [`node_limits`] — calls open at each node, learned from its refusals;
//! - [`failover_buffer`] — calls held while their database's ownership moves;
//! - [`retry_budget`] — the retries the ingress may add, as a fraction of calls;
//! - [`connections`] — caps on client connections, in total and per address;
//! - [`connection_life`] — idle and maximum-age closing of client connections;
//!   one leaving for its age or shutdown ends its subscriptions, then sends
//!   its GOAWAY once quiet;
//! - [`leaving`] — a subscription ends `UNAVAILABLE` when its connection leaves;
//! - [`storage_health`](mod@storage_health) — storage probed in the background; readiness;
//! - [`stall`] — a stream whose client stops reading is ended;
//! - [`owner_cache`] — database → lease holder, coalesced storage reads;
//! - [`proxy`] — the forwarding path: intake, one hop, the owner's retry
//!   rules, reads to read replicas;
//! - [`stream_end`] — a stream broken upstream ends `UNAVAILABLE`, not reset;
//! - [`suspects`] — nodes whose calls hung are tried last (outlier detection);
//! - [`upstream`] — the hop: one HTTP/2 connection per node (h2, mTLS or h2c);
//! - [`metrics`] — cache, forwarding and rejection counters;
//! - [`status_page`] — `/status`, the fleet as a picture, and `/status.json`;
//! - [`session`] — what a client connection wrote, so its reads wait for it;
//! - [`server`] — HTTP/2 (h2c) client listener and graceful shutdown.
//!
//! [`run`] starts an ingress on given listeners until a shutdown future
//! resolves; the binary and the tests start it the same way.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]
// The layout above names the crate's private modules, for its contributors
// (`cargo doc --document-private-items`).
#![allow(rustdoc::private_intra_doc_links)]

mod body;
mod call_tasks;
pub mod config;
mod connection_life;
mod connections;
mod failover_buffer;
mod leaving;
mod limits;
mod metrics;
mod node_limits;
mod owner_cache;
mod proxy;
mod retry_budget;
mod route;
mod server;
mod session;
mod stall;
mod status_page;
mod storage_health;
mod stream_end;
mod suspects;
mod upstream;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use corium_fleet_common::cert_reload::{Reload, Reloading};

pub use config::{Args, Config};
use corium_store::FullStore;
use tokio::net::TcpListener;

/// The two sockets an ingress serves.
pub struct Listeners {
    /// Clients (gRPC over HTTP/2).
    pub grpc: TcpListener,
    /// Admin HTTP (`/metrics`, `/healthz`, `/readyz`).
    pub admin: TcpListener,
    /// Clients over TLS (when configured).
    pub tls: Option<TcpListener>,
}

/// Why an ingress could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The authentication flags cannot be used (a usage error).
    #[error("{0}")]
    Auth(corium_fleet_common::process::ConfigError),
    /// The `--placement-map` file is unreadable or refused (a usage error,
    /// not worth retrying).
    #[error("--placement-map: {0}")]
    PlacementMap(#[from] corium_fleet_common::placement_map::LoadError),
    /// TLS material that cannot be used (a usage error, not worth retrying).
    #[error("{side} TLS: {source}")]
    Tls {
        /// Which side: `client` (the listener) or `upstream` (the hop).
        side: &'static str,
        /// Why.
        #[source]
        source: corium_fleet_common::tls::TlsError,
    },
    /// The shared storage could not be opened (it may come up later).
    #[error(transparent)]
    Storage(#[from] corium_fleet_store::OpenError),
}

impl Error {
    /// What an operator or supervisor should do.
    #[must_use]
    pub const fn kind(&self) -> corium_fleet_wire::kind::ErrorKind {
        match self {
            Self::Auth(_) | Self::PlacementMap(_) | Self::Tls { .. } => {
                corium_fleet_wire::kind::ErrorKind::GiveUp
            }
            Self::Storage { .. } => corium_fleet_wire::kind::ErrorKind::RetryLater,
        }
    }
}

/// Runs the ingress until `shutdown` resolves, then stops accepting and lets
/// in-flight calls finish (bounded).
///
/// # Errors
/// [`Error::Storage`] when storage cannot be opened; [`Error::PlacementMap`]
/// for a placement map that does not load; [`Error::Tls`] for unusable TLS
/// material.
pub async fn run(
    config: Config,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    corium_fleet_common::tls::install_default_provider();
    let describe = config.storage.backend.describe();
    // The same bounded, retrying open as a node's (fresh stores race to
    // initialise their schema).
    let corium_fleet_store::Opened { store, prefix_read } = corium_fleet_store::open_store(
        &config.storage.backend,
        &config.storage.data_dir,
        config.storage_timeout * 2,
        config.storage.pool,
    )
    .await?;
    let metrics = Arc::new(metrics::Metrics::default());
    let cache = owner_cache::Cache::new(
        Arc::clone(&store),
        config.owner_cache_ttl,
        config.owner_cache_capacity,
        config.storage_timeout,
        Arc::clone(&metrics),
    );
    tracing::info!(
        listen = ?listeners.grpc.local_addr().ok(),
        admin = ?listeners.admin.local_addr().ok(),
        storage = %describe,
        members = config.membership.members.len(),
        "ingress serving"
    );
    let (storage_timeout, replicas) = (config.storage_timeout, config.membership.replicas);
    let tls_listen = config.tls_listen.clone();
    let caps = config.max_connections;
    let preface_timeout = config.preface_timeout;
    let settings = connection_settings(&config);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let members = placement_members(&config, prefix_read, &stop_rx);
    let map = placement_map(&config, &store, &members, &stop_rx).await?;
    let (guard, gate) = guards(&config)?;
    // TLS material follows its files (polled, and on SIGHUP).
    let upstream_tls = upstream_tls(config.upstream.as_ref())?;
    let tls = client_tls(tls_listen, listeners.tls)?;
    let material = reloadable(
        upstream_tls.as_ref(),
        tls.as_ref().map(|(_, reloading)| reloading),
    );
    tokio::spawn(corium_fleet_common::cert_reload::watch(
        material.clone(),
        stop_rx.clone(),
    ));
    let status_page = status_page::StatusPage::new(&store, &members, &map, replicas, storage_timeout);
    let proxy = Arc::new(proxy::Proxy::new(
        config,
        members,
        map,
        cache,
        guard,
        Arc::clone(&metrics),
        upstream_tls,
    ));
    // One set of caps over both listeners.
    let connections = connections::Connections::new(caps.total, caps.per_client, preface_timeout);
    tokio::spawn(corium_fleet_common::admin_http::serve(
        listeners.admin,
        admin_handler(
            &metrics,
            storage_health(&store, storage_timeout, &metrics, &stop_rx),
            material,
            status_page,
            proxy.failover_buffer(),
            Arc::clone(&connections),
            gate,
        ),
        stop_rx,
    ));
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let cleartext = server::serve(
        listeners.grpc,
        None,
        Arc::clone(&proxy),
        Arc::clone(&connections),
        settings,
        shutdown_rx.clone(),
    );
    let encrypted = async {
        if let Some((listener, acceptor)) = tls {
            server::serve(
                listener,
                Some(acceptor),
                Arc::clone(&proxy),
                Arc::clone(&connections),
                settings,
                shutdown_rx.clone(),
            )
            .await;
        }
    };
    let signal = async {
        shutdown.await;
        let _ = shutdown_tx.send(true);
    };
    tokio::join!(cleartext, encrypted, signal);
    let _ = stop_tx.send(true);
    tracing::info!("ingress stopped");
    Ok(())
}

/// The guard every call is authenticated with, and the admin port's gate,
/// which lets operators read the status pages by that guard. The ingress
/// authenticates; the owner authorizes (with the same flags and its
/// policy), so no authorizer runs here.
fn guards(
    config: &Config,
) -> Result<
    (
        corium_protocol::authz::Guard,
        corium_fleet_common::admin_http::OperatorGate,
    ),
    Error,
> {
    let guard = config
        .auth
        .guard(Arc::new(corium_protocol::authz::AllowAll))
        .map_err(Error::Auth)?;
    let gate = corium_fleet_common::admin_http::OperatorGate::new(guard.clone(), config.auth.clone())
        .trust_loopback(config.admin_trust_loopback);
    Ok((guard, gate))
}

/// The placement members: the static `--member` list, or — without one —
/// the live members of the node registry, followed until `stop`.
fn placement_members(
    config: &Config,
    reader: Arc<dyn corium_fleet_store::prefix_read::PrefixRead>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> corium_fleet_store::registry::Members {
    let members = corium_fleet_store::registry::Members::new(config.membership.members.clone());
    if config.membership.members.is_empty() {
        // No static list: follow the live members in the node registry,
        // every record in one read (one query on PostgreSQL).
        let followed = members.clone();
        tokio::spawn(corium_fleet_store::registry::follow(
            reader,
            Duration::from_secs(3),
            config.storage_timeout,
            move |records| followed.set_live(&records),
            stop.clone(),
        ));
    }
    members
}

/// The operator placement map: loaded from `--placement-map` (checked like
/// the transactors check it) and followed until `stop`; empty without one.
async fn placement_map(
    config: &Config,
    store: &Arc<dyn FullStore>,
    members: &corium_fleet_store::registry::Members,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<corium_fleet_common::placement_map::Watched, Error> {
    let map = corium_fleet_common::placement_map::Watched::default();
    if let Some(path) = config.membership.placement_map.clone() {
        if config.membership.members.is_empty() {
            corium_fleet_store::registry::refresh(store.as_ref(), members).await;
        }
        let (loaded, warnings) = corium_fleet_common::placement_map::Map::load_at_start(
            &path,
            &members.get(),
            config.membership.replicas,
            !config.membership.members.is_empty(),
        )?;
        for warning in warnings {
            tracing::warn!(%warning, "placement map names a node that is not live; it is skipped until it joins");
        }
        map.replace(loaded);
        let members = members.clone();
        tokio::spawn(map.clone().follow(
            path,
            Duration::from_secs(2),
            move || members.get(),
            config.membership.replicas,
            stop.clone(),
        ));
    }
    Ok(map)
}

/// How client connections are served, from `config`.
fn connection_settings(config: &Config) -> server::ConnectionSettings {
    server::ConnectionSettings {
        max_streams: config.max_streams_per_connection,
        life: connection_life::Life {
            idle: config.max_connection_idle,
            age: config.max_connection_age,
            // Half the drain period, at most 5 s: a leaving connection's
            // GOAWAY waits for quiet at most this long.
            settle: (config.drain_timeout / 2).min(Duration::from_secs(5)),
        },
        drain: config.drain_timeout,
    }
}

/// The TLS material that follows its files: the hop's client identity and
/// the client listener's certificate, where configured.
fn reloadable<A, B>(upstream: Option<&Arc<A>>, listener: Option<&Arc<B>>) -> Vec<Arc<dyn Reload>>
where
    A: Reload + 'static,
    B: Reload + 'static,
{
    let mut material: Vec<Arc<dyn Reload>> = Vec::new();
    if let Some(upstream) = upstream {
        material.push(Arc::clone(upstream) as Arc<dyn Reload>);
    }
    if let Some(listener) = listener {
        material.push(Arc::clone(listener) as Arc<dyn Reload>);
    }
    material
}

/// Probes `store` in the background (until `stop`) for readiness and the
/// `corium_fleet_ingress_storage_up` gauge.
fn storage_health(
    store: &Arc<dyn FullStore>,
    timeout: Duration,
    metrics: &Arc<metrics::Metrics>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Arc<storage_health::StorageHealth> {
    let health = Arc::new(storage_health::StorageHealth::default());
    tokio::spawn(Arc::clone(&health).follow(Arc::clone(store), timeout, Arc::clone(metrics), stop.clone()));
    health
}

/// The admin HTTP answers: `/metrics`, `/healthz`, `/readyz` (ready once
/// storage was reached after start: later storage trouble is a metric, not
/// an outage; see `storage_health.rs`), and the status page (`/status`,
/// `/status.json`), which names every node, its internal endpoint and the
/// databases it owns: only for loopback or an operator (`gate`; the probes
/// and the scrape stay open).
fn admin_handler(
    metrics: &Arc<metrics::Metrics>,
    health: Arc<storage_health::StorageHealth>,
    material: Vec<Arc<dyn Reload>>,
    status_page: Arc<status_page::StatusPage>,
    failover: Arc<failover_buffer::FailoverBuffer>,
    connections: Arc<connections::Connections>,
    gate: corium_fleet_common::admin_http::OperatorGate,
) -> corium_fleet_common::admin_http::Handler {
    let metrics = Arc::clone(metrics);
    let registry = Arc::new(corium_fleet_common::metrics::registry(move |scrape| {
        metrics.collect(scrape);
        failover.collect(scrape);
        connections.collect(scrape);
        corium_fleet_common::cert_reload::collect(&material, scrape);
    }));
    let gate = Arc::new(gate);
    Arc::new(move |request: corium_fleet_common::admin_http::AdminRequest| {
        let health = Arc::clone(&health);
        let registry = Arc::clone(&registry);
        let status_page = Arc::clone(&status_page);
        let refused = gate.check(&request).err();
        Box::pin(async move {
            if let Some(refusal) = refused {
                return refusal;
            }
            match request.path.as_str() {
                "/metrics" => (200, corium_fleet_common::metrics::exposition(&registry)),
                "/healthz" => (200, "ok\n".to_owned()),
                "/readyz" => {
                    if health.ready() {
                        (200, "ready\n".to_owned())
                    } else {
                        (503, "storage not reached yet since start\n".to_owned())
                    }
                }
                "/status" => status_page::StatusPage::page(),
                "/status.json" => status_page.json().await,
                _ => (
                    404,
                    "not found: try /metrics, /healthz, /readyz or /status\n".to_owned(),
                ),
            }
        })
    })
}

/// The client TLS listener and its acceptor, when both `--tls-listen` is
/// configured and its socket was bound.
/// The client listener's TLS configuration, following its files.
type ServerTls = Arc<Reloading<rustls::ServerConfig>>;

fn client_tls(
    tls_listen: Option<config::TlsListener>,
    listener: Option<TcpListener>,
) -> Result<Option<(TcpListener, ServerTls)>, Error> {
    match (tls_listen, listener) {
        (
            Some(config::TlsListener {
                identity,
                client_certificates: clients,
                ..
            }),
            Some(listener),
        ) => {
            let mut files = vec![identity.cert.clone(), identity.key.clone()];
            files.extend(clients.iter().map(|clients| clients.ca.clone()));
            let (cert, key) = (identity.cert.clone(), identity.key);
            let reloading = Reloading::new("client", &identity.cert, files, move || {
                let clients = clients
                    .as_ref()
                    .map(|clients| (clients.ca.as_path(), clients.required));
                corium_fleet_common::tls::server_config_for(&cert, &key, clients)
            })
            .map_err(|source| Error::Tls {
                side: "client",
                source,
            })?;
            Ok(Some((listener, reloading)))
        }
        _ => Ok(None),
    }
}

/// The hop's mTLS material (fleet CA, this ingress's client certificate),
/// reloaded when its files change.
fn upstream_tls(
    upstream: Option<&config::FleetTls>,
) -> Result<Option<Arc<Reloading<rustls::ClientConfig>>>, Error> {
    let Some(config::FleetTls { identity, ca }) = upstream else {
        return Ok(None);
    };
    let files = vec![ca.clone(), identity.cert.clone(), identity.key.clone()];
    let (ca, cert, key) = (ca.clone(), identity.cert.clone(), identity.key.clone());
    Reloading::new("upstream", &identity.cert, files, move || {
        corium_fleet_common::tls::client_config(&ca, &cert, &key)
    })
    .map(Some)
    .map_err(|source| Error::Tls {
        side: "upstream",
        source,
    })
}
