//! The benchmark scenarios, each against its baseline in the same run.

pub mod activation;
pub mod failover;
pub mod owner_cache;
pub mod real_path;
pub mod recovery;
pub mod scaling;

/// One counter from a Prometheus text exposition (0 when absent).
#[must_use]
pub fn counter(metrics: &str, name: &str) -> f64 {
    corium_fleet_tests::metric(metrics, name).unwrap_or(0.0)
}

/// The admin `/metrics` of the process on `port`.
pub async fn metrics(port: u16) -> String {
    corium_fleet_tests::http_get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}
