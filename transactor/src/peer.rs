//! Calls from one node to another: the fleet admin service of a peer, over
//! the same mTLS the ingress uses (this node's certificate, the fleet CA).
//! Used by handoff and drain to ask the receiving candidate to activate,
//! and by `FleetStatus` to ask every live member for its `NodeStatus`.

use std::time::Duration;

use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::{
    ActivateRequest, ActivateResponse, NodeStatusRequest, NodeStatusResponse, PrepareRequest, PrepareResponse,
};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::config::FleetTls;

/// Why a call to a peer node did not get an answer, or the error it got;
/// the service edge makes its status (`service/status.rs`).
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// This node's TLS material cannot be read now: `UNAVAILABLE`.
    #[error("peer TLS material: {0}")]
    Material(#[source] corium_fleet_common::tls::TlsError),
    /// The registry's endpoint for the peer is not a URI: `INVALID_ARGUMENT`.
    #[error("bad peer endpoint {endpoint:?}: {source}")]
    Endpoint {
        /// The endpoint.
        endpoint: String,
        /// Why it does not parse.
        source: tonic::transport::Error,
    },
    /// A cleartext endpoint for a node whose internal routes are mutual
    /// TLS (it never downgrades): `FAILED_PRECONDITION`.
    #[error("peer endpoint {0} is not https:// but this node's internal routes are mutual TLS")]
    Cleartext(String),
    /// The TLS configuration was refused: `INTERNAL`.
    #[error("peer TLS: {0}")]
    Tls(#[source] tonic::transport::Error),
    /// The peer could not be reached: `UNAVAILABLE`.
    #[error("cannot reach peer {endpoint}: {source}")]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// The connection's error.
        source: tonic::transport::Error,
    },
    /// The peer answered with an error: its status, as it came.
    #[error("{}: {}", .0.code(), .0.message())]
    Answered(Status),
}

/// The credential this node presents to the other nodes: none over mTLS
/// when its own certificate names its node id (the peer then knows it as
/// `fleet-mtls/<node-id>`, a fleet node with budgets of its own); else the
/// static token (`--serve-token` or the development token), which is all a
/// cleartext fleet or a certificate shared by every node can offer.
///
/// # Errors
/// The node's certificate cannot be read.
pub(crate) fn node_token(
    config: &crate::config::Config,
) -> Result<Option<String>, corium_fleet_common::tls::TlsError> {
    let token = config.auth.static_token();
    let Some(tls) = &config.tls else {
        return Ok(token);
    };
    let certificates = corium_fleet_common::tls::certificates(&tls.identity.cert)?;
    let names = certificates
        .first()
        .map(|leaf| corium_fleet_common::tls::names(leaf.as_ref()))
        .unwrap_or_default();
    if names.contains(&config.node_id) {
        return Ok(None);
    }
    if token.is_some() {
        tracing::warn!(
            node = %config.node_id,
            certificate = %tls.identity.cert.display(),
            "this node's certificate does not name its node id; it presents the static token to the other nodes instead"
        );
    }
    Ok(token)
}

/// How this node reaches its peers.
#[derive(Clone)]
pub struct Peers {
    /// `None`: peers speak h2c (`http://` endpoints). The files are read
    /// at each call (calls are rare: handoff and drain), so a rotated
    /// certificate is used at once.
    tls: Option<FleetTls>,
    /// Bound on connecting and on each call.
    timeout: Duration,
    /// The static token this node presents to its peers ([`node_token`]):
    /// `None` over mTLS with a certificate naming this node (the
    /// certificate says who it is) and with `--serve-open`.
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    /// The same token as text, for clients that add the `Bearer` prefix
    /// themselves (a read replica's `corium_peer` connection).
    raw_token: Option<String>,
    /// Over mTLS: a peer's certificate must name its node id.
    verify_node_identity: bool,
}

impl Peers {
    /// Peers reached with this node's own certificate when it serves mTLS,
    /// and with `token` ([`node_token`]) as a bearer credential.
    ///
    /// # Errors
    /// Unreadable TLS material.
    pub fn new(
        tls: Option<&FleetTls>,
        timeout: Duration,
        token: Option<String>,
        verify_node_identity: bool,
    ) -> Result<Self, corium_fleet_common::tls::TlsError> {
        let raw_token = token.clone();
        let token = token.and_then(|token| format!("Bearer {token}").parse().ok());
        // Readable now, so a bad path is a start-up error.
        if let Some(tls) = tls {
            Self::client_tls(tls)?;
        }
        Ok(Self {
            tls: tls.cloned(),
            timeout,
            token,
            raw_token,
            verify_node_identity,
        })
    }

    /// This node's client TLS configuration (its certificate, the fleet CA),
    /// read from the files now.
    ///
    /// # Errors
    /// Unreadable material.
    pub fn client_tls(tls: &FleetTls) -> Result<ClientTlsConfig, corium_fleet_common::tls::TlsError> {
        let read = corium_fleet_common::tls::read;
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(read(&tls.ca)?))
            .identity(Identity::from_pem(
                read(&tls.identity.cert)?,
                read(&tls.identity.key)?,
            )))
    }

    /// This node's client TLS for reaching node `node_id` (`None`: h2c),
    /// read from the files now; with `--verify-node-identity`, the peer's
    /// certificate must name `node_id`, not merely the address the registry
    /// gave for it.
    ///
    /// # Errors
    /// [`PeerError::Material`] for unreadable material.
    pub fn tls_for(&self, node_id: &str) -> Result<Option<ClientTlsConfig>, PeerError> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        let config = Self::client_tls(tls).map_err(PeerError::Material)?;
        Ok(Some(if self.verify_node_identity {
            config.domain_name(node_id)
        } else {
            config
        }))
    }

    /// The bearer token this node presents to its peers (`None` with
    /// `--serve-open`).
    #[must_use]
    pub fn token(&self) -> Option<&str> {
        self.raw_token.as_deref()
    }

    /// A channel to node `node_id` at `endpoint`, connected now.
    ///
    /// # Errors
    /// [`PeerError`] (a cleartext endpoint on an mTLS node among them) when
    /// the node cannot be reached as `node_id`.
    pub async fn channel(
        &self,
        endpoint: &str,
        node_id: &str,
    ) -> Result<tonic::transport::Channel, PeerError> {
        let mut target = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|source| PeerError::Endpoint {
                endpoint: endpoint.to_owned(),
                source,
            })?
            .connect_timeout(self.timeout)
            .timeout(self.timeout);
        // Never downgrade: a node that speaks mTLS does not dial a member in
        // cleartext (it would send requests unauthenticated and unencrypted,
        // to whoever answers).
        if self.tls.is_some() && !endpoint.starts_with("https://") {
            return Err(PeerError::Cleartext(endpoint.to_owned()));
        }
        if let Some(config) = self.tls_for(node_id)? {
            target = target.tls_config(config).map_err(PeerError::Tls)?;
        }
        target.connect().await.map_err(|source| PeerError::Unreachable {
            endpoint: endpoint.to_owned(),
            source,
        })
    }

    async fn admin(
        &self,
        endpoint: &str,
        node_id: &str,
    ) -> Result<FleetAdminClient<tonic::transport::Channel>, PeerError> {
        Ok(FleetAdminClient::new(self.channel(endpoint, node_id).await?))
    }

    /// Connects to node `node_id` at `endpoint` (with mTLS: verifying its
    /// certificate names `node_id`). A handoff connects to its target before
    /// it lets go of the lease, then asks over the same connection.
    ///
    /// # Errors
    /// [`PeerError`] (a cleartext endpoint on an mTLS node among them) when
    /// the node cannot be reached as `node_id`.
    pub async fn connect(&self, endpoint: &str, node_id: &str) -> Result<Peer, PeerError> {
        Ok(Peer {
            client: self.admin(endpoint, node_id).await?,
            timeout: self.timeout,
            token: self.token.clone(),
        })
    }

    /// Asks node `node_id` at `endpoint` to activate `database` now.
    ///
    /// # Errors
    /// The peer's status ([`PeerError::Answered`]), or why it cannot be
    /// reached.
    pub async fn activate(
        &self,
        endpoint: &str,
        node_id: &str,
        database: &str,
    ) -> Result<ActivateResponse, PeerError> {
        self.connect(endpoint, node_id)
            .await?
            .activate(database)
            .await
            .map_err(PeerError::Answered)
    }
}

/// A connection to one peer node.
pub struct Peer {
    client: FleetAdminClient<tonic::transport::Channel>,
    timeout: Duration,
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Peer {
    /// `message` as a call to the peer: within the peer timeout, with this
    /// node's credential.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.timeout);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        request
    }

    /// Asks the peer to activate `database` now.
    ///
    /// # Errors
    /// The peer's status.
    pub async fn activate(&self, database: &str) -> Result<ActivateResponse, Status> {
        let request = self.request(ActivateRequest {
            database: database.to_owned(),
        });
        self.client
            .clone()
            .activate(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Asks the peer to read `database`'s log ahead of an activation.
    ///
    /// # Errors
    /// The peer's status.
    pub async fn prepare(&self, database: &str) -> Result<PrepareResponse, Status> {
        let request = self.request(PrepareRequest {
            database: database.to_owned(),
        });
        self.client
            .clone()
            .prepare(request)
            .await
            .map(tonic::Response::into_inner)
    }

    /// Asks the peer for its own status.
    ///
    /// # Errors
    /// The peer's status.
    pub async fn node_status(&self) -> Result<NodeStatusResponse, Status> {
        let request = self.request(NodeStatusRequest {});
        self.client
            .clone()
            .node_status(request)
            .await
            .map(tonic::Response::into_inner)
    }
}
