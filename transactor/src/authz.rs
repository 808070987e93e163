//! Policy authorization (`--authz-db`): stock Corium's self-hosted
//! relationship policy (corium-authz `SystemDbAuthorizer`), with the same
//! flags as a stock transactor.
//!
//! A stock transactor leads its policy database and reads it locally. In a
//! fleet the policy database is one database like any other, owned by one
//! node; every node follows it the way a stock peer server does, over a
//! corium-peer `Connection` (`ConnectionPolicySource`) to the fleet's
//! members, authenticated with the node's certificate (or, where it does not
//! name the node, the static token: `peer::node_token`).
//! Until the policy loads, every decision is a denial (stock Corium's
//! fail-closed contract), except one the fleet adds ([`PolicyReaders`]):
//! operators and the fleet's nodes may always *read* the policy database,
//! or no node could ever load it (its owner would deny the subscription
//! with a policy it has not loaded yet).
//!
//! Create the policy as in stock Corium: `corium authz init --db NAME`
//! against the fleet before starting the nodes with `--authz-db NAME`
//! (design note 0011).

use std::sync::Arc;
use std::time::Duration;

use corium_authz::source::{DEFAULT_POLL_INTERVAL, PolicySource, SourceError};
use corium_authz::{AuthzConfig, BreakGlass, SystemDbAuthorizer};
use corium_db::Db;
use corium_fleet_common::auth::AuthFlags;
use corium_peer::authz::ConnectionPolicySource;
use corium_protocol::authz::ActionClass;
use corium_protocol::authz::{Access, Action, Authorizer, Decision, Principal};

/// Bound on one attempt to connect to the policy database.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// `--authz-*`: the stock transactor's policy flags.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AuthzFlags {
    /// Authorize every request against the relationship policy in this
    /// database (create it with `corium authz init`). Without it,
    /// authorization is permit-all, as in stock Corium.
    #[arg(long, env = "CORIUM_AUTHZ_DB")]
    pub authz_db: Option<String>,
    /// Re-read the policy before deciding write and admin actions.
    #[arg(long, requires = "authz_db")]
    pub authz_fresh_writes: bool,
    /// Role admitted while the policy database cannot be read at all
    /// (repeatable): operator recovery, never an override of a denial.
    #[arg(long = "authz-break-glass-role", requires = "authz_db")]
    pub authz_break_glass_roles: Vec<String>,
    /// Most relation hops one check may walk [default: 8].
    #[arg(long, requires = "authz_db")]
    pub authz_max_depth: Option<usize>,
}

impl AuthzFlags {
    /// The policy database and the authorizer's tuning, if a policy is
    /// configured.
    #[must_use]
    pub fn config(&self) -> Option<(String, AuthzConfig)> {
        let db = self.authz_db.clone()?;
        let mut config = AuthzConfig {
            limits: corium_authz::Limits {
                max_depth: self.authz_max_depth.unwrap_or(8),
                ..corium_authz::Limits::default()
            },
            ..AuthzConfig::default()
        };
        if self.authz_fresh_writes {
            config.fresh_for = [ActionClass::Write, ActionClass::Admin].into_iter().collect();
        }
        if !self.authz_break_glass_roles.is_empty() {
            config.break_glass = Some(BreakGlass {
                roles: self.authz_break_glass_roles.iter().cloned().collect(),
                ..BreakGlass::default()
            });
        }
        Some((db, config))
    }
}

/// The policy database, followed over a corium-peer connection to the
/// fleet's members, connected on first use and again after a failure.
pub(crate) struct FleetPolicySource {
    db: String,
    /// Endpoints are filled in at each attempt from `members`.
    connect: corium_peer::ConnectConfig,
    members: std::sync::OnceLock<corium_fleet_store::registry::Members>,
    connected: tokio::sync::Mutex<Option<Arc<ConnectionPolicySource>>>,
}

impl FleetPolicySource {
    /// Follows `db`, presenting `token` and (over mTLS) this node's
    /// certificate.
    #[must_use]
    pub(crate) fn new(
        db: String,
        token: Option<String>,
        tls: Option<tonic::transport::ClientTlsConfig>,
    ) -> Self {
        let mut connect = corium_peer::ConnectConfig::new("", db.clone());
        connect.token = token;
        connect.tls = tls;
        connect.failover_timeout = CONNECT_TIMEOUT;
        connect.reconnect_max = Duration::from_secs(2);
        Self {
            db,
            connect,
            members: std::sync::OnceLock::new(),
            connected: tokio::sync::Mutex::new(None),
        }
    }

    /// Where to find the policy database's owner: the fleet's members.
    pub(crate) fn follow(&self, members: corium_fleet_store::registry::Members) {
        let _ = self.members.set(members);
    }

    async fn source(&self) -> Result<Arc<ConnectionPolicySource>, SourceError> {
        let mut connected = self.connected.lock().await;
        if let Some(source) = connected.as_ref() {
            return Ok(Arc::clone(source));
        }
        let endpoints: Vec<String> = self
            .members
            .get()
            .map(|members| {
                members
                    .get()
                    .iter()
                    .map(|member| member.endpoint.clone())
                    .collect()
            })
            .unwrap_or_default();
        if endpoints.is_empty() {
            return Err(SourceError::Unavailable(self.db.clone()));
        }
        let mut config = self.connect.clone();
        config.endpoints = endpoints;
        let connection = tokio::time::timeout(CONNECT_TIMEOUT, corium_peer::Connection::connect(config))
            .await
            .map_err(|_| SourceError::Failed {
                db: self.db.clone(),
                reason: "connecting timed out".to_owned(),
            })?
            .map_err(|error| SourceError::Failed {
                db: self.db.clone(),
                reason: error.to_string(),
            })?;
        let source = Arc::new(ConnectionPolicySource::new(Arc::new(connection)));
        *connected = Some(Arc::clone(&source));
        Ok(source)
    }
}

#[tonic::async_trait]
impl PolicySource for FleetPolicySource {
    fn name(&self) -> &str {
        &self.db
    }

    async fn snapshot(&self) -> Result<Db, SourceError> {
        self.source().await?.snapshot().await
    }

    async fn changed(&self, basis_t: u64) {
        let connected = self.connected.lock().await.clone();
        match connected {
            Some(source) => source.changed(basis_t).await,
            None => tokio::time::sleep(DEFAULT_POLL_INTERVAL).await,
        }
    }
}

/// The policy, plus what it cannot decide itself: reading the policy
/// database, which operators and the fleet's nodes always may, and a node
/// following any database (a read replica subscribes to the owner and asks
/// it for its basis by the node's own certificate; the replica then
/// authorizes each client read with this same guard).
pub(crate) struct PolicyReaders {
    /// The policy.
    inner: Arc<dyn Authorizer>,
    /// The policy database.
    db: String,
    /// Who is an operator.
    auth: AuthFlags,
}

impl PolicyReaders {
    /// `inner`, with reads of `db` open to operators and nodes.
    #[must_use]
    pub(crate) fn new(inner: Arc<dyn Authorizer>, db: String, auth: AuthFlags) -> Self {
        Self { inner, db, auth }
    }
}

#[tonic::async_trait]
impl Authorizer for PolicyReaders {
    async fn authorize(&self, principal: &Principal, access: &Access) -> Decision {
        let reads_policy = access.database.as_deref() == Some(self.db.as_str())
            && !access.action.is_write()
            && !access.action.is_admin();
        if reads_policy && self.auth.is_operator(principal) {
            return Decision::Allow;
        }
        let follows =
            matches!(access.action, Action::Subscribe | Action::Inspect) && access.database.is_some();
        if follows && principal.has_role(corium_fleet_common::auth::FLEET_NODE_ROLE) {
            return Decision::Allow;
        }
        self.inner.authorize(principal, access).await
    }
}

/// The authorizer `flags` select: permit-all without `--authz-db`; else
/// the policy, followed from the fleet, with its refresh task running and
/// [`PolicyReaders`] on top. The source is returned so the node can point
/// it at its members once they are known.
#[must_use]
pub(crate) fn authorizer(
    flags: &AuthzFlags,
    auth: &AuthFlags,
    node_token: Option<String>,
    tls: Option<tonic::transport::ClientTlsConfig>,
) -> (Arc<dyn Authorizer>, Option<Arc<FleetPolicySource>>) {
    let Some((db, config)) = flags.config() else {
        return (Arc::new(corium_protocol::authz::AllowAll), None);
    };
    let source = Arc::new(FleetPolicySource::new(db.clone(), node_token, tls));
    let policy = Arc::new(SystemDbAuthorizer::with_config(
        Arc::clone(&source) as Arc<dyn PolicySource>,
        config,
    ));
    // The first load usually fails (this node does not serve yet); the
    // refresh task keeps trying, and every decision is a denial until then.
    tracing::info!(authz_db = %db, "authorizing from a policy database; denying until it loads");
    policy.spawn_refresh();
    let readers = PolicyReaders::new(policy as Arc<dyn Authorizer>, db, auth.clone());
    (Arc::new(readers), Some(source))
}

#[cfg(test)]
mod tests {
    use corium_protocol::authz::Action;

    use super::*;

    struct DenyAll;

    #[tonic::async_trait]
    impl Authorizer for DenyAll {
        async fn authorize(&self, _principal: &Principal, _access: &Access) -> Decision {
            Decision::Deny("no".to_owned())
        }
    }

    #[tokio::test]
    async fn operators_and_nodes_may_read_the_policy_database_and_nothing_else() {
        let readers = PolicyReaders::new(Arc::new(DenyAll), "policy".to_owned(), AuthFlags::default());
        let operator = Principal::new("static-token", "operator")
            .with_role(corium_fleet_common::auth::DEFAULT_OPERATOR_ROLE);
        let node =
            Principal::new("fleet-mtls", "node-1").with_role(corium_fleet_common::auth::FLEET_NODE_ROLE);
        let allowed = |decision: Decision| matches!(decision, Decision::Allow);
        for reader in [&operator, &node] {
            assert!(allowed(
                readers
                    .authorize(reader, &Access::on(Action::Subscribe, "policy"))
                    .await
            ));
            assert!(allowed(
                readers
                    .authorize(reader, &Access::on(Action::Inspect, "policy"))
                    .await
            ));
            // Writing the policy is the policy's call.
            assert!(!allowed(
                readers
                    .authorize(reader, &Access::on(Action::Transact, "policy"))
                    .await
            ));
        }
        // A node follows any database (its read replicas); an operator
        // reads others only as the policy says.
        assert!(allowed(
            readers
                .authorize(&node, &Access::on(Action::Subscribe, "music"))
                .await
        ));
        assert!(!allowed(
            readers
                .authorize(&operator, &Access::on(Action::Subscribe, "music"))
                .await
        ));
        assert!(!allowed(
            readers
                .authorize(&node, &Access::on(Action::Transact, "music"))
                .await
        ));
        assert!(!allowed(
            readers
                .authorize(&Principal::anonymous(), &Access::on(Action::Subscribe, "policy"))
                .await
        ));
    }

    #[test]
    fn flags_select_stock_corium_s_tuning() {
        assert!(AuthzFlags::default().config().is_none());
        let flags = AuthzFlags {
            authz_db: Some("policy".to_owned()),
            authz_fresh_writes: true,
            authz_break_glass_roles: vec!["sre".to_owned()],
            authz_max_depth: Some(3),
        };
        let (db, config) = flags.config().unwrap();
        assert_eq!(db, "policy");
        assert_eq!(config.limits.max_depth, 3);
        assert!(config.fresh_for.contains(&ActionClass::Write));
        assert!(config.break_glass.unwrap().roles.contains("sre"));
    }
}
