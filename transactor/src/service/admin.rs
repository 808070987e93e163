//! `corium.fleet.v1.FleetAdmin`: what this node owns, stands by for and
//! holds cold, the whole fleet (the node registry, and every live member's
//! own status, asked node to node), one database's placement and lease
//! holder, and handoff (the sending end, `Handoff`, and the receiving end,
//! `Activate`).

use std::sync::Arc;

use corium_fleet_proto::fleet::fleet_admin_server::FleetAdmin;
use corium_fleet_proto::fleet::{
    ActivateRequest, ActivateResponse, DatabasePlacementRequest, DatabasePlacementResponse, DatabaseView,
    FleetMember, FleetStatusRequest, FleetStatusResponse, HandoffRequest, HandoffResponse, LoadMove,
    NodeLoad, NodeStatusRequest, NodeStatusResponse, PrepareRequest, PrepareResponse,
};
use tonic::{Request, Response, Status};

use super::admit::{Door, admit};
use super::node::Node;
use crate::host::{Host, node_of, now_unix_ms};
use crate::service::catalog::catalog;
use crate::standby::{Standing, standing};

/// The fleet admin service.
pub struct FleetAdminSvc(pub Arc<Node>);

/// One database's view from this node, read from storage; a database not in
/// the catalog is `absent`, with the candidates it would be placed on.
///
/// # Errors
/// `UNAVAILABLE` when storage cannot be read.
pub(crate) async fn database_view(host: &Host, db: &str) -> Result<(Standing, DatabaseView), Status> {
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
            memory_bytes: 0,
            calls_per_second: 0.0,
            storage_key: String::new(),
        },
    ))
}

/// Adds to `view` the key `db` is encrypted under and which of its
/// candidates lack it (their registry records' key ids): one manifest read,
/// and for an encrypted database one registry read. What `where` shows.
///
/// # Errors
/// `UNAVAILABLE` when storage cannot be read.
async fn with_keys(host: &Host, db: &str, view: &mut DatabaseView) -> Result<(), Status> {
    let timeout = host.config.storage_timeout;
    let unavailable = |error: &dyn std::fmt::Display| {
        Status::unavailable(format!(
            "cannot read the key manifest of {db:?}: {error}; retry later"
        ))
    };
    let manifest = tokio::time::timeout(timeout, corium_store::load_key_manifest(host.base.as_ref(), db))
        .await
        .map_err(|_| unavailable(&"storage did not answer in time"))?
        .map_err(|error| unavailable(&error))?;
    let Some(manifest) = manifest.filter(|manifest| !manifest.storage_keys.is_empty()) else {
        return Ok(());
    };
    view.storage_key = manifest.kek.to_string();
    let records = tokio::time::timeout(
        timeout,
        corium_fleet_store::registry::read_records(&corium_fleet_store::prefix_read::ListThenRead(
            Arc::clone(&host.base),
        )),
    )
    .await
    .map_err(|_| unavailable(&"storage did not answer in time"))?
    .map_err(|error| unavailable(&error))?;
    for candidate in &mut view.candidates {
        candidate.lacks_storage_key = records.iter().any(|record| {
            record.node_id == candidate.node_id && !record.storage_keys.contains(&view.storage_key)
        });
    }
    Ok(())
}

/// This node's own status: identity, load, and every database it owns,
/// stands by for or holds cold, read from storage.
///
/// # Errors
/// `UNAVAILABLE` when storage cannot be read.
async fn own_status(node: &Node) -> Result<NodeStatusResponse, Status> {
    let host = &node.host;
    let load = node.load();
    let memory = host.memory_use().await;
    let rates = host.moves.rates();
    let mut response = NodeStatusResponse {
        node_id: host.config.node_id.clone(),
        zone: host.config.zone.clone(),
        weight: host.config.weight,
        incarnation: host.incarnation.clone(),
        internal_endpoint: host.config.advertise.clone(),
        storage: host.config.storage.backend.describe(),
        lease_ttl_ms: i64::try_from(host.config.lease_ttl.as_millis()).unwrap_or(i64::MAX),
        load: Some(NodeLoad {
            calls_running: load.calls_running,
            calls_waiting: load.calls_waiting,
            max_inflight: u32::try_from(node.work.max_inflight()).unwrap_or(u32::MAX),
            subscriptions: load.subscriptions,
            calls_total: load.calls_total,
            read_replicas: u32::try_from(node.replicas.active()).unwrap_or(u32::MAX),
            replica_lag: node.replicas.max_lag(),
            memory_budget_bytes: memory.budget.unwrap_or(0),
            memory_used_bytes: memory.used,
            memory_cache_bytes: memory.used.saturating_sub(memory.firm()),
            memory_resident_bytes: memory.resident.unwrap_or(0),
            calls_per_second: rates.node,
            cpu_percent: rates.cpu_percent,
        }),
        load_moves: host
            .moves
            .recent()
            .into_iter()
            .map(|moved| LoadMove {
                database: moved.database,
                to: moved.to,
                at_unix_ms: moved.at_unix_ms,
                reason: moved.reason,
            })
            .collect(),
        storage_keys: host.template.keys.ids(),
        ..NodeStatusResponse::default()
    };
    for db in catalog(host).await? {
        if host.cell(&db).is_none() && host.rank(&db).is_none() {
            // Not a candidate: its roots are not this node's to read.
            continue;
        }
        let (standing, mut view) = match database_view(host, &db).await {
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
        view.memory_bytes = memory.databases.get(&db).copied().unwrap_or(0);
        view.calls_per_second = rates.databases.get(&db).copied().unwrap_or(0.0);
        response.databases.push(view);
    }
    Ok(response)
}

/// The fleet as this node finds it: every registry record (expired ones
/// included; with static `--member`s, members without a record too), and
/// each live member's own `NodeStatus`, asked concurrently over the
/// node-to-node connection, each bounded by twice the storage timeout. A
/// member that cannot be asked in time is listed with the reason.
///
/// # Errors
/// `UNAVAILABLE` when the registry cannot be read within the storage
/// timeout.
async fn fleet_status(node: &Node) -> Result<FleetStatusResponse, Status> {
    let host = &node.host;
    let now = now_unix_ms();
    let records = tokio::time::timeout(
        host.config.storage_timeout,
        corium_fleet_store::registry::records(host.base.as_ref()),
    )
    .await
    .map_err(|_| Status::unavailable("cannot read the node registry: storage timed out"))?
    .map_err(|error| Status::unavailable(format!("cannot read the node registry: {error}")))?;
    let mut members = std::collections::BTreeMap::new();
    for record in records {
        members.insert(
            record.node_id.clone(),
            FleetMember {
                live: record.expires_unix_ms > now,
                node_id: record.node_id,
                zone: record.zone,
                weight: record.weight,
                endpoint: record.endpoint,
                incarnation: record.incarnation,
                expires_unix_ms: record.expires_unix_ms,
                registry_owned: record.owned,
                status: None,
                error: String::new(),
            },
        );
    }
    if host.config.static_members {
        // A static member with no record is down (or never started): list
        // it, so a fleet of five shows five.
        for member in host.members.get().iter() {
            members
                .entry(member.node_id.clone())
                .or_insert_with(|| FleetMember {
                    node_id: member.node_id.clone(),
                    zone: member.zone.clone(),
                    weight: member.weight,
                    endpoint: member.endpoint.clone(),
                    ..FleetMember::default()
                });
        }
    }
    let bound = host.config.storage_timeout * 2;
    let asks = members.values().filter(|member| member.live).map(|member| {
        let (node_id, endpoint) = (member.node_id.clone(), member.endpoint.clone());
        async move {
            let ask = async {
                if node_id == host.config.node_id {
                    own_status(node).await
                } else {
                    host.peers
                        .connect(&endpoint, &node_id)
                        .await
                        .map_err(Status::from)?
                        .node_status()
                        .await
                }
            };
            let answer = match tokio::time::timeout(bound, ask).await {
                Ok(Ok(status)) => Ok(status),
                Ok(Err(status)) => Err(format!("{:?}: {}", status.code(), status.message())),
                Err(_) => Err(format!("no answer within {} ms", bound.as_millis())),
            };
            (node_id, answer)
        }
    });
    for (node_id, answer) in futures::future::join_all(asks).await {
        if let Some(member) = members.get_mut(&node_id) {
            match answer {
                Ok(status) => member.status = Some(status),
                Err(error) => member.error = error,
            }
        }
    }
    Ok(FleetStatusResponse {
        answered_by: host.config.node_id.clone(),
        now_unix_ms: now,
        members: members.into_values().collect(),
    })
}

/// A node-to-node call about `db` (`Prepare`, `Activate`): a valid name this
/// node is a candidate for.
fn candidate_here(host: &crate::host::Host, db: &str) -> Result<(), Status> {
    corium_fleet_common::names::check(db).map_err(|error| Status::invalid_argument(error.to_string()))?;
    if host.rank(db).is_none() {
        return Err(Status::failed_precondition(format!(
            "node {} is not a candidate for {db:?}",
            host.config.node_id
        )));
    }
    Ok(())
}

#[tonic::async_trait]
impl FleetAdmin for FleetAdminSvc {
    async fn node_status(
        &self,
        request: Request<NodeStatusRequest>,
    ) -> Result<Response<NodeStatusResponse>, Status> {
        admit(&self.0, &request, &Door::operator("NodeStatus", "")).await?;
        own_status(&self.0).await.map(Response::new)
    }

    async fn fleet_status(
        &self,
        request: Request<FleetStatusRequest>,
    ) -> Result<Response<FleetStatusResponse>, Status> {
        admit(&self.0, &request, &Door::operator("FleetStatus", "")).await?;
        fleet_status(&self.0).await.map(Response::new)
    }

    async fn database_placement(
        &self,
        request: Request<DatabasePlacementRequest>,
    ) -> Result<Response<DatabasePlacementResponse>, Status> {
        admit(&self.0, &request, &Door::operator("DatabasePlacement", "")).await?;
        let db = request.into_inner().database;
        let (_, mut view) = database_view(&self.0.host, &db).await?;
        if view.state != "absent" {
            with_keys(&self.0.host, &db, &mut view).await?;
        }
        Ok(Response::new(DatabasePlacementResponse { view: Some(view) }))
    }

    async fn handoff(&self, request: Request<HandoffRequest>) -> Result<Response<HandoffResponse>, Status> {
        admit(&self.0, &request, &Door::operator("Handoff", "")).await?;
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
            .host
            .handoff(&database, &target_node_id)
            .await
            .map(Response::new)
            .map_err(Status::from)
    }

    async fn prepare(&self, request: Request<PrepareRequest>) -> Result<Response<PrepareResponse>, Status> {
        let host = &self.0.host;
        admit(&self.0, &request, &Door::operator("Prepare", "")).await?;
        let db = request.into_inner().database;
        candidate_here(host, &db)?;
        let started = std::time::Instant::now();
        let log = if host.cell(&db).is_some() {
            // Already the owner: nothing to prepare.
            crate::read_ahead::PreparedLog::default()
        } else {
            host.template
                .read_ahead
                .prepare(&db, host.template.base.as_ref())
                .await
                .map_err(|error| {
                    Status::unavailable(format!("cannot read the log of {db:?} ahead: {error}"))
                })?
        };
        Ok(Response::new(PrepareResponse {
            database: db,
            records: log.records as u64,
            bytes: log.bytes as u64,
            read_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            index_blobs: log.index_blobs as u64,
            index_bytes: log.index_bytes as u64,
        }))
    }

    async fn activate(
        &self,
        request: Request<ActivateRequest>,
    ) -> Result<Response<ActivateResponse>, Status> {
        let host = &self.0.host;
        admit(&self.0, &request, &Door::operator("Activate", "")).await?;
        let db = request.into_inner().database;
        candidate_here(host, &db)?;
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
