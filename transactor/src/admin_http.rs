//! The node's admin answers: `/metrics` (Prometheus text), `/healthz` (the
//! process answers) and `/readyz` (storage answers within the storage
//! timeout and the node is not shutting down), `/debug/root-ops` (root
//! operations per database, JSON: invariant 5 made observable). Only the
//! first three are open to anyone; the rest only to loopback or an
//! operator's token (`OperatorGate`).

use std::sync::Arc;

use corium_fleet_common::admin_http::{AdminRequest, Handler, OperatorGate};
use corium_fleet_common::metrics::{Registry, Scrape};

use crate::host::Host;
use crate::service::node::Node;

/// Most databases with series of their own in `/metrics`: the busiest by
/// transactions (a node owning many more would otherwise grow the
/// exposition with its catalog).
const MAX_DATABASE_SERIES: usize = 256;

/// One per-database series: name, help, and how to read it.
type Series = (
    &'static str,
    &'static str,
    fn(&corium_transactor::metrics::Snapshot) -> u64,
);

/// Corium's own counters of each owned database (its cell's
/// `TransactorNode::metrics`), labelled by database, for the busiest
/// [`MAX_DATABASE_SERIES`]. They start again when a database's cell is
/// opened again (a move, an idle eviction), as Prometheus counters may.
fn collect_corium(scrape: &mut Scrape<'_>, cells: &[Arc<crate::cell::Cell>]) {
    let mut snapshots: Vec<(&str, corium_transactor::metrics::Snapshot)> = cells
        .iter()
        .map(|cell| (cell.db.as_str(), cell.node.metrics().snapshot()))
        .collect();
    snapshots.sort_by(|a, b| b.1.tx_total.cmp(&a.1.tx_total).then(a.0.cmp(b.0)));
    snapshots.truncate(MAX_DATABASE_SERIES);
    let samples = |value: fn(&corium_transactor::metrics::Snapshot) -> u64| {
        snapshots
            .iter()
            .map(move |(db, snapshot)| ([("db", *db)], value(snapshot)))
    };
    let counters: [Series; 3] = [
        (
            "corium_fleet_database_transactions_total",
            "Transactions Corium attempted on this database since its cell opened here.",
            |s| s.tx_total,
        ),
        (
            "corium_fleet_database_transaction_failures_total",
            "Transactions Corium failed on this database since its cell opened here.",
            |s| s.tx_failed,
        ),
        (
            "corium_fleet_database_index_runs_total",
            "Index runs Corium completed on this database since its cell opened here.",
            |s| s.index_runs,
        ),
    ];
    for (name, help, value) in counters {
        scrape.counters(name, help, samples(value));
    }
    scrape.gauges(
        "corium_fleet_database_queue_depth",
        "Transactions waiting for this database's commit lock.",
        samples(|s| s.queue_depth),
    );
}

/// Writes every series of the node: its own, its limits', its caches', its
/// replicas', Corium's per database, its TLS material's.
fn collect(node: &Node, scrape: &mut Scrape<'_>) {
    let host = &node.host;
    let mut by_rank = std::collections::BTreeMap::<String, u64>::new();
    let cells = host.cells();
    for cell in &cells {
        let rank = host
            .rank(&cell.db)
            .map_or_else(|| "none".to_owned(), |rank| rank.to_string());
        *by_rank.entry(rank).or_default() += 1;
    }
    let by_rank: Vec<(String, u64)> = by_rank.into_iter().collect();
    let refused = host.map.refused.load(std::sync::atomic::Ordering::Relaxed);
    host.metrics.collect(scrape, cells.len(), &by_rank, refused);
    scrape.gauge(
        "corium_fleet_subscriptions",
        "Subscribe streams open on this node.",
        node.subscriptions.open(),
    );
    node.work.collect(scrape);
    node.waiters.collect(scrape);
    collect_features(host, scrape);
    host.template.read_ahead.counts.collect(scrape);
    let warm = &host.template.read_ahead.warm;
    warm.counts.collect(warm, scrape);
    node.replicas.collect(scrape);
    host.template.hot_standbys.collect(scrape);
    collect_corium(scrape, &cells);
    if let Some(material) = node.tls_material.get() {
        corium_fleet_common::cert_reload::collect(material, scrape);
    }
}

async fn answer(node: Arc<Node>, registry: Arc<Registry>, path: String) -> (u16, String) {
    let host = &node.host;
    match path.as_str() {
        "/metrics" => (200, corium_fleet_common::metrics::exposition(&registry)),
        "/debug/root-ops" => (
            200,
            serde_json::to_string_pretty(&host.root_ops()).unwrap_or_default() + "\n",
        ),
        "/healthz" => (200, "ok\n".to_owned()),
        "/readyz" => {
            let probe = tokio::time::timeout(host.config.storage_timeout, host.base.get_root("meta:")).await;
            match probe {
                Ok(Ok(_)) if !host.is_stopping() => (200, "ready\n".to_owned()),
                Ok(Ok(_)) => (503, "shutting down\n".to_owned()),
                Ok(Err(error)) => (503, format!("storage unavailable: {error}\n")),
                Err(_) => (503, "storage timed out\n".to_owned()),
            }
        }
        _ => (
            404,
            "not found: try /metrics, /healthz, /readyz or /debug/root-ops\n".to_owned(),
        ),
    }
}

/// `corium_fleet_feature_enabled{feature=…}`: 1 for each format this node
/// writes now, which every live member lists (the version gate).
fn collect_features(host: &Host, scrape: &mut Scrape<'_>) {
    scrape.gauges(
        "corium_fleet_feature_enabled",
        "1 when every live member of the fleet reads a format, so this node writes it (a version gate).",
        crate::host::FEATURES
            .iter()
            .map(|feature| ([("feature", *feature)], u32::from(host.features.has(feature)))),
    );
}

/// The admin handler for `host`: what is not a probe or the scrape (the
/// per-database root operations name every database this node touched)
/// answers only loopback or an operator, by the node's own guard.
#[must_use]
pub(crate) fn handler(node: Arc<Node>) -> Handler {
    let gate = Arc::new(OperatorGate::new(
        node.guard.clone(),
        node.host.config.auth.clone(),
    ));
    let registry = Arc::new(corium_fleet_common::metrics::registry({
        let node = Arc::clone(&node);
        move |scrape| collect(&node, scrape)
    }));
    Arc::new(move |request: AdminRequest| {
        if let Err(refusal) = gate.check(&request) {
            return Box::pin(std::future::ready(refusal));
        }
        Box::pin(answer(Arc::clone(&node), Arc::clone(&registry), request.path))
    })
}
