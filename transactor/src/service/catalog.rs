//! `corium.v1.Catalog` at fleet level.
//!
//! - database-specific operations route to the owning cell exactly like
//!   transactions (Corium's own `CatalogSvc` then does the work);
//! - `CreateDatabase` initialises the database on a candidate (never on a
//!   node that placement does not name), answering `NotOwner` elsewhere and
//!   `ALREADY_EXISTS` for a database that exists;
//! - `DeleteDatabase` runs at the owner: it removes the catalog entry first
//!   (no candidate activates it after that), then Corium deletes the roots
//!   and log, deposing the owner; an unknown database is `NOT_FOUND`;
//! - `ListDatabases` reads the catalog from storage, `GcDeletedDatabases`
//!   runs from a view that hosts nothing;
//! - `ForkDatabase` runs at the source's owner under a fleet-wide reservation
//!   of the target name (`fork.rs`); the source cell may write the target's
//!   roots only for the fork's duration, then hands both leases back, so the
//!   target activates on its own candidates.

use std::sync::Arc;

use corium_fleet_common::auth::DATA_ADMIN_ROLE;
use corium_protocol::authz::{Access, Action};
use corium_protocol::pb;
use corium_protocol::pb::catalog_server::Catalog;
use corium_transactor::StoreSpec;
use corium_transactor::lease::LeaseError;
use corium_transactor::node::{NodeConfig, NodeError, TransactorNode};
use corium_transactor::server::CatalogSvc;
use tonic::{Request, Response, Status};

use super::admit::{Door, Refused, admit, admit_owner};
use super::forward::{forward, forwarded_to_corium};
use super::node::Node;
use super::status;
use crate::cell::{Cell, CreateError};
use crate::host::Host;
use crate::view;

/// The fleet's `Catalog` service.
pub struct FleetCatalog(pub Arc<Node>);

/// The answer to creating a database that exists (Corium itself answers
/// `created: false`; the fleet says so as a status, see design note 0005).
fn already_exists(db: &str) -> Status {
    Status::already_exists(format!("database {db:?} already exists"))
}

/// How Corium's catalog service words a lease another owner holds
/// (`LeaseError::Held`, answered `INTERNAL`): all there is to tell it from
/// in its answer to `CreateDatabase`.
const CORIUM_LEASE_HELD_PREFIX: &str = "lease held by ";

/// Whether Corium's answer says another owner held the lease.
fn lease_held(answer: &Status) -> bool {
    answer.code() == tonic::Code::Internal && answer.message().starts_with(CORIUM_LEASE_HELD_PREFIX)
}

/// Corium's database-name rule (a database, never a saga branch), checked
/// before anything touches storage.
fn check_name(db: &str) -> Result<(), Status> {
    if corium_fleet_common::names::is_database(db) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "invalid database name {db:?}: use 1-128 letters, digits, '-' or '_'"
        )))
    }
}

#[tonic::async_trait]
impl Catalog for FleetCatalog {
    async fn create_database(
        &self,
        request: Request<pb::CreateDatabaseRequest>,
    ) -> Result<Response<pb::CreateDatabaseResponse>, Status> {
        let node = &self.0;
        let host = &node.host;
        let db = request.get_ref().db.clone();
        check_name(&db)?;
        // The cell's create runs Corium's service with no principal, so the
        // decision is made here, before anything is written.
        let _admitted = admit(node, &request, &Door::on(Action::CreateDatabase, &db)).await?;
        if host.rank(&db).is_none() {
            return Err(host.not_owner(&db, None).into());
        }
        if host.is_stopping() {
            return Err(Status::unavailable("this node is shutting down; retry"));
        }
        // A database encrypted under a key this node lacks is the next
        // candidate's to create (Corium would refuse it only after writing
        // the catalog entry's first records).
        let key_id = &request.get_ref().storage_key;
        if !key_id.is_empty() && !host.template.keys.holds(key_id) {
            return Err(host.key_missing(&db, key_id.clone()).into());
        }
        // A create opens the new database here: the memory budget decides
        // as for any activation (a candidate with room, else a refusal).
        host.make_room(&db).await?;
        // Two creates of one name here (two ingresses, a client's retry) run
        // one after the other: the second finds it and answers
        // `ALREADY_EXISTS` (without the lock it would find the first one's
        // lease and answer a storage failure).
        let lock = host.activation_lock(&db);
        let _creating = lock.lock().await;
        let view = host.read_root(&db).await?;
        if view.exists {
            return Err(already_exists(&db));
        }
        let created = match Cell::create(&host.template, request.into_inner()).await {
            // Created meanwhile by another node: Corium takes a lease only
            // for a catalogued database, so a held one means it exists.
            Err(CreateError::Open(NodeError::Lease(LeaseError::Held { .. }))) => {
                return Err(already_exists(&db));
            }
            // This create wrote the catalog entry (Corium's CAS comes before
            // it opens the new database), and then another candidate's open
            // took the lease first: a create of the name there that found
            // the entry (it gives the lease straight back) or an activation.
            // The database is this call's; it activates where its next
            // request goes.
            Err(CreateError::Corium(answer)) if lease_held(&answer) => {
                tracing::info!(
                    db,
                    answer = answer.message(),
                    "database created; another candidate opened it first"
                );
                return Ok(Response::new(pb::CreateDatabaseResponse { created: true }));
            }
            created => created.map_err(status::create_status)?,
        };
        match created {
            Some(cell) => {
                tracing::info!(db, lease_version = cell.lease_version, "database created");
                host.install(cell);
                host.metrics
                    .activations
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(Response::new(pb::CreateDatabaseResponse { created: true }))
            }
            None => Err(already_exists(&db)),
        }
    }

    async fn delete_database(
        &self,
        request: Request<pb::DeleteDatabaseRequest>,
    ) -> Result<Response<pb::DeleteDatabaseResponse>, Status> {
        let node = &self.0;
        let host = &node.host;
        let db = request.get_ref().db.clone();
        check_name(&db)?;
        // The catalog entry goes before Corium's service runs (and checks
        // again): decide first.
        let at = match admit_owner(node, &request, &Door::on(Action::DeleteDatabase, &db)).await {
            Ok(at) => at,
            // Nothing to delete: stock Corium's answer.
            Err(Refused::Ownership(crate::host::Refusal::UnknownDatabase(_))) => {
                return Ok(Response::new(pb::DeleteDatabaseResponse { deleted: false }));
            }
            Err(refused) => return Err(refused.into()),
        };
        let cell = Arc::clone(&at.cell);
        // No index publication of this cell (a handoff's, an eviction's)
        // runs beside the delete: one finishing after it would write the
        // deleted database's root back (`Cell::publication`).
        let publication = cell.publication.lock().await;
        // Stop new ownership first: with the catalog entry gone no candidate
        // activates the database (it is NOT_FOUND everywhere) while Corium
        // deletes the root that carries this owner's lease.
        let meta = corium_store::meta_root_name(&db);
        tokio::time::timeout(host.config.storage_timeout, host.base.delete_root(&meta))
            .await
            .map_err(|_| Status::unavailable(format!("deleting {db:?} timed out; retry")))?
            .map_err(|error| Status::unavailable(format!("cannot delete {db:?}: {error}; retry")))?;
        let response = CatalogSvc(Arc::clone(&cell.node), node.guard.clone())
            .delete_database(request)
            .await
            .map_err(|answer| status::write_status(&db, answer));
        drop(publication);
        drop(at);
        if response.as_ref().is_ok_and(|response| response.get_ref().deleted) {
            tracing::info!(db, "database deleted");
            host.forget(&cell);
        }
        response
    }

    async fn fork_database(
        &self,
        request: Request<pb::ForkDatabaseRequest>,
    ) -> Result<Response<pb::ForkDatabaseResponse>, Status> {
        let node = &self.0;
        let host = &node.host;
        let source = request.get_ref().db.clone();
        let target = request.get_ref().target.clone();
        check_name(&source)?;
        check_name(&target)?;
        if source == target {
            return Err(Status::invalid_argument(
                "fork target must differ from the source",
            ));
        }
        // The reservation is written before Corium's service runs (and
        // checks the same access): decide first. Source work runs at the
        // source's owner.
        let door = Door::on(Action::ForkDatabase, &source).needing(Access::on(Action::ForkDatabase, &target));
        let mut at = admit_owner(node, &request, &door).await?;
        let cell = Arc::clone(&at.cell);
        // Target creation is serialised fleet-wide by a reservation root, so
        // two forks into one name never write its log at the same time.
        let reservation = crate::fork::Reservation::take(host, &target).await?;
        let result = async {
            if host.read_root(&target).await?.exists {
                return Err(already_exists(&target));
            }
            let permit = at.permit.take().ok_or_else(|| host.not_owner(&source, None))?;
            let allowance = cell.fork_targets.allow(&target);
            let response = CatalogSvc(Arc::clone(&cell.node), node.guard.clone())
                .fork_database(request)
                .await
                .map_err(|answer| status::write_status(&source, answer));
            drop(allowance);
            drop(permit);
            response
        }
        .await;
        // The eviction below drains the cell: nothing of this call may hold
        // it.
        drop(at);
        // Corium opened the target inside the source's cell, holding its
        // lease; hand both back so the target activates on its own
        // candidates and the source on its next request.
        if result.is_ok() {
            host.evict(&cell).await;
            // A renewal racing the release may have re-extended the target's
            // lease (only the source's is watched): give it back explicitly.
            host.release_own(&target).await;
        }
        reservation.release().await;
        let response = result?.into_inner();
        if !response.created {
            return Err(already_exists(&target));
        }
        tracing::info!(source, target, basis_t = response.basis_t, "database forked");
        Ok(Response::new(response))
    }

    async fn list_databases(
        &self,
        request: Request<pb::ListDatabasesRequest>,
    ) -> Result<Response<pb::ListDatabasesResponse>, Status> {
        let _admitted = admit(&self.0, &request, &Door::catalog(Action::ListDatabases)).await?;
        let dbs = catalog(&self.0.host).await?;
        Ok(Response::new(pb::ListDatabasesResponse { dbs }))
    }

    async fn gc_deleted_databases(
        &self,
        request: Request<pb::GcDeletedDatabasesRequest>,
    ) -> Result<Response<pb::GcDeletedDatabasesResponse>, Status> {
        // A node over a view that hosts nothing: its GC marks every `db:`
        // root (the listing passes through) and deletes unreachable blobs.
        let node = &self.0;
        let host = &node.host;
        // It sweeps the whole shared store: operators only (and then
        // Corium's own `GarbageCollect` check), decided before a node opens.
        let door = Door::catalog(Action::GarbageCollect).for_operator("GcDeletedDatabases");
        let _admitted = admit(node, &request, &door).await?;
        // Corium sweeps every unreachable blob older than the retention; a
        // live database's index is written before its root names it, so a
        // short retention could sweep blobs about to become reachable.
        let floor = u64::try_from(host.config.gc_min_retention.as_millis()).unwrap_or(u64::MAX);
        if let Some(asked) = request.get_ref().retention_millis
            && asked < floor
        {
            return Err(Status::invalid_argument(format!(
                "retention_millis {asked} is below this fleet's floor of {floor} (--gc-min-retention-ms): \
                 a younger unreachable blob may belong to an index a live database is publishing"
            )));
        }
        let mut config = NodeConfig::new(host.template.data_dir.clone());
        config.store = StoreSpec::new(
            host.template.view_kind,
            view::config(&host.base, None, &view::ForkTargets::default(), None),
        );
        // This view hosts nothing and takes no lease.
        config.owner = format!("{}.gc", host.template.owner_prefix);
        config.ha = false;
        config.gc_interval = None;
        config.saga_sweep_interval = None;
        // Encrypted databases' roots are read as a stock transactor with
        // the same keys reads them.
        config.keyring.clone_from(&host.template.keys.keyring);
        let sweeper = TransactorNode::open(config)
            .await
            .map_err(|error| status::node_status(&error))?;
        CatalogSvc(sweeper, node.guard.clone())
            .gc_deleted_databases(request)
            .await
    }

    async fn get_storage_info(
        &self,
        request: Request<pb::GetStorageInfoRequest>,
    ) -> Result<Response<pb::GetStorageInfoResponse>, Status> {
        // Through a cell Corium would describe the view, which no other
        // process can open; describe the shared store instead, at a basis
        // fixed by the owner.
        let host = Arc::clone(&self.0.host);
        let db = request.get_ref().db.clone();
        // Where the data lives (a data directory, a read-only connection
        // string) is for the storage's administrators: a data admin (stock
        // Corium's `admin` role, which its own token holds) or an operator.
        let principal = corium_protocol::authz::principal(&request);
        if !(principal.has_role(DATA_ADMIN_ROLE) || host.config.auth.is_operator(&principal)) {
            host.metrics
                .denied
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Status::permission_denied(format!(
                "GetStorageInfo describes where the data lives: it needs role {DATA_ADMIN_ROLE:?} or {:?}",
                host.config.auth.operator_role()
            )));
        }
        let spec = corium_transactor::StoreSpec::new(
            host.config.storage.backend.kind(),
            host.config.storage.backend.config(),
        );
        let data_dir = host.template.data_dir.clone();
        let read_only = host.config.storage_info.clone();
        let name = db.clone();
        forward(
            &self.0,
            request,
            Door::on(Action::Inspect, &db),
            |node, _request| async move {
                // The database's basis now, as Corium's `backup_info` reads it
                // (`sync(0)` answers the basis watch, which a freshly opened
                // cell has not published yet).
                let basis_t = node
                    .db_state(&name)
                    .await
                    .map_err(|error| status::node_status(&error))?
                    .db()
                    .basis_t();
                let storage = spec
                    .connection_info(&data_dir, &read_only)
                    .await
                    .map_err(Status::failed_precondition)?;
                Ok(Response::new(pb::GetStorageInfoResponse {
                    basis_t,
                    storage: Some(storage),
                }))
            },
        )
        .await
    }
    forwarded_to_corium! { CatalogSvc:
        request_index(RequestIndexRequest -> RequestIndexResponse) for ManageIndex;
        set_index_policy(SetIndexPolicyRequest -> SetIndexPolicyResponse) for ManageIndex;
        key_status(KeyStatusRequest -> KeyStatusResponse) for ManageKeys;
        rotate_storage_key(RotateStorageKeyRequest -> RotateStorageKeyResponse) for ManageKeys, writes;
        rewrap_keys(RewrapKeysRequest -> RewrapKeysResponse) for ManageKeys, writes;
        alter_schema(AlterSchemaRequest -> AlterSchemaResponse) for AlterSchema, writes;
    }
}

/// Every database in the catalog (saga branches excluded), sorted.
///
/// # Errors
/// `UNAVAILABLE` when storage cannot be listed.
pub(crate) async fn catalog(host: &Host) -> Result<Vec<String>, Status> {
    let listing = tokio::time::timeout(host.config.storage_timeout, host.base.list_roots("meta:")).await;
    let names = match listing {
        Ok(Ok(names)) => names,
        Ok(Err(error)) => return Err(Status::unavailable(format!("cannot list the catalog: {error}"))),
        Err(_) => return Err(Status::unavailable("cannot list the catalog: storage timed out")),
    };
    let mut dbs: Vec<String> = names
        .into_iter()
        .filter_map(|name| name.strip_prefix("meta:").map(str::to_owned))
        .filter(|name| !name.contains(".saga."))
        .collect();
    dbs.sort();
    Ok(dbs)
}

#[cfg(test)]
mod tests {
    use corium_transactor::lease::LeaseError;
    use corium_transactor::node::NodeError;

    /// Pins Corium's wording of a held lease, which `CreateDatabase` reads
    /// to tell a create whose open lost the lease from other failures.
    #[test]
    fn coriums_answer_for_a_held_lease_is_recognised() {
        let held = corium_transactor::server::to_status(&NodeError::Lease(LeaseError::Held {
            owner: "node-1/abc.2".into(),
            expires_unix_ms: 1,
        }));
        assert!(super::lease_held(&held), "{held:?}");
        let lost = corium_transactor::server::to_status(&NodeError::Lease(LeaseError::Lost));
        assert!(!super::lease_held(&lost), "{lost:?}");
        assert!(!super::lease_held(&tonic::Status::unavailable("lease held by n")));
    }
}
