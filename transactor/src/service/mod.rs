//! The node's gRPC services: Corium's `corium.v1` `Transactor` and `Catalog`
//! dispatched per database to its cell, the fleet's own admin service, and
//! `Requests` ("did my request commit?"), Corium's `PeerServer` (reads from
//! read replicas, [`peer_server`]); [`authorize`] decides who may.

pub mod admin;
pub mod authorize;
pub mod catalog;
pub mod peer_server;
pub mod requests;
pub mod subscribe;
pub mod transactor;

use std::future::Future;
use std::sync::Arc;

use corium_transactor::node::TransactorNode;
use tonic::{Request, Response, Status};

use crate::host::Host;

/// Runs an owner-dependent call on the cell that owns `db`, after the
/// ownership decision, holding the cell's admission permit for the call so a
/// drain waits for it.
pub(crate) async fn dispatch<Req, Resp, Fut>(
    host: &Arc<Host>,
    request: Request<Req>,
    db: &str,
    handler: impl FnOnce(Arc<TransactorNode>, Request<Req>) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let cell = host.owner(request.metadata(), db).await?;
    let _work = enter(host, &request, db).await?;
    let Some(_permit) = cell.admit() else {
        // Draining or deposed between the decision and admission.
        return Err(host.not_owner(db, None).into());
    };
    let mut response = handler(Arc::clone(&cell.node), request).await?;
    stamp_lease_version(&mut response, cell.lease_version);
    Ok(response)
}

/// A place for a client call on `db` under the node's work limits
/// (`work_limits.rs`), taken after the ownership decision (a `NotOwner`
/// costs no place) and before any work.
///
/// # Errors
/// `RESOURCE_EXHAUSTED` with a retry hint when a limit refuses the call.
pub(crate) async fn enter<T>(
    host: &Host,
    request: &Request<T>,
    db: &str,
) -> Result<crate::work_limits::WorkPermit, Status> {
    // The principal is read (and its key built) only when a rate counts
    // against it: every call passes here.
    let key = if host.work.rates_principals() {
        let principal = corium_protocol::authz::principal(request);
        format!("{}:{}", principal.provider, principal.subject)
    } else {
        String::new()
    };
    let admitted = host.work.enter(&key, db, None).await.map_err(|(shed, status)| {
        tracing::debug!(db, principal = %key, reason = shed.label(), "call shed");
        status
    })?;
    tracing::debug!(db, principal = %key, "call admitted");
    Ok(admitted)
}

/// Names the lease version that answered, so a caller (and the fault
/// suite's checker) can tell which writer acknowledged: versions of
/// acknowledgements in `t` order never go down.
pub(crate) fn stamp_lease_version<T>(response: &mut Response<T>, lease_version: u64) {
    response.metadata_mut().insert(
        corium_fleet_wire::metadata::LEASE_VERSION,
        tonic::metadata::MetadataValue::from(lease_version),
    );
}
