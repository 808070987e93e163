//! How every command reaches the fleet: a transactor node's admin service
//! or the ingress, over TLS when asked, with the `--token` on every call.

use std::time::Duration;

use anyhow::Context as _;
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
    /// The fleet's address (an ingress; stock Corium's port), or one
    /// transactor node's gRPC endpoint.
    #[arg(long, default_value = "http://127.0.0.1:4334", env = "CORIUM_FLEET_ENDPOINT")]
    pub(crate) endpoint: String,
    /// Bearer token sent as `authorization: Bearer <token>` on every call.
    /// Defaults to the shared development token
    /// (`corium_protocol::auth::DEFAULT_DEV_TOKEN`, which a development fleet
    /// accepts) so a local fleet needs no auth flags; pass `--token ""` to
    /// connect anonymously, or set `CORIUM_TOKEN` to use a different secret
    /// everywhere.
    #[arg(long, env = "CORIUM_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// CA (PEM) that signed the endpoint's certificate (`https://`): the
    /// chart's client-port CA, or the fleet CA for a node's mTLS port
    /// [default: the system's roots].
    #[arg(long)]
    pub(crate) ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) signed by the fleet CA, for a port that asks
    /// for one (a node's mTLS port).
    #[arg(long, requires_all = ["ca", "key"])]
    pub(crate) cert: Option<std::path::PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, requires_all = ["ca", "cert"])]
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
        let read = |path: &std::path::Path| {
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
        };
        // `--ca`, else the system's roots for an https:// endpoint (a port
        // behind a public certificate; `SSL_CERT_FILE` and `SSL_CERT_DIR`
        // are honoured).
        let roots = match &self.ca {
            Some(ca) => Some(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?)),
            ),
            None if endpoint.starts_with("https://") => {
                Some(tonic::transport::ClientTlsConfig::new().with_native_roots())
            }
            None => None,
        };
        if let Some(mut tls) = roots {
            if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
                tls = tls.identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
            }
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
            .with_context(|| {
                let tls = if endpoint.starts_with("https://") && self.ca.is_none() {
                    "; its certificate was checked against the system's roots: pass --ca with the CA that signed it"
                } else {
                    ""
                };
                format!("cannot reach {endpoint}: is the fleet running there? set --endpoint or CORIUM_FLEET_ENDPOINT{tls}")
            })?;
        Ok(InterceptedService::new(channel, token))
    }
}
