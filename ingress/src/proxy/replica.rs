//! `corium.v1.PeerServer` reads (`Query`, `Pull`, `Datoms`, `TxRange`,
//! `DbStats`) go to a read replica of the database: its candidates in rank
//! order, the owner's node last so reads stay off the node that writes.
//! The first candidate keeps a database's reads (its replica is warm) until
//! this ingress has [`SPREAD_AT`] calls open there; then they spill to the
//! next, so a hot database spreads over its candidates with bounded load.
//!
//! A read changes nothing, so any attempt that did not answer — a refused
//! connection, a broken hop, a replica's `UNAVAILABLE` (behind the basis
//! asked for, between owners; always before any message) — goes to the next
//! replica, and a round in which every replica refused is tried again after
//! the hint, within the call's deadline.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hyper::http::Response;
use tonic::Status;

use super::Proxy;
use super::hop::{Hop, SendError};
use super::intake::Call;
use crate::body::Body;
use crate::owner_cache::Resolution;

/// Open calls at one node (from this ingress) at which a database's reads
/// start spilling to its next candidate.
pub(super) const SPREAD_AT: usize = 8;

/// Rounds over the replicas before a read is given up (each after the
/// refusals' hint), within its deadline.
const ROUNDS: usize = 4;

/// The wait between rounds when a refusal carries no hint.
const DEFAULT_PAUSE: Duration = Duration::from_millis(100);

/// `hops` reordered for a read: `owner` (if among them) last; the first hop
/// with fewer than [`SPREAD_AT`] open calls (`open`) first, the rest in order.
fn read_order(mut hops: Vec<Hop>, owner: Option<&str>, open: impl Fn(&str) -> usize) -> Vec<Hop> {
    if let Some(owner) = owner
        && let Some(at) = hops.iter().position(|hop| hop.endpoint == owner)
    {
        let owner = hops.remove(at);
        hops.push(owner);
    }
    if let Some(at) = hops.iter().position(|hop| open(&hop.endpoint) < SPREAD_AT) {
        hops[..=at].rotate_right(1);
    }
    hops
}

impl Proxy {
    /// Every live member in `db`'s rendezvous order (the placement map
    /// first), nodes whose calls recently hung last.
    fn read_candidates(&self, db: &str) -> Vec<Hop> {
        let members = self.members.get();
        let hops: Vec<Hop> =
            corium_fleet_common::placement_map::candidates(db, &members, members.len(), &self.map.get())
                .into_iter()
                .map(|member| Hop {
                    endpoint: member.endpoint.clone(),
                    lease_version: None,
                })
                .collect();
        self.suspects.order(hops, |hop: &Hop| hop.endpoint.as_str())
    }

    /// Sends a `PeerServer` read of `db` to its read replicas.
    pub(super) async fn to_replicas(&self, call: &Call, db: &str) -> Result<Response<Body>, Status> {
        let home = corium_fleet_common::names::home(db);
        let owner = match self.cache.resolve(home).await {
            Ok(Resolution::Owned(owner)) => Some(owner.endpoint),
            _ => None,
        };
        let hops = read_order(self.read_candidates(home), owner.as_deref(), |endpoint| {
            self.node_limits.open(endpoint)
        });
        let mut refused: Option<Response<Body>> = None;
        let mut last_error = String::from("no node configured");
        let mut attempts = 0u64;
        for round in 0..ROUNDS {
            let mut pause = DEFAULT_PAUSE;
            for hop in &hops {
                if attempts > 0 {
                    self.metrics.read_retries.fetch_add(1, Ordering::Relaxed);
                }
                attempts += 1;
                match self.send(call, hop, None, false).await {
                    Ok(response) => {
                        let status = Status::from_header_map(response.headers());
                        match status {
                            Some(status) if status.code() == tonic::Code::Unavailable => {
                                pause = corium_fleet_wire::overload::retry_after(&status)
                                    .unwrap_or(DEFAULT_PAUSE);
                                refused = Some(response);
                            }
                            _ => {
                                let counter = if owner.as_deref() == Some(hop.endpoint.as_str()) {
                                    &self.metrics.reads_to_owner
                                } else {
                                    &self.metrics.reads_to_replica
                                };
                                counter.fetch_add(1, Ordering::Relaxed);
                                return Ok(response);
                            }
                        }
                    }
                    Err(SendError::Connect(error) | SendError::Ambiguous(error)) => last_error = error,
                    Err(SendError::Deadline) => {
                        return Err(Status::deadline_exceeded(
                            "deadline passed before a read replica answered",
                        ));
                    }
                }
            }
            let left = call.deadline.saturating_duration_since(Instant::now());
            if round + 1 == ROUNDS || left <= pause {
                break;
            }
            tokio::time::sleep(pause).await;
        }
        match refused {
            Some(response) => Ok(response),
            None => Err(Status::unavailable(format!(
                "cannot reach a read replica of {db:?}: {last_error}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hops(endpoints: &[&str]) -> Vec<Hop> {
        endpoints
            .iter()
            .map(|endpoint| Hop {
                endpoint: (*endpoint).to_owned(),
                lease_version: None,
            })
            .collect()
    }

    fn order(hops: &[Hop]) -> Vec<&str> {
        hops.iter().map(|hop| hop.endpoint.as_str()).collect()
    }

    #[test]
    fn reads_stay_on_the_first_candidate_that_is_not_the_owner() {
        let ordered = read_order(hops(&["a", "b", "c"]), Some("a"), |_| 0);
        assert_eq!(order(&ordered), ["b", "c", "a"]);
        let ordered = read_order(hops(&["a", "b", "c"]), None, |_| 0);
        assert_eq!(order(&ordered), ["a", "b", "c"]);
        let ordered = read_order(hops(&["a", "b", "c"]), Some("elsewhere"), |_| 0);
        assert_eq!(order(&ordered), ["a", "b", "c"]);
    }

    #[test]
    fn a_busy_replica_spills_reads_to_the_next_and_the_owner_is_last_resort() {
        let busy = |endpoint: &str| if endpoint == "b" { SPREAD_AT } else { 0 };
        let ordered = read_order(hops(&["a", "b", "c"]), Some("a"), busy);
        assert_eq!(order(&ordered), ["c", "b", "a"]);
        let all_busy = |_: &str| SPREAD_AT;
        let ordered = read_order(hops(&["a", "b", "c"]), Some("a"), all_busy);
        assert_eq!(order(&ordered), ["b", "c", "a"], "all busy: rank order");
        let others_busy = |endpoint: &str| if endpoint == "a" { 0 } else { SPREAD_AT };
        let ordered = read_order(hops(&["a", "b", "c"]), Some("a"), others_busy);
        assert_eq!(
            order(&ordered),
            ["a", "b", "c"],
            "the owner answers when every other replica is busy"
        );
    }
}
