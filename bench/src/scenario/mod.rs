//! The benchmark scenarios, each against its baseline in the same run.

pub(crate) mod activation;
pub(crate) mod auth;
pub(crate) mod backup;
pub(crate) mod drain;
pub(crate) mod failover;
pub(crate) mod history;
pub(crate) mod many;
pub(crate) mod moves;
pub(crate) mod overload;
pub(crate) mod owner_cache;
pub(crate) mod reads;
pub(crate) mod real_path;
pub(crate) mod rebalance;
pub(crate) mod recovery;
pub(crate) mod replica_moves;
pub(crate) mod scale_model;
pub(crate) mod scaling;
pub(crate) mod tracing;

/// One counter from a Prometheus text exposition (0 when absent).
#[must_use]
pub(crate) fn counter(metrics: &str, name: &str) -> f64 {
    corium_fleet_tests::metric(metrics, name).unwrap_or(0.0)
}

/// The admin `/metrics` of the process on `port`.
pub(crate) async fn metrics(port: u16) -> String {
    corium_fleet_tests::http_get(port, "/metrics")
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// A filesystem fleet of `nodes` nodes (lease TTL 5 s) and one ingress;
/// the ingress's address with it.
pub(crate) async fn filesystem_fleet(nodes: usize) -> (corium_fleet_tests::Fleet, String) {
    let (fleet, address) = corium_fleet_tests::Fleet::builder(corium_fleet_tests::Backend::Filesystem)
        .nodes(nodes)
        .lease_ttl(std::time::Duration::from_secs(5))
        .start_with_ingress()
        .await;
    (fleet, address)
}

/// Hands `db` from node `owner`, its owner, to another of its candidates
/// (an admin handoff); the old owner's measured unavailability, ms.
pub(crate) async fn hand_off_from(
    fleet: &corium_fleet_tests::Fleet,
    owner: usize,
    db: &str,
) -> anyhow::Result<u64> {
    let target = fleet
        .other_candidate(db, owner)
        .ok_or_else(|| anyhow::anyhow!("no other candidate"))?;
    let response = corium_fleet_tests::corium::admin(&fleet.nodes[owner].endpoint())
        .await
        .handoff(corium_fleet_proto::fleet::HandoffRequest {
            database: db.to_owned(),
            target_node_id: fleet.nodes[target].id.clone(),
        })
        .await?
        .into_inner();
    Ok(response.unavailable_ms)
}
