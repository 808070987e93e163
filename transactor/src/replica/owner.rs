//! Who holds a database's lease now, for a replica to follow: the node
//! named by its lease root ([`holder`]); for a replica being built, when
//! nobody holds it, whoever its candidates activate it at ([`owner`], as a
//! stock client's first call would).

use std::sync::Arc;
use std::time::Duration;

use corium_fleet_common::owner::{node_of, now_unix_ms};

use super::ReplicaError;
use crate::host::{Host, Refusal};

/// The node and endpoint holding `db`'s lease now, without activating it
/// anywhere: a replica following a move (the relay, the probe) waits for
/// the move's own activation, never starts one — during a handoff the old
/// owner is letting go and the target is opening.
///
/// # Errors
/// `NOT_FOUND` for an unknown database; `UNAVAILABLE` (retry) while nobody
/// holds the lease.
pub(super) async fn holder(host: &Host, db: &str) -> Result<(String, String), ReplicaError> {
    let view = host.read_root(db).await?;
    if !view.exists {
        return Err(Refusal::UnknownDatabase(db.to_owned()).into());
    }
    view.live_owner(now_unix_ms())
        .map(|root| (node_of(&root.owner).to_owned(), root.owner_endpoint.clone()))
        .ok_or_else(|| {
            ReplicaError::not_now(
                format!("{db:?} has no owner to follow now (it is moving); retry"),
                Duration::from_millis(100),
            )
        })
}

/// The node and endpoint holding `db`'s lease now; when nobody does, the
/// database is activated at its candidates first (as a stock client's first
/// call would).
pub(super) async fn owner(host: &Arc<Host>, db: &str) -> Result<(String, String), ReplicaError> {
    if let Ok(held) = holder(host, db).await {
        return Ok(held);
    }
    let view = host.read_root(db).await?;
    if !view.exists {
        return Err(Refusal::UnknownDatabase(db.to_owned()).into());
    }
    if host.rank(db).is_some() {
        // A candidate: the ownership decision activates it here, or names
        // whoever took it meanwhile.
        match host.owner(&tonic::metadata::MetadataMap::new(), db).await {
            Ok(_) => return Ok((host.config.node_id.clone(), host.config.advertise.clone())),
            Err(Refusal::NotOwner(hint)) if !hint.owner_id.is_empty() && !hint.route_endpoint.is_empty() => {
                return Ok((hint.owner_id, hint.route_endpoint));
            }
            Err(refusal) => return Err(refusal.into()),
        }
    }
    for candidate in host.candidate_list(db) {
        if host
            .peers
            .activate(&candidate.endpoint, &candidate.node_id, db)
            .await
            .is_ok()
        {
            break;
        }
    }
    let view = host.read_root(db).await?;
    view.live_owner(now_unix_ms())
        .map(|root| (node_of(&root.owner).to_owned(), root.owner_endpoint.clone()))
        .ok_or_else(|| {
            ReplicaError::not_now(
                format!("{db:?} has no owner to follow yet; retry"),
                Duration::from_millis(500),
            )
        })
}
