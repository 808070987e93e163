//! Owner-dependent calls: to the lease holder, and what to do when an
//! attempt does not bring an answer.
//!
//! The rules ([`Retries`], pure, unit-tested below; the table in
//! `docs/design/0009-stock-client-statuses.md`):
//!
//! - a typed `NotOwner` or a refused connection proves the request was not
//!   taken: the call is sent again (to the hinted holder, or after reading
//!   the lease again) — once for a call without a request id, as stock
//!   clients then retry on their own;
//! - a `Transact` with a request id (the client's, or one this ingress
//!   assigned) is idempotent at the owner, so an ambiguous failure (the hop
//!   broke after sending, the owner's typed "outcome unknown") is retried too,
//!   with the same id, with backoff, until the call's deadline. Once an
//!   attempt may have committed, the call never ends in an answer a stock
//!   client would resend (a `NotOwner`, a connect failure): either a later
//!   attempt brings the committed answer, or the client gets the typed
//!   "outcome unknown" naming the request id;
//! - a call that only reads (`Sync`, `Status`, …: `route::read_only`) whose
//!   hop broke is sent again, within the retry budget: it changed nothing;
//! - any other `UNAVAILABLE` a node answers (it cannot verify its lease —
//!   a zombie just woken —, storage failed before the call ran) is sent
//!   again when the call has a request id, like everything else;
//! - the owner's typed refusal of an assigned id (a database created outside
//!   the fleet) is provably pre-commit: the call is sent again without it;
//! - a call without a request id that meets a second `NotOwner` or refused
//!   connection (its database's ownership is moving: a handoff, a drain, a
//!   takeover after a crash) takes a place in the failover buffer, if one is
//!   free, and is sent again until answered or out of time
//!   (`failover_buffer.rs`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use corium_fleet_wire::not_owner;
use corium_fleet_wire::outcome;
use hyper::http::Response;
use tonic::Status;

use super::Proxy;
use super::hop::{Hop, SendError};
use super::intake::Call;
use super::key_refusals::KeyRefusals;
use crate::body::Body;
use crate::owner_cache::Resolution;
mod rules;

pub(super) use rules::{Attempt, Next, Retries};

/// Attempts per call at most (the deadline usually ends them first).
const MAX_ATTEMPTS: u32 = 64;

impl Proxy {
    /// Where an owner-dependent call on `db` goes: its lease holder, else
    /// its candidates (one activates it). `unknown_answers`: the call has
    /// an answer for a database that does not exist (`DeleteDatabase`:
    /// `deleted: false`, as stock Corium answers), which a candidate gives,
    /// rather than `NOT_FOUND` from here.
    async fn hops_for(&self, db: &str, unknown_answers: bool) -> Result<Vec<Hop>, Status> {
        let resolving = if corium_fleet_common::telemetry::exporting() {
            tracing::info_span!("resolve_owner", db)
        } else {
            tracing::Span::none()
        };
        match tracing::Instrument::instrument(self.cache.resolve(db), resolving).await {
            Ok(Resolution::Owned(owner)) => Ok(vec![Hop {
                endpoint: owner.endpoint,
                // 0: a hint without a version (a handoff target); the owner
                // then checks only that it holds the lease.
                lease_version: (owner.lease_version > 0).then_some(owner.lease_version),
            }]),
            Ok(Resolution::NoLiveOwner) => Ok(self.candidate_hops(db)),
            Ok(Resolution::Unknown) if unknown_answers => Ok(self.candidate_hops(db)),
            Ok(Resolution::Unknown) => Err(Status::not_found(format!("unknown database {db:?}"))),
            Err(error) => Err(Status::unavailable(format!("{error}; retry later"))),
        }
    }

    /// One attempt over `hops` (in order, moving on after a refused
    /// connection or a candidate's refusal for lacking the database's key).
    async fn attempt(&self, call: &Call, retries: &Retries, hops: &[Hop]) -> Attempt {
        let mut unreachable = String::from("no candidate is live");
        let mut reached_all = true;
        let mut key_refusals = KeyRefusals::default();
        for hop in hops {
            // A call with a request id is read whole, so a break after the
            // response headers is retried like any other.
            match self
                .send(call, hop, retries.id.as_ref(), retries.idempotent())
                .await
            {
                // A candidate without the database's key: the next one.
                Ok(response) if key_refusals.note(&response) => {}
                Ok(response) => return Self::classify(response, retries),
                Err(SendError::Connect(error)) => {
                    unreachable = error;
                    reached_all = false;
                }
                Err(SendError::Ambiguous(error)) => {
                    self.metrics.ambiguous_failures.fetch_add(1, Ordering::Relaxed);
                    return Attempt::Broke(error);
                }
                Err(SendError::Deadline) => return Attempt::Late,
            }
        }
        if reached_all && let Some(refusal) = key_refusals.refusal() {
            return Attempt::Answer(crate::body::status_response(&refusal));
        }
        Attempt::Unreachable(key_refusals.and_unreachable(&unreachable))
    }

    /// Reads a node's answer: typed `NotOwner`, typed refusal of an assigned
    /// id, typed unknown outcome for this call's id, or an answer.
    fn classify(response: Response<Body>, retries: &Retries) -> Attempt {
        let Some(status) = Status::from_header_map(response.headers()) else {
            return Attempt::Answer(response);
        };
        if let Some(hint) = not_owner::from_status(&status) {
            return Attempt::NotOwner(response, hint);
        }
        if retries.id.as_ref().is_some_and(|id| id.assigned) && outcome::is_unsupported(&status) {
            return Attempt::IdUnsupported;
        }
        let ours = outcome::from_status(&status).is_some_and(|detail| {
            retries
                .id
                .as_ref()
                .is_some_and(|id| !detail.request_id.is_empty() && detail.request_id == id.text)
        });
        if ours {
            Attempt::OwnerUnknown(response)
        } else if let Some(hint) = corium_fleet_wire::overload::retry_after(&status)
            .filter(|_| status.code() == tonic::Code::ResourceExhausted)
        {
            Attempt::Shed(response, hint)
        } else if retries.idempotent()
            && matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            )
        {
            // The node ran out of the call's deadline (its commit may run
            // on): the call's outcome is unknown and its time is up.
            Attempt::Late
        } else if status.code() == tonic::Code::Unavailable {
            Attempt::NodeUnavailable(response)
        } else {
            Attempt::Answer(response)
        }
    }

    /// Sends an owner-dependent call to `db`'s lease holder under the rules
    /// in the module docs.
    pub(super) async fn to_owner(&self, call: &Call, db: &str) -> Result<Response<Body>, Status> {
        let mut retries = Retries {
            id: call.request_id.clone(),
            db: db.to_owned(),
            attempts: 0,
            unknown: None,
            budget_left: true,
            held: false,
            read_only: crate::route::read_only(call.parts.uri.path()),
        };
        let unknown_answers = call.parts.uri.path() == crate::route::DELETE_DATABASE;
        // The call's place in the failover buffer, once it takes one.
        let mut place = None;
        let mut hinted: Option<Vec<Hop>> = None;
        loop {
            retries.attempts += 1;
            let attempt = match hinted.take() {
                Some(hops) => self.attempt(call, &retries, &hops).await,
                None => match self.hops_for(db, unknown_answers).await {
                    Ok(hops) => self.attempt(call, &retries, &hops).await,
                    Err(status) => Attempt::Unresolved(status),
                },
            };
            match &attempt {
                Attempt::NotOwner(_, hint) => self.cache.learn(hint).await,
                Attempt::Late => {
                    // The holder did not answer in time (frozen, stalled):
                    // forget it, so the next call reads the lease again and,
                    // once it lapsed, goes to the candidates (where the node
                    // is now tried last).
                    self.cache.invalidate(db).await;
                }
                Attempt::IdUnsupported => {
                    self.metrics
                        .request_ids_unsupported
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        db,
                        "the database takes no request ids; sending the transaction without one"
                    );
                }
                _ => {}
            }
            let ambiguous = matches!(attempt, Attempt::Broke(_) | Attempt::OwnerUnknown(_));
            let costly = attempt.cost_work();
            retries.budget_left = !costly || self.retry_budget.available();
            if !retries.budget_left {
                self.metrics
                    .retry_budget_exhausted
                    .fetch_add(1, Ordering::Relaxed);
            }
            if place.is_none() && retries.would_give_up(&attempt) {
                place = self.failover.hold(db, call.body.len());
                retries.held = place.is_some();
            }
            match retries.next(attempt) {
                Next::Return(answer) => return answer,
                Next::Retry {
                    pause,
                    refresh,
                    hinted: hops,
                } => {
                    let out_of_time = Instant::now() + pause >= call.deadline;
                    if out_of_time || retries.attempts >= MAX_ATTEMPTS {
                        let status = retries.unknown_status().unwrap_or_else(|| {
                            Status::unavailable(format!(
                                "no lease holder of {db:?} answered within the deadline; retry"
                            ))
                        });
                        return Err(status);
                    }
                    if costly {
                        // Checked above; a race with another call only
                        // lets this one through.
                        let _ = self.retry_budget.withdraw();
                    }
                    if ambiguous {
                        self.metrics.ambiguous_retries.fetch_add(1, Ordering::Relaxed);
                        if retries.read_only {
                            tracing::info!(db, "the hop broke under a read; sending it again");
                        } else {
                            tracing::info!(
                                db,
                                request_id = retries.id.as_ref().map(|id| id.text.as_str()),
                                "outcome unknown; retrying with the same request id"
                            );
                        }
                    } else {
                        self.metrics.not_owner_retries.fetch_add(1, Ordering::Relaxed);
                    }
                    if refresh {
                        self.cache.invalidate(db).await;
                    }
                    hinted = hops;
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}
