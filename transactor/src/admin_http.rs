//! The node's admin answers: `/metrics` (Prometheus text), `/healthz` (the
//! process answers) and `/readyz` (storage answers within the storage
//! timeout and the node is not shutting down).

use std::sync::Arc;

use corium_fleet_common::admin_http::Handler;

use crate::host::Host;

async fn answer(host: Arc<Host>, path: String) -> (u16, String) {
    match path.as_str() {
        "/metrics" => (200, host.metrics.render(host.cells().len())),
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
        _ => (404, "not found: try /metrics, /healthz or /readyz\n".to_owned()),
    }
}

/// The admin handler for `host`.
#[must_use]
pub fn handler(host: Arc<Host>) -> Handler {
    Arc::new(move |path| Box::pin(answer(Arc::clone(&host), path)))
}
