//! Calls from one node to another: the fleet admin service of a peer, over
//! the same mTLS the ingress uses (this node's certificate, the fleet CA).
//! Used by handoff and drain to ask the receiving candidate to activate.

use std::time::Duration;

use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::{ActivateRequest, ActivateResponse};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Status};

use crate::config::Tls;

/// How this node reaches its peers.
#[derive(Clone)]
pub struct Peers {
    /// `None`: peers speak h2c (`http://` endpoints).
    tls: Option<ClientTlsConfig>,
    /// Bound on connecting and on each call.
    timeout: Duration,
    /// The static token presented on a cleartext internal network, where no
    /// certificate says who this node is (`None` over mTLS, or with
    /// `--serve-open`).
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
}

impl Peers {
    /// Peers reached with this node's own certificate when it serves mTLS;
    /// otherwise with `token` (the static token of `--serve-token`, or the
    /// development token) as a bearer credential.
    ///
    /// # Errors
    /// Unreadable TLS material.
    pub fn new(
        tls: Option<&Tls>,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Self, corium_fleet_common::tls::TlsError> {
        let token = match tls {
            Some(_) => None,
            None => token.and_then(|token| format!("Bearer {token}").parse().ok()),
        };
        let tls = match tls {
            Some(tls) => {
                let read = corium_fleet_common::tls::read;
                Some(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(read(&tls.client_ca)?))
                        .identity(Identity::from_pem(read(&tls.cert)?, read(&tls.key)?)),
                )
            }
            None => None,
        };
        Ok(Self { tls, timeout, token })
    }

    async fn admin(&self, endpoint: &str) -> Result<FleetAdminClient<tonic::transport::Channel>, Status> {
        let mut target = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|error| Status::invalid_argument(format!("bad peer endpoint {endpoint:?}: {error}")))?
            .connect_timeout(self.timeout)
            .timeout(self.timeout);
        if let Some(tls) = &self.tls {
            // Never downgrade: a node that speaks mTLS does not dial a
            // member in cleartext (it would send requests unauthenticated
            // and unencrypted, to whoever answers).
            if !endpoint.starts_with("https://") {
                return Err(Status::failed_precondition(format!(
                    "peer endpoint {endpoint} is not https:// but this node's internal routes are mutual TLS"
                )));
            }
            target = target
                .tls_config(tls.clone())
                .map_err(|error| Status::internal(format!("peer TLS: {error}")))?;
        }
        let channel = target
            .connect()
            .await
            .map_err(|error| Status::unavailable(format!("cannot reach peer {endpoint}: {error}")))?;
        Ok(FleetAdminClient::new(channel))
    }

    /// Asks the node at `endpoint` to activate `database` now.
    ///
    /// # Errors
    /// The peer's status, or `UNAVAILABLE` when it cannot be reached.
    pub async fn activate(&self, endpoint: &str, database: &str) -> Result<ActivateResponse, Status> {
        let mut client = self.admin(endpoint).await?;
        let mut request = Request::new(ActivateRequest {
            database: database.to_owned(),
        });
        request.set_timeout(self.timeout);
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        client.activate(request).await.map(tonic::Response::into_inner)
    }
}
