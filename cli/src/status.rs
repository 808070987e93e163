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
    /// Fleet CA (PEM) for an mTLS node (`https://` endpoint).
    #[arg(long, requires_all = ["cert", "key"])]
    ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) signed by the fleet CA.
    #[arg(long, requires = "ca")]
    cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, requires = "ca")]
    key: Option<std::path::PathBuf>,
    /// Name to verify the node's certificate against [default: the endpoint's host].
    #[arg(long)]
    tls_name: Option<String>,
}

pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let mut endpoint = tonic::transport::Endpoint::from_shared(args.endpoint.clone())
        .with_context(|| format!("bad endpoint {:?}", args.endpoint))?;
    if let (Some(ca), Some(cert), Some(key)) = (&args.ca, &args.cert, &args.key) {
        let read = |path: &std::path::Path| {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        };
        let mut tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?))
            .identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
        if let Some(name) = &args.tls_name {
            tls = tls.domain_name(name.clone());
        }
        endpoint = endpoint.tls_config(tls).context("TLS configuration")?;
    }
    let channel = endpoint
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
