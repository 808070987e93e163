//! The node's front door: every RPC the node serves passes here before its
//! handler runs, in one order:
//!
//! 1. **who** — the principal the `Identify` interceptor attached
//!    (`principal.rs`; authentication ran there, before any service);
//! 2. **may they** — the access the call needs, decided by the node's Corium
//!    guard (or the operator rule), before anything is read, activated or
//!    written: a denied caller neither wakes a cold database nor takes a
//!    place;
//! 3. **the name** — Corium's database-name rule and the fleet metadata
//!    (route header = body, at most one hop);
//! 4. **the owner** (owner calls) — this node's cell for the database, found
//!    or activated here when this node is its candidate (`Host::owner`); a
//!    write is refused while the node is over its memory budget with nowhere
//!    to hand a database to (`Host::admit_growth`);
//! 5. **a place** — a work place under the node's limits
//!    (`work_limits.rs`) for work, a place among the waits (`waiters.rs`) for
//!    a wait for a basis; the fleet's own calls take neither;
//! 6. **the permit** (owner calls that work) — the cell's admission, which a
//!    drain waits for.
//!
//! Every "no" is a typed [`Refused`]; `status.rs` turns it into the one
//! status the caller sees.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corium_protocol::authz::{self, Access, Action, Principal};
use tonic::{Request, Response};

use super::node::Node;
pub(crate) use super::refused::Refused;
use crate::cell::{Admission, Cell};
use crate::host::Refusal;
use crate::waiters::WaitPlace;
use crate::work_limits::WorkPermit;

/// How a call counts against the node's limits.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum Place {
    /// Client work: a work place, and the principal's rate.
    Work,
    /// A wait for a basis: a place among the waits, and the principal's
    /// rate; no work place.
    Wait,
    /// The fleet's own calls (status, handoff, activation): never shed, so
    /// overload cannot stop ownership from moving.
    Exempt,
}

/// What one call needs before its handler runs.
#[derive(Clone, Debug)]
pub(crate) struct Door<'a> {
    /// The access the caller must hold (`None`: operator rule only).
    access: Option<Access>,
    /// Whether a grant filtered by a view may be served: only where the
    /// handler applies the view itself (the replicas' stock peer server).
    views: bool,
    /// Operator-only calls: their name.
    operator: Option<&'static str>,
    /// The database the call is about (its name, metadata, owner and
    /// places); empty for catalog-wide calls.
    pub(super) db: &'a str,
    place: Place,
    /// A write through Corium's own service: a failure that may follow a
    /// durable append is answered as an unknown outcome (`write_status`).
    pub(super) writes: bool,
    /// Served only by a cell open here: never activates the database (a hot
    /// standby's subscription).
    open_only: bool,
}

impl<'a> Door<'a> {
    /// A client call on `db` that needs `action` on it.
    pub(crate) fn on(action: Action, db: &'a str) -> Self {
        Self {
            access: Some(Access::on(action, db)),
            views: false,
            operator: None,
            db,
            place: Place::Work,
            writes: false,
            open_only: false,
        }
    }

    /// A client call on the whole catalog that needs `action` on it.
    pub(crate) fn catalog(action: Action) -> Self {
        Self {
            access: Some(Access::catalog(action)),
            views: false,
            operator: None,
            db: "",
            place: Place::Work,
            writes: false,
            open_only: false,
        }
    }

    /// An operator call (`FleetAdmin`), about `db` when it names one; never
    /// shed.
    pub(crate) fn operator(what: &'static str, db: &'a str) -> Self {
        Self {
            access: None,
            views: false,
            operator: Some(what),
            db,
            place: Place::Exempt,
            writes: false,
            open_only: false,
        }
    }

    /// Needs `access` instead of the access on the call's own database (a
    /// fork runs at its source and needs the right to fork into its target).
    pub(crate) fn needing(mut self, access: Access) -> Self {
        self.access = Some(access);
        self
    }

    /// Only for an operator, besides the access (a sweep of the whole store).
    pub(crate) fn for_operator(mut self, what: &'static str) -> Self {
        self.operator = Some(what);
        self
    }

    /// A grant filtered by a view is served: the handler applies it.
    pub(crate) fn views(mut self) -> Self {
        self.views = true;
        self
    }

    /// A wait for a basis: a place among the waits instead of a work place.
    pub(crate) fn waits(mut self) -> Self {
        self.place = Place::Wait;
        self
    }

    /// Served only by a cell open here, never activating the database
    /// (when `only`).
    pub(crate) fn open_only(mut self, only: bool) -> Self {
        self.open_only = only;
        self
    }

    /// A write through Corium's own service (see [`Door::writes`]'s field).
    pub(crate) fn writes(mut self) -> Self {
        self.writes = true;
        self
    }
}

/// A call let in: who it is, and the place it holds until it is dropped.
pub(crate) struct Admitted {
    /// The caller.
    pub(crate) principal: Principal,
    place: Held,
}

/// The place a call holds.
enum Held {
    Work { _permit: WorkPermit },
    Wait { _place: WaitPlace },
    Nothing,
}

impl Admitted {
    /// The caller as the sender of a request id: its owner tag, whether
    /// records name it yet (every live member reads owners), and whether it
    /// is an operator (who may ask about anyone's id).
    pub(crate) fn sender(&self, node: &Node) -> crate::request_id::Sender {
        crate::request_id::Sender {
            owner: crate::request_id::record::Owner::of(&self.principal),
            recorded: node
                .host
                .features
                .has(corium_fleet_store::registry::OWNED_REQUEST_IDS),
            operator: node.host.config.auth.is_operator(&self.principal),
        }
    }

    /// The caller as one key for per-principal counts.
    pub(crate) fn principal_key(&self) -> String {
        principal_key(&self.principal)
    }

    /// After a wait: gives the wait's place back and takes a work place for
    /// the work that follows (a read served once its basis is reached).
    ///
    /// # Errors
    /// [`Refused::Overloaded`] when the node's limits refuse the work.
    pub(crate) async fn work_after_wait(&mut self, node: &Node, db: &str) -> Result<(), Refused> {
        self.place = Held::Nothing;
        let permit = node
            .work
            .enter(&self.principal_key(), db, None)
            .await
            .map_err(Refused::Overloaded)?;
        self.place = Held::Work { _permit: permit };
        Ok(())
    }
}

/// A call let in at the owner of its database.
pub(crate) struct AtOwner {
    /// The cell that owns the database.
    pub(crate) cell: Arc<Cell>,
    /// The cell's admission, held while the call works (a drain waits for
    /// it); `None` for a wait, which a drain must not wait for.
    pub(crate) permit: Option<Admission>,
    /// The caller and its place.
    pub(crate) call: Admitted,
}

/// The caller as one key: `provider:subject`.
pub(crate) fn principal_key(principal: &Principal) -> String {
    format!("{}:{}", principal.provider, principal.subject)
}

/// Steps 1–3 and 5: who, may they, the name, a place. For calls that need
/// no owner (creates, catalog reads, reads from replicas, the operator
/// surface).
///
/// # Errors
/// The first [`Refused`] met, in the module's order.
pub(crate) async fn admit<T>(
    node: &Node,
    request: &Request<T>,
    door: &Door<'_>,
) -> Result<Admitted, Refused> {
    let principal = authz::principal(request);
    allow(node, &principal, door).await?;
    if !door.db.is_empty() {
        corium_fleet_common::names::check(door.db).map_err(Refusal::from)?;
        node.host.check_metadata(request.metadata(), door.db)?;
    }
    let place = take_place(node, &principal, door).await?;
    Ok(Admitted { principal, place })
}

/// Steps 1–6: who, may they, the name, the owner, a place, the permit. For
/// calls the database's lease holder serves.
///
/// # Errors
/// The first [`Refused`] met, in the module's order.
pub(crate) async fn admit_owner<T>(
    node: &Node,
    request: &Request<T>,
    door: &Door<'_>,
) -> Result<AtOwner, Refused> {
    let principal = authz::principal(request);
    allow(node, &principal, door).await?;
    // The name and metadata are checked by the decision itself.
    let cell = if door.open_only {
        node.host.owner_if_open(request.metadata(), door.db).await?
    } else {
        node.host.owner(request.metadata(), door.db).await?
    };
    // A write grows memory: refused while the node is over its budget with
    // nowhere to hand a database to (`host/memory.rs`); reads go on.
    if door
        .access
        .as_ref()
        .is_some_and(|access| access.action == Action::Transact)
    {
        node.host.admit_growth(&cell).await?;
    }
    let place = take_place(node, &principal, door).await?;
    let permit = if door.place == Place::Wait {
        None
    } else {
        // Draining or deposed between the decision and admission.
        Some(cell.admit().ok_or_else(|| node.host.not_owner(door.db, None))?)
    };
    Ok(AtOwner {
        cell,
        permit,
        call: Admitted { principal, place },
    })
}

/// The time the call has left: its `grpc-timeout`, else the node's default
/// deadline (tonic ends the call there either way).
pub(crate) fn time_left(map: &tonic::metadata::MetadataMap) -> Duration {
    map.get("grpc-timeout")
        .and_then(|value| value.to_str().ok())
        .and_then(corium_fleet_wire::metadata::grpc_timeout)
        .map_or(super::DEFAULT_DEADLINE, |timeout| {
            timeout.min(super::DEFAULT_DEADLINE)
        })
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

/// Step 2: the operator rule and the access, with Corium's rule for grants:
/// an allow, or a grant without a view filter (with one only where the
/// handler applies it).
async fn allow(node: &Node, principal: &Principal, door: &Door<'_>) -> Result<(), Refused> {
    let host = &node.host;
    if let Some(what) = door.operator
        && !host.config.auth.is_operator(principal)
    {
        host.metrics.denied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(principal = %principal.subject, provider = %principal.provider, what, "operator call denied");
        return Err(Refused::NotOperator {
            what,
            role: host.config.auth.operator_role().to_owned(),
        });
    }
    let Some(access) = &door.access else {
        return Ok(());
    };
    match node.guard.authorize(principal, access).await {
        Ok(None) => Ok(()),
        Ok(Some(grant)) if grant.view.is_none() || door.views => Ok(()),
        Ok(Some(_)) => Err(Refused::Filtered),
        Err(error) => {
            host.metrics.denied.fetch_add(1, Ordering::Relaxed);
            tracing::info!(principal = %principal.subject, provider = %principal.provider, ?access, "access denied");
            Err(Refused::Denied(error))
        }
    }
}

/// Step 5: the call's place under the node's limits.
async fn take_place(node: &Node, principal: &Principal, door: &Door<'_>) -> Result<Held, Refused> {
    match door.place {
        Place::Exempt => Ok(Held::Nothing),
        Place::Work => {
            let key = principal_key(principal);
            let permit = node.work.enter(&key, door.db, None).await.map_err(|refused| {
                tracing::debug!(db = door.db, principal = %key, reason = refused.reason.label(), "call shed");
                Refused::Overloaded(refused)
            })?;
            tracing::debug!(db = door.db, principal = %key, "call admitted");
            Ok(Held::Work { _permit: permit })
        }
        Place::Wait => {
            let key = principal_key(principal);
            node.work.charge(&key).map_err(Refused::Overloaded)?;
            let place = node.waiters.enter(&key, door.db).map_err(|refused| {
                tracing::debug!(db = door.db, principal = %key, "wait refused");
                Refused::Overloaded(refused)
            })?;
            tracing::debug!(db = door.db, principal = %key, "wait admitted");
            Ok(Held::Wait { _place: place })
        }
    }
}
