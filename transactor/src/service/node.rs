//! One fleet node as its services see it: the [`Host`] (its cells, and who
//! serves each database) and what every call on the node shares — the
//! guard that authorizes, the work limits and the waits, the subscriptions,
//! the read replicas. The host knows nothing of these: it keeps ownership
//! state only, so the modules that serve calls build on it, never the other
//! way round.

use std::sync::{Arc, OnceLock};

use corium_fleet_common::cert_reload::Reload;
use corium_protocol::authz::Guard;

use super::subscribe::Subscriptions;
use crate::host::Host;
use crate::replica::Replicas;
use crate::waiters::Waiters;
use crate::work_limits::WorkLimits;

/// A node: its host and its services' shared state.
pub struct Node {
    /// The cells and the ownership decision.
    pub(crate) host: Arc<Host>,
    /// Authenticates direct callers and authorizes every call: the same
    /// guard the Corium services in the cells are built with.
    pub(crate) guard: Guard,
    /// Overload shedding for client calls (`--max-inflight-calls` and the
    /// limits beside it).
    pub(crate) work: Arc<WorkLimits>,
    /// Calls waiting for a basis (`--max-basis-waits` and the limits beside
    /// it): they hold no work place.
    pub(crate) waiters: Waiters,
    /// `Subscribe` streams open, on the node and per principal
    /// (`--max-subscriptions`, `--max-subscriptions-per-principal`).
    pub(crate) subscriptions: Subscriptions,
    /// Read replicas this node serves `PeerServer` reads from.
    pub(crate) replicas: Replicas,
    /// The node's reloadable TLS material, once serving (for `/metrics`).
    pub(crate) tls_material: OnceLock<Vec<Arc<dyn Reload>>>,
}

impl Node {
    /// A node over `host`, authorizing with `guard`, its limits from the
    /// host's configuration, its read replicas subscribing through `relay`.
    #[must_use]
    pub(crate) fn new(host: Arc<Host>, guard: Guard, relay: Arc<crate::replica::Relay>) -> Arc<Self> {
        let config = &host.config;
        let replicas = Replicas::new(config.read_replicas, relay);
        // The memory budget charges the replicas and drops them first.
        let _ = host.droppable.set(replicas.memory());
        Arc::new(Self {
            guard,
            work: WorkLimits::new(config.work_limits.clone()),
            waiters: Waiters::new(config.basis_waits),
            subscriptions: Subscriptions::default(),
            replicas,
            tls_material: OnceLock::new(),
            host,
        })
    }

    /// The node's host: its cells and the ownership decision.
    #[must_use]
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// How busy this node is now: what its registry record carries and
    /// `NodeStatus` reports.
    #[must_use]
    pub(crate) fn load(&self) -> corium_fleet_store::registry::Load {
        let count = |value: usize| u32::try_from(value).unwrap_or(u32::MAX);
        corium_fleet_store::registry::Load {
            calls_running: count(self.work.running()),
            calls_waiting: count(self.work.waiting()),
            subscriptions: count(self.subscriptions.open()),
            calls_total: self.work.admitted(),
            // Firm memory only: caches are dropped before this node refuses
            // an activation, so they must not make it look full to peers.
            memory_used_bytes: self
                .host
                .metrics
                .memory_firm_bytes
                .load(std::sync::atomic::Ordering::Relaxed),
            memory_budget_bytes: self.host.config.memory_budget.unwrap_or(0),
            calls_per_second: {
                let rates = self.host.moves.rates();
                // Whole calls per second: plenty for balancing.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let whole = rates.node.round().min(f64::from(u32::MAX)) as u32;
                whole
            },
            cpu_percent: self.host.moves.rates().cpu_percent,
        }
    }
}
