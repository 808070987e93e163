//! `corium.fleet.v1.Requests`: "did my request commit?", answered by the
//! database's lease holder from the request-id ledger (`request_id`).

use std::sync::Arc;

use corium_fleet_proto::fleet::request_status_response::State;
use corium_fleet_proto::fleet::requests_server::Requests;
use corium_fleet_proto::fleet::{RequestStatusRequest, RequestStatusResponse};
use prost::Message as _;
use tonic::{Request, Response, Status};

use super::admit::{Door, admit_owner, stamp_lease_version};
use super::node::Node;
use super::status;
use crate::request_id::{self, Database, LedgerError};

/// The fleet's `Requests` service.
pub(crate) struct FleetRequests(pub Arc<Node>);

#[tonic::async_trait]
impl Requests for FleetRequests {
    async fn status(
        &self,
        request: Request<RequestStatusRequest>,
    ) -> Result<Response<RequestStatusResponse>, Status> {
        let node = &self.0;
        let host = &node.host;
        let db = request.get_ref().database.clone();
        let id = uuid::Uuid::parse_str(request.get_ref().request_id.trim()).map_err(|_| {
            Status::invalid_argument(format!(
                "request_id {:?} is not a UUID",
                request.get_ref().request_id
            ))
        })?;
        // A status query may fence the id (a write) and returns the
        // committed answer: the caller must be allowed to transact, and the
        // query is admitted like the write it may be (a work place, the
        // principal's rate).
        let mut at = admit_owner(
            node,
            &request,
            &Door::on(corium_protocol::authz::Action::Transact, &db),
        )
        .await?;
        let permit = at.permit.take().ok_or_else(|| host.not_owner(&db, None))?;
        let cell = Arc::clone(&at.cell);
        let on = Database {
            node: &cell.node,
            name: &db,
            store: host.base.as_ref(),
            read_ahead: &cell.read_ahead,
            retention: host.config.request_id_retention,
        };
        let commit = |tx_data, basis| cell.commit(permit, &cell.db, tx_data, basis);
        let sender = at.call.sender(node);
        let answered = cell.ledger.status(on, id, sender, commit).await;
        host.reset_if_failed(&cell);
        let response = match answered {
            Ok(request_id::RequestStatus::Committed(answer)) => RequestStatusResponse {
                state: State::Committed.into(),
                basis_t: answer.basis_t,
                transact_response: answer.encode_to_vec(),
            },
            Ok(request_id::RequestStatus::NotCommitted { fenced_at }) => {
                tracing::info!(db, request_id = %id, fenced_at, "request id fenced by a status query");
                RequestStatusResponse {
                    state: State::NotCommitted.into(),
                    basis_t: fenced_at,
                    transact_response: Vec::new(),
                }
            }
            // Asking again is always safe: a plain "retry later".
            Err(LedgerError::Unknown { reason, .. }) => {
                return Err(Status::unavailable(format!(
                    "cannot tell yet whether request {id} committed ({reason}); ask again"
                )));
            }
            Err(error) => {
                return Err(status::ledger_status(&db, &id, request_id::Origin::Client, error));
            }
        };
        let mut response = Response::new(response);
        stamp_lease_version(&mut response, cell.lease_version);
        Ok(response)
    }
}
