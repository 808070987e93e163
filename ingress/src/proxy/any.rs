//! Calls that need no lease holder: a catalog create goes to the database's
//! top reachable candidate, the rest to any node. Only a provably unsent
//! attempt (a refused connection) moves on to the next node.

use std::sync::atomic::Ordering;

use corium_fleet_common::placement::Member;
use corium_fleet_wire::outcome::{self, Cause};
use hyper::http::Response;
use tonic::Status;

use super::Proxy;
use super::hop::{Hop, SendError};
use super::intake::Call;
use crate::body::Body;

impl Proxy {
    /// The candidates of `db` in rank order (the placement map first), nodes
    /// whose calls recently hung last.
    pub(super) fn candidate_hops(&self, db: &str) -> Vec<Hop> {
        let hops: Vec<Hop> = corium_fleet_common::placement_map::candidates(
            db,
            &self.members.get(),
            self.config.replicas,
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

    /// Tries `hops` in order, moving on only after a proven connect failure.
    pub(super) async fn to_any(&self, call: &Call, hops: &[Hop]) -> Result<Response<Body>, Status> {
        let mut last = String::from("no node configured");
        for hop in hops {
            match self.send(call, hop, None, false).await {
                Ok(response) => return Ok(response),
                Err(SendError::Connect(error)) => {
                    self.metrics.connect_retries.fetch_add(1, Ordering::Relaxed);
                    last = error;
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
        Err(Status::unavailable(format!(
            "cannot connect to any transactor: {last}"
        )))
    }
}
