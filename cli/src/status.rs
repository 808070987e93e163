//! `corium-fleet status`: one node's view of the fleet, as a table or JSON.

use std::time::Duration;

use anyhow::Context as _;
use corium_fleet_proto::fleet::NodeStatusRequest;
use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;

#[derive(clap::Args)]
pub struct StatusArgs {
    /// A transactor node's gRPC endpoint.
    #[arg(long, default_value = "http://127.0.0.1:7001", env = "CORIUM_FLEET_ENDPOINT")]
    endpoint: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let channel = tonic::transport::Endpoint::from_shared(args.endpoint.clone())
        .with_context(|| format!("bad endpoint {:?}", args.endpoint))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .connect()
        .await
        .with_context(|| format!("cannot reach {}", args.endpoint))?;
    let status = FleetAdminClient::new(channel)
        .node_status(NodeStatusRequest {})
        .await
        .with_context(|| format!("node status from {}", args.endpoint))?
        .into_inner();
    if args.json {
        let databases: Vec<_> = status
            .databases
            .iter()
            .map(|db| {
                serde_json::json!({
                    "database": db.database, "state": db.state, "owner": db.owner_id,
                    "lease_version": db.lease_version, "basis_t": db.basis_t,
                    "candidates": db.candidates.iter().map(|c| &c.node_id).collect::<Vec<_>>(),
                })
            })
            .collect();
        let json = serde_json::json!({
            "node_id": status.node_id, "zone": status.zone, "incarnation": status.incarnation,
            "endpoint": status.internal_endpoint, "storage": status.storage,
            "owned": status.owned, "standby": status.standby, "cold": status.cold,
            "databases": databases,
        });
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    println!(
        "node {} (zone {:?}, {}) storage {} — owned {}, standby {}, cold {}",
        status.node_id,
        status.zone,
        status.internal_endpoint,
        status.storage,
        status.owned,
        status.standby,
        status.cold
    );
    println!(
        "{:<32} {:<8} {:<12} {:>8} {:>8}  candidates",
        "DATABASE", "STATE", "OWNER", "LEASE", "BASIS"
    );
    for db in &status.databases {
        let candidates: Vec<&str> = db.candidates.iter().map(|c| c.node_id.as_str()).collect();
        println!(
            "{:<32} {:<8} {:<12} {:>8} {:>8}  {}",
            db.database,
            db.state,
            db.owner_id,
            db.lease_version,
            db.basis_t,
            candidates.join(",")
        );
    }
    Ok(())
}
