//! Calls the fleet hands to Corium's own services on the cell that owns
//! their database, after the front door (`admit.rs`): [`forward`] for a
//! handler of the fleet's, [`forward_to_corium`] for Corium's service
//! itself, and [`forwarded_to_corium!`](forwarded_to_corium) for the methods
//! that are nothing but that, one line each.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use corium_protocol::authz::Guard;
use corium_transactor::node::TransactorNode;
use tonic::{Request, Response, Status};

use super::admit::{Door, admit_owner, stamp_lease_version};
use super::node::Node;

/// Runs an owner-dependent call through Corium's own service on the cell
/// that owns its database, after the front door; the answer names the lease
/// version that served it. The one path every call handed to Corium takes.
///
/// # Errors
/// The front door's refusal as its status, or the handler's.
pub(crate) async fn forward<Req, Resp, Fut>(
    node: &Node,
    request: Request<Req>,
    door: Door<'_>,
    handler: impl FnOnce(Arc<TransactorNode>, Request<Req>) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let at = admit_owner(node, &request, &door).await?;
    let answered = handler(Arc::clone(&at.cell.node), request).await;
    drop(at.permit);
    let mut response = answered.map_err(|status| {
        if door.writes {
            super::status::write_status(door.db, status)
        } else {
            status
        }
    })?;
    stamp_lease_version(&mut response, at.cell.lease_version);
    Ok(response)
}

/// [`forward`] to Corium's own service, whose answer is the call's: `service`
/// is that service's constructor (`CatalogSvc`, `TransactorSvc`), built for
/// the owning cell with the node's guard (the caller's principal is in the
/// request's extensions), and `method` calls it.
///
/// # Errors
/// The front door's refusal as its status, or the service's.
pub(crate) async fn forward_to_corium<Svc, Req, Resp, Fut>(
    node: &Node,
    request: Request<Req>,
    door: Door<'_>,
    service: fn(Arc<TransactorNode>, Guard) -> Svc,
    method: impl FnOnce(Svc, Request<Req>) -> Fut,
) -> Result<Response<Resp>, Status>
where
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    let guard = node.guard.clone();
    forward(node, request, door, |cell, request| {
        method(service(cell, guard), request)
    })
    .await
}

/// A forwarded method's answer as `#[tonic::async_trait]` spells it: a boxed
/// `Send` future that may borrow the service.
pub(crate) type Answer<'a, Resp> = Pin<Box<dyn Future<Output = Result<Response<Resp>, Status>> + Send + 'a>>;

/// Methods answered by Corium's own `$service` on the owning cell, one line
/// each: `method(Request -> Response) for Action` (`, writes` for a write,
/// see [`Door::writes`]); the request's `db` names the database.
///
/// Used inside a `#[tonic::async_trait]` impl, which leaves macro items as
/// they are, so each method is written as `async_trait` writes an `async fn`:
/// a function of the borrowed service returning an [`Answer`].
macro_rules! forwarded_to_corium {
    ($service:ident: $($method:ident($req:ident -> $resp:ident) for $action:ident $(, $writes:ident)?;)*) => {$(
        fn $method<'life0, 'async_trait>(
            &'life0 self,
            request: ::tonic::Request<::corium_protocol::pb::$req>,
        ) -> $crate::service::forward::Answer<'async_trait, ::corium_protocol::pb::$resp>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            Box::pin(async move {
                let db = request.get_ref().db.clone();
                let door = $crate::service::admit::Door::on(::corium_protocol::authz::Action::$action, &db)$(.$writes())?;
                $crate::service::forward::forward_to_corium(&self.0, request, door, $service, |svc, request| async move {
                    svc.$method(request).await
                })
                .await
            })
        }
    )*};
}
pub(crate) use forwarded_to_corium;
