//! `corium.v1.Transactor`, dispatched to the owning cell through Corium's
//! own `TransactorSvc`, except `Subscribe`, which the fleet serves itself
//! (see `subscribe.rs`), and a `Transact` carrying `corium-request-id`,
//! which goes through the exactly-once path (`request_id.rs`), and `Sync`,
//! a wait for a basis that holds no work place (`waiters.rs`).

use std::sync::Arc;
use std::time::Duration;

use corium_protocol::authz::Action;
use corium_protocol::pb;
use corium_protocol::pb::transactor_server::Transactor;
use corium_transactor::server::TransactorSvc;
use tonic::{Request, Response, Status};

use corium_fleet_wire::metadata;

use super::admit::{Door, Refused, admit_owner, stamp_lease_version, time_left};
use super::forward::forwarded_to_corium;
use super::node::Node;
use super::status;
use crate::cell::Cell;
use crate::request_id::{Origin, Outcome};
use crate::waiters::check_reach;

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

/// Waits until `db` on `cell` is at basis `t` at least (0: its basis now)
/// and returns its basis: `Sync` as Corium defines it, except that a basis
/// out of reach within `within` is refused at once (`waiters.rs`), and a
/// cell that stops serving ends the wait with its `NotOwner`.
///
/// Corium 0.1.90's `TransactorNode::sync` reads the database's basis watch,
/// which its commits publish with tokio's `watch::Sender::send`; a `send`
/// while no one waits does not store the value, so the watch keeps the
/// basis the database opened at: `Sync(0)` answers that, and `Sync(t)` past
/// it waits out its deadline although the database is at `t` (found by the
/// differential tests, `docs/design/0016-differential-tests.md`). Here the
/// database value decides and the watch only wakes the wait; it is
/// subscribed before the value is read, so a commit after the read wakes
/// it.
async fn sync_basis(node: &Node, cell: &Cell, db: &str, t: u64, within: Duration) -> Result<u64, Status> {
    let state = cell
        .node
        .db_state(db)
        .await
        .map_err(|error| status::node_status(&error))?;
    let mut commits = state.basis_watch();
    let mut closed = cell.closed();
    let target = if t == 0 { state.db().basis_t() } else { t };
    if let Err(out_of_reach) = check_reach(db, target, state.db().basis_t(), within) {
        node.waiters.count_out_of_reach();
        return Err(Refused::from(out_of_reach).into());
    }
    loop {
        let basis = state.db().basis_t();
        if basis >= target {
            return Ok(basis);
        }
        tokio::select! {
            changed = commits.changed() => {
                if changed.is_err() {
                    // The database closed here: its last basis.
                    return Ok(state.db().basis_t());
                }
            }
            () = corium_fleet_common::signal::until_true(&mut closed) => {
                return Err(node.host.not_owner(db, None).into());
            }
        }
    }
}

/// The fleet's `Transactor` service.
pub struct FleetTransactor(pub Arc<Node>);

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
        let node = &self.0;
        let host = &node.host;
        // A replay of a committed request id is authorized exactly like the
        // original.
        let mut at = admit_owner(node, &request, &Door::on(Action::Transact, &db)).await?;
        let permit = at.permit.take().ok_or_else(|| host.not_owner(&db, None))?;
        let cell = Arc::clone(&at.cell);
        let request = request.into_inner();
        check_version(request.protocol_version)?;
        // The cell's own commit rather than Corium's service: it cannot be
        // cancelled half-way, and a failure after the append may have landed
        // answers an unknown outcome (`status::transact_status`).
        // Authorization ran at the door, with the guard Corium's service
        // would use.
        let sender = at.call.sender(node);
        let answered = cell
            .transact(
                permit,
                request,
                id.map(|id| (id, origin)),
                sender,
                host.base.as_ref(),
                host.config.request_id_retention,
            )
            .await;
        host.reset_if_failed(&cell);
        if let Err(crate::cell::TransactError::Ledger {
            error: crate::request_id::LedgerError::Invalid(_),
            ..
        }) = &answered
        {
            host.metrics
                .request_id_conflicts
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let transacted = answered.map_err(|error| status::transact_status(error, &db))?;
        if let Some(id) = id {
            let counter = match transacted.outcome {
                Outcome::Committed => {
                    if let Some(observe) = &host.after_commit {
                        observe(&id);
                    }
                    &host.metrics.request_id_commits
                }
                Outcome::Replayed => {
                    tracing::info!(db, request_id = %id, basis_t = transacted.response.basis_t, "duplicate request id; replayed the committed answer");
                    &host.metrics.request_id_replays
                }
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let basis_t = transacted.response.basis_t;
        let mut response = Response::new(transacted.response);
        stamp_lease_version(&mut response, cell.lease_version);
        response.metadata_mut().insert(metadata::BASIS_T, basis_t.into());
        if transacted.outcome == Outcome::Replayed {
            response.metadata_mut().insert(
                metadata::REPLAYED,
                tonic::metadata::MetadataValue::from_static("1"),
            );
        }
        Ok(response)
    }

    type SubscribeStream = super::subscribe::ItemStream;

    async fn subscribe(
        &self,
        request: Request<pb::SubscribeRequest>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let db = request.get_ref().db.clone();
        let node = &self.0;
        let host = &node.host;
        // The place is held while the stream is set up (its backfill read),
        // not for the stream's life: subscriptions have their own limits.
        // A hot standby follows what is open and lets it go idle.
        let hot_standby = request
            .metadata()
            .get(corium_fleet_wire::metadata::HOT_STANDBY)
            .is_some_and(|value| value == "1");
        let door = Door::on(Action::Subscribe, &db).open_only(hot_standby);
        let at = admit_owner(node, &request, &door).await?;
        let principal = at.call.principal_key();
        let request = request.into_inner();
        check_version(request.protocol_version)?;
        let admission = super::subscribe::admit(
            &at.cell,
            &node.subscriptions,
            &principal,
            host.config.max_subscriptions,
            !hot_standby,
        )
        .inspect_err(|_| {
            host.metrics
                .subscriptions_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })?;
        let heartbeat_ms = u64::try_from(at.cell.node.config().heartbeat_interval.as_millis()).unwrap_or(0);
        let stream = super::subscribe::stream(
            &at.cell,
            &request.db,
            admission,
            request.from_basis_t,
            heartbeat_ms,
        )
        .await;
        drop(at);
        stream.map(Response::new)
    }

    async fn sync(&self, request: Request<pb::SyncRequest>) -> Result<Response<pb::SyncResponse>, Status> {
        let db = request.get_ref().db.clone();
        let t = request.get_ref().t;
        let node = &self.0;
        let within = time_left(request.metadata());
        // A wait, not work: no work place and no permit (a drain does not
        // wait for it; the cell's closing ends it).
        let at = admit_owner(node, &request, &Door::on(Action::Inspect, &db).waits()).await?;
        let basis_t = sync_basis(node, &at.cell, &db, t, within).await?;
        let mut response = Response::new(pb::SyncResponse { basis_t });
        stamp_lease_version(&mut response, at.cell.lease_version);
        Ok(response)
    }

    forwarded_to_corium! { TransactorSvc:
        saga_commit(SagaCommitRequest -> SagaCommitResponse) for Transact, writes;
        saga_finish(SagaFinishRequest -> SagaFinishResponse) for Transact, writes;
        status(StatusRequest -> StatusResponse) for Inspect;
    }
}
