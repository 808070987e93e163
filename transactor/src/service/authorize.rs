//! Authorization on the fleet's own paths, with the node's Corium `Guard`
//! (the same one Corium's services in the cells carry) and the principal
//! the `Identify` interceptor attached to the request.
//!
//! Where the fleet serves a call itself — `Transact` (and its request-id
//! replays), `Subscribe`, create, delete, fork, list, storage info, request
//! status — it authorizes here, before anything is read, activated or
//! written. Where it hands the call to Corium's `TransactorSvc` or
//! `CatalogSvc`, Corium authorizes the same principal with the same guard.

use corium_protocol::authz::{self, Access};
use tonic::{Request, Status};

use crate::host::Host;

/// Authorizes `access` for the caller of `request`, by Corium's rule: an
/// allow, or a grant without a view filter. A grant that filters what the
/// caller may see cannot be honoured on these paths, so it is refused
/// rather than answered in full (as Corium's own services do).
///
/// # Errors
/// `PERMISSION_DENIED` when the authorizer denies; `UNIMPLEMENTED` for a
/// filtered grant.
pub async fn access<T>(host: &Host, request: &Request<T>, access: Access) -> Result<(), Status> {
    let principal = authz::principal(request);
    match host.guard.authorize(&principal, &access).await {
        Ok(None) => Ok(()),
        Ok(Some(grant)) if grant.view.is_none() => Ok(()),
        Ok(Some(_)) => Err(Status::unimplemented(
            "view filtering is not enforced on this surface yet",
        )),
        Err(error) => {
            host.metrics
                .denied
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(principal = %principal.subject, provider = %principal.provider, ?access, "access denied");
            Err(error.to_status())
        }
    }
}

/// Admits only an operator: a principal holding `--operator-role`, or
/// another node of the fleet by its certificate.
///
/// # Errors
/// `PERMISSION_DENIED` for anyone else (anonymous callers included).
pub fn operator<T>(host: &Host, request: &Request<T>, what: &str) -> Result<(), Status> {
    let principal = authz::principal(request);
    if host.config.auth.is_operator(&principal) {
        return Ok(());
    }
    host.metrics
        .denied
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(principal = %principal.subject, provider = %principal.provider, what, "operator call denied");
    Err(Status::permission_denied(format!(
        "{what} needs an operator: a principal with role {:?}",
        host.config.auth.operator_role()
    )))
}
