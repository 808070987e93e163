//! `corium.v1.Transactor`, dispatched to the owning cell through Corium's
//! own `TransactorSvc`, except `Subscribe`, which the fleet serves itself
//! (see `subscribe.rs`).

use std::sync::Arc;

use corium_protocol::authz::Guard;
use corium_protocol::pb;
use corium_protocol::pb::transactor_server::Transactor;
use corium_transactor::server::TransactorSvc;
use tonic::{Request, Response, Status};

use super::dispatch;
use crate::host::Host;

/// The fleet's `Transactor` service.
pub struct FleetTransactor(pub Arc<Host>);

fn svc(node: Arc<corium_transactor::node::TransactorNode>) -> TransactorSvc {
    TransactorSvc(node, Guard::disabled())
}

#[tonic::async_trait]
impl Transactor for FleetTransactor {
    async fn transact(
        &self,
        request: Request<pb::TransactRequest>,
    ) -> Result<Response<pb::TransactResponse>, Status> {
        let db = request.get_ref().db.clone();
        dispatch(&self.0, request, &db, |node, request| async move {
            svc(node).transact(request).await
        })
        .await
    }

    async fn saga_commit(
        &self,
        request: Request<pb::SagaCommitRequest>,
    ) -> Result<Response<pb::SagaCommitResponse>, Status> {
        let db = request.get_ref().db.clone();
        dispatch(&self.0, request, &db, |node, request| async move {
            svc(node).saga_commit(request).await
        })
        .await
    }

    async fn saga_finish(
        &self,
        request: Request<pb::SagaFinishRequest>,
    ) -> Result<Response<pb::SagaFinishResponse>, Status> {
        let db = request.get_ref().db.clone();
        dispatch(&self.0, request, &db, |node, request| async move {
            svc(node).saga_finish(request).await
        })
        .await
    }

    type SubscribeStream = super::subscribe::ItemStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let db = request.get_ref().db.clone();
        let cell = self.0.owner(request.metadata(), &db).await?;
        let request = request.into_inner();
        let supported = corium_protocol::MIN_SUPPORTED_PROTOCOL_VERSION..=corium_protocol::PROTOCOL_VERSION;
        if !supported.contains(&request.protocol_version) {
            return Err(Status::failed_precondition(format!(
                "protocol version {} is not supported; supported range is {}..={}",
                request.protocol_version,
                supported.start(),
                supported.end()
            )));
        }
        let heartbeat_ms = u64::try_from(cell.node.config().heartbeat_interval.as_millis()).unwrap_or(0);
        super::subscribe::stream(&cell, request.from_basis_t, heartbeat_ms)
            .await
            .map(Response::new)
    }

    async fn sync(&self, request: Request<pb::SyncRequest>) -> Result<Response<pb::SyncResponse>, Status> {
        let db = request.get_ref().db.clone();
        dispatch(&self.0, request, &db, |node, request| async move {
            svc(node).sync(request).await
        })
        .await
    }

    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let db = request.get_ref().db.clone();
        dispatch(&self.0, request, &db, |node, request| async move {
            svc(node).status(request).await
        })
        .await
    }
}
