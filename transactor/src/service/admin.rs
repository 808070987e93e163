//! `corium.fleet.v1.FleetAdmin`: what this node owns, stands by for and
//! holds cold, one database's placement and lease holder, and handoff
//! (the sending end, `Handoff`, and the receiving end, `Activate`).

use std::sync::Arc;

use corium_fleet_proto::fleet::fleet_admin_server::FleetAdmin;
use corium_fleet_proto::fleet::{
    ActivateRequest, ActivateResponse, DatabasePlacementRequest, DatabasePlacementResponse, DatabaseView,
    HandoffRequest, HandoffResponse, NodeStatusRequest, NodeStatusResponse,
};
use tonic::{Request, Response, Status};

use crate::host::{Host, node_of, now_unix_ms};
use crate::service::catalog::catalog;
use crate::standby::{Standing, standing};

/// The fleet admin service.
pub struct FleetAdminSvc(pub Arc<Host>);

/// One database's view from this node, read from storage; a database not in
/// the catalog is `absent`, with the candidates it would be placed on.
///
/// # Errors
/// `UNAVAILABLE` when storage cannot be read.
pub async fn database_view(host: &Host, db: &str) -> Result<(Standing, DatabaseView), Status> {
    corium_fleet_common::names::check(db).map_err(|error| Status::invalid_argument(error.to_string()))?;
    let view = host.read_root(db).await?;
    if !view.exists {
        // Not (or no longer) in the catalog: say where it would be placed.
        return Ok((
            Standing::Elsewhere,
            DatabaseView {
                database: db.to_owned(),
                state: "absent".to_owned(),
                candidates: host.candidate_list(db),
                ..DatabaseView::default()
            },
        ));
    }
    let standing = standing(host, db, &view, now_unix_ms());
    let basis_t = match host.cell(db) {
        Some(cell) => cell
            .node
            .db_state(db)
            .await
            .map_or(0, |state| state.db().basis_t()),
        None => 0,
    };
    let root = view.root.as_ref();
    let candidates = host.candidate_list(db);
    Ok((
        standing,
        DatabaseView {
            database: db.to_owned(),
            state: standing.as_str().to_owned(),
            owner_id: root
                .map(|root| node_of(&root.owner).to_owned())
                .unwrap_or_default(),
            lease_version: root.map_or(0, |root| root.lease_version),
            lease_expires_unix_ms: root.map_or(0, |root| root.lease_expires_unix_ms),
            owner_endpoint: root.map(|root| root.owner_endpoint.clone()).unwrap_or_default(),
            basis_t,
            candidates,
        },
    ))
}

#[tonic::async_trait]
impl FleetAdmin for FleetAdminSvc {
    async fn node_status(
        &self,
        request: Request<NodeStatusRequest>,
    ) -> Result<Response<NodeStatusResponse>, Status> {
        let host = &self.0;
        super::authorize::operator(host, &request, "NodeStatus")?;
        let mut response = NodeStatusResponse {
            node_id: host.config.node_id.clone(),
            zone: host.config.zone.clone(),
            weight: host.config.weight,
            incarnation: host.incarnation.clone(),
            internal_endpoint: host.config.advertise.clone(),
            storage: host.config.storage.describe(),
            lease_ttl_ms: i64::try_from(host.config.lease_ttl.as_millis()).unwrap_or(i64::MAX),
            ..NodeStatusResponse::default()
        };
        for db in catalog(host).await? {
            if host.cell(&db).is_none() && host.rank(&db).is_none() {
                // Not a candidate: its roots are not this node's to read.
                continue;
            }
            let (standing, view) = match database_view(host, &db).await {
                Ok(found) => found,
                // Deleted between the listing and the read.
                Err(status) => return Err(status),
            };
            match standing {
                Standing::Owned => response.owned += 1,
                Standing::Standby => response.standby += 1,
                Standing::Cold => response.cold += 1,
                Standing::Elsewhere => continue,
            }
            response.databases.push(view);
        }
        Ok(Response::new(response))
    }

    async fn database_placement(
        &self,
        request: Request<DatabasePlacementRequest>,
    ) -> Result<Response<DatabasePlacementResponse>, Status> {
        super::authorize::operator(&self.0, &request, "DatabasePlacement")?;
        let db = request.into_inner().database;
        let (_, view) = database_view(&self.0, &db).await?;
        Ok(Response::new(DatabasePlacementResponse { view: Some(view) }))
    }

    async fn handoff(&self, request: Request<HandoffRequest>) -> Result<Response<HandoffResponse>, Status> {
        super::authorize::operator(&self.0, &request, "Handoff")?;
        let HandoffRequest {
            database,
            target_node_id,
        } = request.into_inner();
        if database.is_empty() || target_node_id.is_empty() {
            return Err(Status::invalid_argument(
                "handoff needs a database and a target node id",
            ));
        }
        corium_fleet_common::names::check(&database)
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        self.0
            .handoff(&database, &target_node_id)
            .await
            .map(Response::new)
    }

    async fn activate(
        &self,
        request: Request<ActivateRequest>,
    ) -> Result<Response<ActivateResponse>, Status> {
        let host = &self.0;
        super::authorize::operator(host, &request, "Activate")?;
        let db = request.into_inner().database;
        corium_fleet_common::names::check(&db)
            .map_err(|error| Status::invalid_argument(error.to_string()))?;
        if host.rank(&db).is_none() {
            return Err(Status::failed_precondition(format!(
                "node {} is not a candidate for {db:?}",
                host.config.node_id
            )));
        }
        let started = std::time::Instant::now();
        let cell = if let Some(cell) = host.cell(&db) {
            cell
        } else {
            let view = host.read_root(&db).await?;
            if !view.exists {
                return Err(Status::not_found(format!("unknown database {db:?}")));
            }
            if let Some(owner) = view.live_owner(now_unix_ms())
                && !host.template.is_own(&owner.owner)
            {
                return Err(host.not_owner(&db, Some(owner)).into());
            }
            host.activate(&db, false).await?
        };
        Ok(Response::new(ActivateResponse {
            database: db,
            lease_version: cell.lease_version,
            activation_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }))
    }
}
