//! `corium-fleet status`: one node's view of the fleet, as a table or JSON.

use std::time::Duration;

use anyhow::Context as _;
use corium_fleet_proto::fleet::NodeStatusRequest;
use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_protocol::auth::TokenInterceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A channel to the fleet that attaches the `--token` bearer token to every
/// call made on it.
pub(crate) type Authorized = InterceptedService<Channel, TokenInterceptor>;

/// How to reach one transactor node's admin service (or the ingress), and
/// the credentials to present.
#[derive(clap::Args)]
pub(crate) struct NodeArgs {
    /// A transactor node's gRPC endpoint.
    #[arg(long, default_value = "http://127.0.0.1:7001", env = "CORIUM_FLEET_ENDPOINT")]
    pub(crate) endpoint: String,
    /// Bearer token sent as `authorization: Bearer <token>` on every call.
    /// Defaults to the shared development token
    /// (`corium_protocol::auth::DEFAULT_DEV_TOKEN`, which a development fleet
    /// accepts) so a local fleet needs no auth flags; pass `--token ""` to
    /// connect anonymously, or set `CORIUM_TOKEN` to use a different secret
    /// everywhere.
    #[arg(long, env = "CORIUM_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Fleet CA (PEM) for an mTLS node (`https://` endpoint).
    #[arg(long, requires_all = ["cert", "key"])]
    pub(crate) ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) signed by the fleet CA.
    #[arg(long, requires = "ca")]
    pub(crate) cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, requires = "ca")]
    pub(crate) key: Option<std::path::PathBuf>,
    /// Name to verify the node's certificate against [default: the endpoint's host].
    #[arg(long)]
    pub(crate) tls_name: Option<String>,
}

impl NodeArgs {
    /// The admin client of the node at `endpoint` (this node's, or another
    /// one reached with the same TLS settings and token).
    ///
    /// # Errors
    /// As [`NodeArgs::channel`].
    pub(crate) async fn connect(
        &self,
        endpoint: &str,
        timeout: Duration,
    ) -> anyhow::Result<FleetAdminClient<Authorized>> {
        Ok(FleetAdminClient::new(self.channel(endpoint, timeout).await?))
    }

    /// A channel to `endpoint` with these TLS settings, attaching the
    /// `--token` bearer token to every call; each call made on it is bounded
    /// by `timeout`.
    ///
    /// # Errors
    /// A token that is not valid metadata, a bad endpoint, unreadable TLS
    /// files, or no connection within 5 s.
    pub(crate) async fn channel(&self, endpoint: &str, timeout: Duration) -> anyhow::Result<Authorized> {
        let token = crate::auth::interceptor(self.token.as_deref())?;
        let mut target = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
            .with_context(|| format!("bad endpoint {endpoint:?}"))?;
        if let (Some(ca), Some(cert), Some(key)) = (&self.ca, &self.cert, &self.key) {
            let read = |path: &std::path::Path| {
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
            };
            let mut tls = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?))
                .identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
            if let Some(name) = &self.tls_name {
                tls = tls.domain_name(name.clone());
            }
            target = target.tls_config(tls).context("TLS configuration")?;
        }
        let channel = target
            .connect_timeout(Duration::from_secs(5))
            .timeout(timeout)
            .connect()
            .await
            .with_context(|| format!("cannot reach {endpoint}"))?;
        Ok(InterceptedService::new(channel, token))
    }
}

/// `corium-fleet status` flags: the node to ask, and the output format.
#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs `corium-fleet status`: prints the node's status as a table or JSON.
///
/// # Errors
/// The node cannot be reached or answered with an error.
pub(crate) async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let endpoint = args.node.endpoint.clone();
    let mut client = args.node.connect(&endpoint, Duration::from_secs(15)).await?;
    let status = client
        .node_status(NodeStatusRequest {})
        .await
        .with_context(|| format!("node status from {endpoint}"))?
        .into_inner();
    if args.json {
        let databases: Vec<_> = status
            .databases
            .iter()
            .map(|db| {
                serde_json::json!({
                    "database": db.database, "state": db.state, "owner": db.owner_id,
                    "lease_version": db.lease_version, "basis_t": db.basis_t,
                    "owner_rank": owner_rank(db),
                    "candidates": db.candidates.iter().map(|c| serde_json::json!({
                        "node_id": c.node_id, "zone": c.zone, "rank": c.rank,
                    })).collect::<Vec<_>>(),
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
        "{:<32} {:<8} {:<12} {:>4} {:>8} {:>8}  CANDIDATES (rank:node)",
        "DATABASE", "STATE", "OWNER", "RANK", "LEASE", "BASIS"
    );
    for db in &status.databases {
        let candidates: Vec<String> = db
            .candidates
            .iter()
            .map(|c| format!("{}:{}", c.rank, c.node_id))
            .collect();
        println!(
            "{:<32} {:<8} {:<12} {:>4} {:>8} {:>8}  {}",
            db.database,
            db.state,
            db.owner_id,
            owner_rank(db).map_or_else(|| "-".to_owned(), |rank| rank.to_string()),
            db.lease_version,
            db.basis_t,
            candidates.join(" ")
        );
    }
    Ok(())
}

/// The owner's rank among the candidates (`None`: no owner, or the owner is
/// not a candidate — it will hand the database off).
fn owner_rank(db: &corium_fleet_proto::fleet::DatabaseView) -> Option<u32> {
    db.candidates
        .iter()
        .find(|candidate| !db.owner_id.is_empty() && candidate.node_id == db.owner_id)
        .map(|candidate| candidate.rank)
}
