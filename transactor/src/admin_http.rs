//! The node's admin answers: `/metrics` (Prometheus text), `/healthz` (the
//! process answers) and `/readyz` (storage answers within the storage
//! timeout and the node is not shutting down), `/debug/root-ops` (root
//! operations per database, JSON: invariant 5 made observable).

use std::sync::Arc;

use corium_fleet_common::admin_http::Handler;

use crate::host::Host;

async fn answer(host: Arc<Host>, path: String) -> (u16, String) {
    match path.as_str() {
        "/metrics" => {
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
            let mut text = host.metrics.render(cells.len(), &by_rank, refused);
            corium_fleet_common::prometheus::gauge(
                &mut text,
                "corium_fleet_subscriptions",
                "Subscribe streams open on this node.",
                host.subscriptions.load(std::sync::atomic::Ordering::Relaxed) as u64,
            );
            host.work.render(&mut text);
            if let Some(material) = host.tls_material.get() {
                text.push_str(&corium_fleet_common::cert_reload::render(material));
            }
            (200, text)
        }
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

/// The admin handler for `host`.
#[must_use]
pub fn handler(host: Arc<Host>) -> Handler {
    Arc::new(move |path| Box::pin(answer(Arc::clone(&host), path)))
}
