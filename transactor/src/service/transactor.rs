//! `corium.v1.Transactor`, dispatched to the owning cell through Corium's
//! own `TransactorSvc`, except `Subscribe`, which the fleet serves itself
//! (see `subscribe.rs`), and a `Transact` carrying `corium-request-id`,
//! which goes through the exactly-once path (`request_id.rs`).

use std::sync::Arc;

use corium_protocol::authz::Guard;
use corium_protocol::pb;
use corium_protocol::pb::transactor_server::Transactor;
use corium_transactor::server::TransactorSvc;
use tonic::{Request, Response, Status};

use corium_fleet_common::metadata;

use super::dispatch;
use crate::host::Host;
use crate::request_id::{Database, Origin, Outcome};

/// Corium's protocol-version rule for requests (its own check is private).
fn check_version(version: u32) -> Result<(), Status> {
    let supported = corium_protocol::MIN_SUPPORTED_PROTOCOL_VERSION..=corium_protocol::PROTOCOL_VERSION;
    if supported.contains(&version) {
        Ok(())
    } else {
        Err(Status::failed_precondition(format!(
            "protocol version {version} is not supported; supported range is {}..={}",
            supported.start(),
            supported.end()
        )))
    }
}

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
        // A malformed id is refused before anything else is looked at.
        let id = metadata::request_id(request.metadata())
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        let origin = if metadata::id_assigned_by_ingress(request.metadata()) {
            Origin::Ingress
        } else {
            Origin::Client
        };
        let db = request.get_ref().db.clone();
        let host = &self.0;
        let cell = host.owner(request.metadata(), &db).await?;
        let Some(permit) = cell.admit() else {
            return Err(host.not_owner(&db, None));
        };
        let request = request.into_inner();
        check_version(request.protocol_version)?;
        // The cell's own commit rather than Corium's service: it cannot be
        // cancelled half-way, and a failure after the append may have landed
        // answers an unknown outcome (`error::commit_status`). Authorization
        // is disabled in cells, so nothing is skipped.
        let commit = |tx_data, basis| cell.commit(permit, tx_data, basis);
        let Some(id) = id else {
            let (committed, permit) = commit(request.tx_data, request.expected_basis_t).await;
            drop(permit);
            host.reset_if_failed(&cell);
            let mut response =
                Response::new(committed.map_err(|error| crate::error::commit_status(&db, None, &error))?);
            super::stamp_lease_version(&mut response, cell.lease_version);
            return Ok(response);
        };
        let on = Database {
            node: &cell.node,
            name: &db,
            store: host.base.as_ref(),
        };
        let answered = cell.ledger.transact(on, id, &request, commit).await;
        host.reset_if_failed(&cell);
        let (response, outcome) =
            answered.map_err(|error| crate::error::ledger_status(&db, &id, origin, error))?;
        let counter = match outcome {
            Outcome::Committed => {
                crate::fault::after_commit(&id);
                &host.metrics.request_id_commits
            }
            Outcome::Replayed => {
                tracing::info!(db, request_id = %id, basis_t = response.basis_t, "duplicate request id; replayed the committed answer");
                &host.metrics.request_id_replays
            }
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut response = Response::new(response);
        super::stamp_lease_version(&mut response, cell.lease_version);
        if outcome == Outcome::Replayed {
            response.metadata_mut().insert(
                metadata::REPLAYED,
                tonic::metadata::MetadataValue::from_static("1"),
            );
        }
        Ok(response)
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
        .map_err(|status| crate::error::write_status(&db, status))
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
        .map_err(|status| crate::error::write_status(&db, status))
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
