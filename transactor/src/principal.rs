//! Who may speak for a caller: `corium-principal` is accepted only from a
//! peer whose mTLS certificate names an ingress. From anyone else — a
//! client on a plaintext port, another transactor, a forged header — the
//! call is refused and nothing runs.

use std::sync::Arc;

use corium_fleet_wire::metadata;
use tonic::service::Interceptor;
use tonic::{Request, Status};

/// The interceptor in front of every service.
#[derive(Clone)]
pub struct Guard {
    /// Certificate names that mark an ingress.
    ingress_identities: Arc<Vec<String>>,
}

impl Guard {
    /// Accepts `corium-principal` only from peers whose certificate names
    /// one of `ingress_identities`.
    #[must_use]
    pub fn new(ingress_identities: Vec<String>) -> Self {
        Self {
            ingress_identities: Arc::new(ingress_identities),
        }
    }

    fn peer_is_ingress<T>(&self, request: &Request<T>) -> bool {
        request.peer_certs().is_some_and(|certs| {
            certs
                .first()
                .is_some_and(|leaf| corium_fleet_common::tls::names_any(leaf, &self.ingress_identities))
        })
    }
}

impl Interceptor for Guard {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        if request.metadata().contains_key(metadata::PRINCIPAL) && !self.peer_is_ingress(&request) {
            return Err(Status::permission_denied(format!(
                "{} is accepted only from an ingress over mTLS",
                metadata::PRINCIPAL
            )));
        }
        Ok(request)
    }
}
