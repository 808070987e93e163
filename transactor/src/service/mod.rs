//! The node's gRPC services: Corium's `corium.v1` `Transactor` and `Catalog`
//! dispatched per database to its cell, and the fleet's own admin service.

pub mod admin;
pub mod catalog;
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
    call: impl FnOnce(Arc<TransactorNode>, Request<Req>) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let cell = host.owner(request.metadata(), db).await?;
    let Some(_permit) = cell.admit() else {
        // Draining or deposed between the decision and admission.
        return Err(host.not_owner(db, None));
    };
    call(Arc::clone(&cell.node), request).await
}
