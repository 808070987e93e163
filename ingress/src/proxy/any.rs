//! Calls that need no lease holder: a catalog create goes to the database's
//! top reachable candidate, the rest to any node. Only a provably unsent
//! attempt (a refused connection) moves on to the next node, and a create
//! refused by a node that is not a candidate (this ingress's member list
//! was behind the registry's) follows the candidates that node lists, once.

use std::sync::atomic::Ordering;

use corium_fleet_common::placement::Member;
use corium_fleet_wire::not_owner;
use corium_fleet_wire::outcome::{self, Cause};
use hyper::http::Response;
use tonic::Status;

use super::Proxy;
use super::hop::{Hop, SendError};
use super::intake::Call;
use super::key_refusals::KeyRefusals;
use crate::body::Body;

impl Proxy {
    /// The candidates of `db` in rank order (the placement map first), nodes
    /// whose calls recently hung last.
    pub(super) fn candidate_hops(&self, db: &str) -> Vec<Hop> {
        let hops: Vec<Hop> = corium_fleet_common::placement_map::candidates(
            db,
            &self.members.get(),
            self.config.membership.replicas,
            &self.map.get(),
        )
        .into_iter()
        .map(|member: &Member| Hop {
            endpoint: member.endpoint.clone(),
            lease_version: None,
        })
        .collect();
        self.suspects.order(hops, |hop: &Hop| hop.endpoint.as_str())
    }

    /// Sends a catalog create for `db` to its candidates. A node that is
    /// not a candidate refuses it before doing anything, with a `NotOwner`
    /// listing the candidates it sees; the call then goes to those, once.
    pub(super) async fn to_candidates(&self, call: &Call, db: &str) -> Result<Response<Body>, Status> {
        let response = self.to_candidates_once_hinted(call, db).await;
        // The owner cache may hold this name as unknown (a call just before
        // the create): forgotten, so the creator's next call finds it here
        // at once rather than `NOT_FOUND` for the rest of the entry's TTL.
        self.cache.invalidate(db).await;
        response
    }

    /// [`Self::to_candidates`]' sending: the candidates, then those a
    /// refusing non-candidate names, once.
    async fn to_candidates_once_hinted(&self, call: &Call, db: &str) -> Result<Response<Body>, Status> {
        let response = self.to_any(call, &self.candidate_hops(db)).await?;
        let hinted: Vec<Hop> = match Status::from_header_map(response.headers())
            .as_ref()
            .and_then(not_owner::from_status)
        {
            Some(hint) if hint.retryable && hint.owner_id.is_empty() => hint
                .candidates
                .iter()
                .map(|candidate| Hop {
                    endpoint: candidate.endpoint.clone(),
                    lease_version: None,
                })
                .collect(),
            _ => return Ok(response),
        };
        if hinted.is_empty() {
            return Ok(response);
        }
        self.metrics.not_owner_retries.fetch_add(1, Ordering::Relaxed);
        self.to_any(call, &hinted).await
    }

    /// Every member, starting at a rotating offset.
    pub(super) fn any_hops(&self) -> Vec<Hop> {
        let members = self.members.get();
        if members.is_empty() {
            return Vec::new();
        }
        let start = self.next_any.fetch_add(1, Ordering::Relaxed) % members.len();
        let hops: Vec<Hop> = members
            .iter()
            .cycle()
            .skip(start)
            .take(members.len())
            .map(|member| Hop {
                endpoint: member.endpoint.clone(),
                lease_version: None,
            })
            .collect();
        self.suspects.order(hops, |hop: &Hop| hop.endpoint.as_str())
    }

    /// Tries `hops` in order, moving on only after a proven connect failure
    /// or a candidate's refusal for lacking the database's key.
    pub(super) async fn to_any(&self, call: &Call, hops: &[Hop]) -> Result<Response<Body>, Status> {
        let mut last = String::from("no node configured");
        let mut unreachable = false;
        let mut key_refusals = KeyRefusals::default();
        for hop in hops {
            match self.send(call, hop, None, false).await {
                Ok(response) if key_refusals.note(&response) => {}
                Ok(response) => return Ok(response),
                Err(SendError::Connect(error)) => {
                    self.metrics.connect_retries.fetch_add(1, Ordering::Relaxed);
                    last = error;
                    unreachable = true;
                }
                Err(SendError::Ambiguous(error)) => {
                    self.metrics.ambiguous_failures.fetch_add(1, Ordering::Relaxed);
                    return Err(outcome::to_status(
                        call.db.as_deref().unwrap_or_default(),
                        None,
                        Cause::HopBroke,
                        &error,
                    ));
                }
                Err(SendError::Deadline) => {
                    return Err(Status::deadline_exceeded(
                        "deadline passed before the transactor answered",
                    ));
                }
            }
        }
        if !unreachable && let Some(refusal) = key_refusals.refusal() {
            return Err(refusal);
        }
        Err(Status::unavailable(format!(
            "cannot connect to any transactor: {}",
            key_refusals.and_unreachable(&last)
        )))
    }
}
