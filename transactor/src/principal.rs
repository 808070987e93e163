//! Who is calling, decided once per request before any service runs, and
//! stored in the request's extensions as Corium's `Principal` (where
//! Corium's own services and the fleet's read it back with
//! `corium_protocol::authz::principal`):
//!
//! - from an ingress (its mTLS certificate names one of the
//!   `--ingress-identity` names): the principal in `corium-principal`, which
//!   the ingress authenticated;
//! - from anyone else carrying `corium-principal`: refused
//!   `PERMISSION_DENIED`, nothing runs;
//! - from another node of the fleet (a certificate naming the node id of a
//!   current member, no bearer token): that node, with the
//!   [`FLEET_NODE_ROLE`]; any other fleet certificate is no one in
//!   particular, and authenticates like any caller;
//! - otherwise: the caller's bearer token, checked with the same flags and
//!   Corium providers a stock transactor uses.
//!
//! Only the request *headers* are read, here, before the handler: a
//! `corium-principal` sent in trailers (which tonic merges into the metadata
//! after interceptors) is never consulted by anything.

use std::collections::HashMap;
use std::sync::Arc;

use corium_fleet_common::auth::{self, EnvelopeError, FLEET_NODE_ROLE};
use corium_fleet_wire::metadata;
use corium_protocol::authz::{AuthError, Credentials, Guard, Principal};
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// Why a caller could not be identified; the service edge makes its
/// status (`service/status.rs`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unidentified {
    /// A principal envelope from someone other than an ingress:
    /// `PERMISSION_DENIED`.
    #[error("{} is accepted only from an ingress over mTLS", metadata::PRINCIPAL)]
    NotFromIngress,
    /// The envelope is not text: `UNAUTHENTICATED`.
    #[error("{} is not text", metadata::PRINCIPAL)]
    NotText,
    /// The envelope does not decode: `UNAUTHENTICATED`.
    #[error(transparent)]
    Envelope(#[from] EnvelopeError),
    /// The guard refused the caller's credentials: its own status.
    #[error(transparent)]
    Denied(#[from] AuthError),
}

/// The provider name of a principal vouched for by a fleet certificate.
pub(crate) const FLEET_MTLS_PROVIDER: &str = "fleet-mtls";

/// The interceptor in front of every service of a node.
#[derive(Clone)]
pub(crate) struct Identify {
    /// Authenticates direct callers' bearer tokens.
    guard: Guard,
    /// Certificate names that mark an ingress.
    ingress_identities: Arc<Vec<String>>,
    /// Counts refusals.
    metrics: Arc<crate::metrics::Metrics>,
    /// The fleet's members: a certificate is a node's only if it names one
    /// of their node ids.
    members: corium_fleet_store::registry::Members,
    /// The names of the certificates callers presented, by certificate:
    /// every call on a connection presents the same one, so it is parsed
    /// once, not on every call (at most [`NAMES_CACHED`] kept).
    names: Arc<std::sync::Mutex<NamesByCertificate>>,
}

/// A certificate's DER bytes → the names it carries.
type NamesByCertificate = HashMap<Vec<u8>, Arc<Vec<String>>>;

/// Certificates whose names are kept (the fleet's nodes and ingresses, and
/// direct callers); when full, the cache starts again empty.
const NAMES_CACHED: usize = 256;

impl Identify {
    /// Authenticates with `guard`; trusts `corium-principal` only from peers
    /// whose certificate names one of `ingress_identities`.
    #[must_use]
    pub(crate) fn new(
        guard: Guard,
        ingress_identities: Vec<String>,
        metrics: Arc<crate::metrics::Metrics>,
        members: corium_fleet_store::registry::Members,
    ) -> Self {
        Self {
            guard,
            ingress_identities: Arc::new(ingress_identities),
            metrics,
            members,
            names: Arc::default(),
        }
    }

    /// The names on the caller's verified leaf certificate (empty without
    /// mTLS).
    fn peer_names<T>(&self, request: &Request<T>) -> Arc<Vec<String>> {
        let Some(certs) = request.peer_certs() else {
            return Arc::default();
        };
        let Some(leaf) = certs.first() else {
            return Arc::default();
        };
        let leaf: &[u8] = leaf.as_ref();
        let lock = || {
            self.names
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(names) = lock().get(leaf) {
            return Arc::clone(names);
        }
        let names = Arc::new(corium_fleet_common::tls::names(leaf));
        let mut cache = lock();
        if cache.len() >= NAMES_CACHED {
            cache.clear();
        }
        cache.insert(leaf.to_vec(), Arc::clone(&names));
        names
    }

    fn identify(&self, request: &Request<()>) -> Result<Principal, Unidentified> {
        let names = self.peer_names(request);
        let from_ingress = names.iter().any(|name| self.ingress_identities.contains(name));
        if let Some(value) = request.metadata().get(metadata::PRINCIPAL) {
            if !from_ingress {
                return Err(Unidentified::NotFromIngress);
            }
            let text = value.to_str().map_err(|_| Unidentified::NotText)?;
            return Ok(auth::decode(text)?);
        }
        let credentials = Credentials::from_metadata(request.metadata());
        if credentials.is_empty() && !from_ingress {
            // Every certificate the node's listener accepts chains to the
            // fleet CA; it speaks for a node only if it names a member's id.
            let members = self.members.get();
            if let Some(node) = names
                .iter()
                .find(|name| members.iter().any(|member| &member.node_id == *name))
            {
                return Ok(Principal::new(FLEET_MTLS_PROVIDER, node.clone()).with_role(FLEET_NODE_ROLE));
            }
        }
        Ok(self.guard.authenticate(&credentials)?)
    }
}

impl Interceptor for Identify {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        let principal = self.identify(&request).map_err(|error| {
            self.metrics
                .unauthenticated
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Status::from(error)
        })?;
        request.extensions_mut().insert(principal);
        Ok(request)
    }
}
