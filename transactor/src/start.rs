//! Starting a node: its storage opened, its host and services' shared
//! state built, the node registered, and its background work (registry
//! keep-alive and follower, standby watcher, warm and hot standbys, placement map,
//! read-replica sweeps and relay, memory budget, load balance, request-id
//! retention, admin HTTP) spawned — everything but the gRPC server, which
//! [`run`](crate::run) adds.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::error::Error;
use crate::service::node::Node;
use crate::{
    admin_http, authz, cell, counting, host, hot_standby, peer, read_ahead, replica, seams, service, standby,
    warm_standby,
};

/// How often `--placement-map` is re-read.
const MAP_RELOAD_PERIOD: Duration = Duration::from_secs(2);
/// How long a hot standby's stream may be silent before it is resumed:
/// three of Corium's subscription heartbeats (10 s) and a margin.
const HOT_STANDBY_SILENCE: Duration = Duration::from_secs(35);

/// A node's host and background work (registry, standby watcher, placement
/// map, admin HTTP), started without its gRPC server: [`run`](crate::run) serves it, the
/// simulation tier calls its services in-process.
pub struct Running {
    /// The node: its host (its cells and the ownership decision) and what
    /// its services share.
    pub node: Arc<Node>,
    pub(crate) stop: tokio::sync::watch::Sender<bool>,
    pub(crate) registration: tokio::task::JoinHandle<()>,
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
        features: host::FEATURES
            .iter()
            .map(|feature| (*feature).to_owned())
            .collect(),
        storage_keys: host.template.keys.ids(),
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
pub(crate) async fn open_storage(
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
    tokio::spawn(Arc::clone(&host.template.hot_standbys).run(
        Arc::clone(host),
        records_rx.clone(),
        stop.clone(),
    ));
    tokio::spawn(standby::watch(Arc::clone(host), records_rx, stop.clone()));
}

/// Applies read-replica evictions (idle, over the cap) every few seconds
/// until `stop`: moka applies them only on cache operations, and an idle
/// node performs none.
async fn sweep_replicas(node: Arc<Node>, stop: tokio::sync::watch::Receiver<bool>) {
    let period =
        (node.host.config.read_replicas.idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut every = corium_fleet_common::every::Every::new(period, stop);
    while every.tick().await {
        node.replicas.sweep().await;
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

/// What every cell of the node is opened with: the shared store under the
/// view `view_kind`, this process's lease owner names, the read-ahead and
/// the hot standbys (reaching owners through `peers`).
fn template(
    config: &Config,
    base: &Arc<dyn corium_store::FullStore>,
    incarnation: &str,
    view_kind: &'static str,
    prefix_read: Arc<dyn corium_fleet_store::prefix_read::PrefixRead>,
    peers: &peer::Peers,
    refuse_warm_starts: bool,
) -> cell::Template {
    cell::Template {
        base: Arc::clone(base),
        view_kind,
        data_dir: config.storage.data_dir.clone(),
        owner_prefix: format!("{}/{}", config.node_id, incarnation),
        generation: std::sync::atomic::AtomicU64::new(1),
        advertise: config.advertise.clone(),
        lease_ttl_ms: i64::try_from(config.lease_ttl.as_millis()).unwrap_or(i64::MAX),
        read_ahead: read_ahead::Budget::new(
            config.activation_read_ahead_mib,
            config.warm_standby_mib,
            prefix_read,
        ),
        hot_standbys: hot_standby::HotStandbys::new(
            config.hot_standbys,
            hot_standby::Reach {
                base: Arc::clone(base),
                peers: peers.clone(),
                silence: HOT_STANDBY_SILENCE,
                keyring: config.storage_keys.keyring.clone(),
            },
            refuse_warm_starts,
        ),
        keys: config.storage_keys.clone(),
    }
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
    hooks: seams::Hooks,
) -> Result<Running, Error> {
    let describe = config.storage.backend.describe();
    let root_ops = Arc::new(counting::CountingStore::new(store));
    let base: Arc<dyn corium_store::FullStore> = Arc::clone(&root_ops) as Arc<dyn corium_store::FullStore>;
    let incarnation = uuid::Uuid::new_v4().simple().to_string();
    let prefix_read = prefix_read.unwrap_or_else(|| {
        Arc::new(corium_fleet_store::prefix_read::ListThenRead(Arc::clone(&base)))
            as Arc<dyn corium_fleet_store::prefix_read::PrefixRead>
    });
    let node_token = peer::node_token(&config)?;
    let peers = peer::Peers::new(
        config.tls.as_ref(),
        config.storage_timeout * 2,
        node_token.clone(),
        config.membership.verify_node_identity,
    )?;
    let template = template(
        &config,
        &base,
        &incarnation,
        view_kind,
        Arc::clone(&prefix_read),
        &peers,
        hooks.refuse_warm_starts,
    );
    // Authorization is permit-all, as a stock transactor's without a policy
    // database, or follows `--authz-db`; authentication follows the flags.
    let client_tls = config.tls.as_ref().map(peer::Peers::client_tls).transpose()?;
    let (authorizer, policy) = authz::authorizer(&config.authz, &config.auth, node_token, client_tls);
    let guard = config
        .auth
        .guard(authorizer)
        .map_err(|error| Error::Config(error.to_string()))?;
    let host = host::Host::new(config, template, root_ops, peers, incarnation, hooks.after_commit);
    let (relay, relay_listener) = bind_relay(&host.peers).await?;
    let node = Node::new(Arc::clone(&host), guard, Arc::clone(&relay));
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
