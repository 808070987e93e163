//! The owner path's retry rules, pure and unit-tested: what one attempt
//! came to ([`Attempt`]) and what to do next ([`Next`]), for one call's
//! state ([`Retries`]). The module docs of `owner` state them in words; the
//! table is in `docs/design/0009-stock-client-statuses.md`.

use std::time::Duration;

use corium_fleet_wire::not_owner::NotOwner;
use corium_fleet_wire::outcome::{self, Cause};
use hyper::http::Response;
use tonic::Status;

use super::super::hop::Hop;
use super::super::intake::RequestId;
use crate::body::Body;

/// The first pause between persistent retries; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(25);
/// The longest pause between persistent retries.
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// What one attempt at the owner came to.
pub(in crate::proxy) enum Attempt {
    /// An answer to pass on as it is.
    Answer(Response<Body>),
    /// A trailers-only typed `NotOwner`.
    NotOwner(Response<Body>, NotOwner),
    /// The owner refused the ingress-assigned request id; nothing committed.
    IdUnsupported,
    /// The owner's typed "outcome unknown" for this call's request id.
    OwnerUnknown(Response<Body>),
    /// Any other `UNAVAILABLE` from a node (it cannot verify its lease,
    /// storage failed before the call ran): retried when the call has a
    /// request id (which makes any resend safe), passed on otherwise.
    NodeUnavailable(Response<Body>),
    /// The node refused the call for load before doing any work
    /// (`RESOURCE_EXHAUSTED` with a retry hint): passed on, unless an
    /// earlier attempt may have committed.
    Shed(Response<Body>, Duration),
    /// Every hop refused the connection: provably not sent.
    Unreachable(String),
    /// The hop broke after the request was sent.
    Broke(String),
    /// No answer before the deadline.
    Late,
    /// The owner could not be looked up.
    Unresolved(Status),
}

/// What to do after an attempt.
pub(in crate::proxy) enum Next {
    /// End the call with this.
    Return(Result<Response<Body>, Status>),
    /// Send again: after `pause`, to `hinted` hops if given, else to the
    /// owner read afresh when `refresh`, else to the cached one.
    Retry {
        pause: Duration,
        refresh: bool,
        hinted: Option<Vec<Hop>>,
    },
}

impl Next {
    /// Send again after `pause`, to the owner read afresh from storage.
    const fn reread(pause: Duration) -> Self {
        Self::Retry {
            pause,
            refresh: true,
            hinted: None,
        }
    }
}

/// One call's retry state.
pub(in crate::proxy) struct Retries {
    /// The request id attempts carry (`None` once the owner refused an
    /// assigned one).
    pub id: Option<RequestId>,
    /// The database the call is for (named in the statuses it ends with).
    pub db: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// Set once an attempt may have committed: the typed "outcome unknown"
    /// the call ends with if no later attempt brings an answer.
    pub unknown: Option<Status>,
    /// Whether the ingress's retry budget allows a retry that costs a node
    /// work (after a break, an unknown outcome, an `UNAVAILABLE` or a load
    /// refusal); set before each decision.
    pub budget_left: bool,
    /// The call holds a place in the failover buffer: an attempt that
    /// provably did nothing (a `NotOwner`, a refused connection) is sent
    /// again until the deadline, whatever the call.
    pub held: bool,
    /// The call only reads (`route::read_only`): an attempt whose hop broke
    /// changed nothing and is sent again, within the retry budget.
    pub read_only: bool,
}

impl Attempt {
    /// Whether retrying after this attempt would repeat work a node did
    /// (and so is charged to the retry budget).
    pub(in crate::proxy) const fn cost_work(&self) -> bool {
        matches!(
            self,
            Self::OwnerUnknown(_) | Self::NodeUnavailable(_) | Self::Broke(_) | Self::Shed(..)
        )
    }
}

impl Attempt {
    /// Whether the attempt provably did nothing at any node, so holding the
    /// call and sending it again is safe for any call.
    pub(in crate::proxy) fn did_nothing(&self) -> bool {
        match self {
            Self::NotOwner(_, hint) => hint.retryable,
            Self::Unreachable(_) => true,
            _ => false,
        }
    }
}

impl Retries {
    pub(in crate::proxy) fn idempotent(&self) -> bool {
        self.id.is_some()
    }

    /// Whether the call would end now on an attempt that did nothing, were
    /// it not held (the moment to ask the failover buffer for a place).
    pub(in crate::proxy) fn would_give_up(&self, attempt: &Attempt) -> bool {
        attempt.did_nothing() && !self.held && self.attempts > 1 && !self.persistent()
    }

    /// Keep going until the deadline: the call is idempotent, or an attempt
    /// may already have committed.
    fn persistent(&self) -> bool {
        self.idempotent() || self.unknown.is_some()
    }

    fn pause(&self) -> Duration {
        let doublings = self.attempts.saturating_sub(1).min(8);
        FIRST_PAUSE.saturating_mul(1 << doublings).min(MAX_PAUSE)
    }

    /// The typed "outcome unknown" for this call, once an attempt may have
    /// committed.
    pub(in crate::proxy) fn unknown_status(&self) -> Option<Status> {
        self.unknown.clone()
    }

    /// Records that an attempt may have committed (the first reason stays)
    /// and returns the typed "outcome unknown" recorded for the call.
    fn ambiguous(&mut self, cause: Cause, reason: &str) -> Status {
        let (db, id) = (&self.db, self.id.as_ref().map(|id| id.text.as_str()));
        self.unknown
            .get_or_insert_with(|| outcome::to_status(db, id, cause, reason))
            .clone()
    }

    /// The rule for an attempt whose hop broke after the request was sent.
    fn broke(&mut self, error: &str) -> Next {
        if self.read_only {
            // A read changed nothing wherever it got to.
            if self.budget_left {
                return Next::reread(self.pause());
            }
            return Next::Return(Err(Status::unavailable(format!(
                "the connection to the owner of {:?} broke: {error}; the call only reads: retry",
                self.db
            ))));
        }
        let unknown = self.ambiguous(Cause::HopBroke, error);
        if self.idempotent() && self.budget_left {
            return Next::reread(self.pause());
        }
        Next::Return(Err(unknown))
    }

    /// The rule for `attempt` (see the module docs).
    pub(in crate::proxy) fn next(&mut self, attempt: Attempt) -> Next {
        let first = self.attempts <= 1;
        match attempt {
            Attempt::Answer(response) => Next::Return(Ok(response)),
            Attempt::NotOwner(response, hint) => {
                if !hint.retryable {
                    return Next::Return(self.unknown_status().map_or(Ok(response), Err));
                }
                if first || self.persistent() || self.held {
                    let hinted = (hint.owner_id.is_empty() && !hint.candidates.is_empty()).then(|| {
                        hint.candidates
                            .iter()
                            .map(|candidate| Hop {
                                endpoint: candidate.endpoint.clone(),
                                lease_version: None,
                            })
                            .collect()
                    });
                    let pause = if first { Duration::ZERO } else { self.pause() };
                    return Next::Retry {
                        pause,
                        refresh: false,
                        hinted,
                    };
                }
                Next::Return(Ok(response))
            }
            Attempt::IdUnsupported => {
                // Refused before any commit, by a rule of the database
                // (deterministic): no attempt under the id committed.
                self.id = None;
                self.unknown = None;
                Next::Retry {
                    pause: Duration::ZERO,
                    refresh: false,
                    hinted: None,
                }
            }
            Attempt::OwnerUnknown(response) => {
                if !self.idempotent() || !self.budget_left {
                    return Next::Return(Ok(response));
                }
                // The owner's own status (its cause, this call's id) is the
                // one to end with.
                if self.unknown.is_none() {
                    self.unknown = Status::from_header_map(response.headers());
                }
                Next::reread(self.pause())
            }
            Attempt::NodeUnavailable(response) => {
                if self.idempotent() && self.budget_left {
                    return Next::reread(self.pause());
                }
                Next::Return(self.unknown_status().map_or(Ok(response), Err))
            }
            Attempt::Shed(response, hint) => {
                // A load refusal is honoured, not multiplied: it goes back to
                // the client, unless an attempt may have committed (then the
                // call keeps its id and goes on, no sooner than the hint).
                if self.unknown.is_some() && self.idempotent() && self.budget_left {
                    return Next::Retry {
                        pause: self.pause().max(hint),
                        refresh: false,
                        hinted: None,
                    };
                }
                Next::Return(self.unknown_status().map_or(Ok(response), Err))
            }
            Attempt::Unreachable(error) => {
                if self.persistent() || self.held || first {
                    let pause = if self.persistent() || self.held {
                        self.pause()
                    } else {
                        Duration::ZERO
                    };
                    return Next::reread(pause);
                }
                Next::Return(Err(Status::unavailable(format!(
                    "cannot connect to the owner of {:?}: {error}; retry",
                    self.db
                ))))
            }
            Attempt::Broke(error) => self.broke(&error),
            Attempt::Late => {
                let message = match self.id.as_ref() {
                    Some(id) => format!(
                        "deadline passed before the lease holder answered; the outcome is unknown: \
                         resending with corium-request-id {} commits at most once",
                        id.text
                    ),
                    None => "deadline passed before the transactor answered".to_owned(),
                };
                Next::Return(Err(Status::deadline_exceeded(message)))
            }
            Attempt::Unresolved(status) => {
                if self.unknown.is_some() {
                    return Next::reread(self.pause());
                }
                Next::Return(Err(status))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::status_response;
    use corium_fleet_wire::not_owner;

    fn retries(id: Option<(&str, bool)>) -> Retries {
        Retries {
            id: id.map(|(text, assigned)| RequestId {
                text: text.to_owned(),
                assigned,
            }),
            db: "orders".into(),
            attempts: 1,
            unknown: None,
            budget_left: true,
            held: false,
            read_only: false,
        }
    }

    fn not_owner() -> (Response<Body>, NotOwner) {
        let hint = NotOwner {
            database: "orders".into(),
            owner_id: "node-2".into(),
            lease_version: 3,
            retryable: true,
            ..NotOwner::default()
        };
        (status_response(&not_owner::to_status(&hint)), hint)
    }

    fn ended(next: Next) -> Result<Response<Body>, Status> {
        match next {
            Next::Return(answer) => answer,
            Next::Retry { .. } => panic!("retried"),
        }
    }

    fn retried(next: &Next) -> bool {
        matches!(next, Next::Retry { .. })
    }

    /// The status a client would see for an ended call.
    fn seen(answer: Result<Response<Body>, Status>) -> Status {
        match answer {
            Ok(response) => Status::from_header_map(response.headers()).unwrap_or_else(|| Status::ok("")),
            Err(status) => status,
        }
    }

    #[test]
    fn without_an_id_provably_unsent_attempts_are_retried_once() {
        let mut plain = retries(None);
        let (response, hint) = not_owner();
        assert!(retried(&plain.next(Attempt::NotOwner(response, hint.clone()))));
        plain.attempts = 2;
        let (response, _) = not_owner();
        let passed_on = seen(ended(plain.next(Attempt::NotOwner(response, hint))));
        // The stock client resends a NotOwner itself: it is pre-commit.
        assert!(outcome::stock_peer_resends(passed_on.code(), passed_on.message()));
        let mut plain = retries(None);
        assert!(retried(&plain.next(Attempt::Unreachable("refused".into()))));
        plain.attempts = 2;
        let status = ended(plain.next(Attempt::Unreachable("refused".into()))).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
    }

    #[test]
    fn a_held_call_without_an_id_is_sent_again_after_attempts_that_did_nothing() {
        let mut plain = retries(None);
        plain.attempts = 2;
        let (response, hint) = not_owner();
        let attempt = Attempt::NotOwner(response, hint.clone());
        assert!(
            plain.would_give_up(&attempt),
            "a second NotOwner: ask for a place"
        );
        plain.held = true;
        assert!(!plain.would_give_up(&attempt), "asked once");
        assert!(retried(&plain.next(attempt)));
        plain.attempts = 7;
        assert!(retried(&plain.next(Attempt::Unreachable("refused".into()))));
        // Holding never covers an attempt that may have done something.
        let broke = Attempt::Broke("reset".into());
        assert!(!broke.did_nothing());
        assert!(ended(plain.next(broke)).is_err());
        // Nor a NotOwner that says retrying is pointless.
        let (response, mut final_hint) = not_owner();
        final_hint.retryable = false;
        assert!(!Attempt::NotOwner(response, final_hint).did_nothing());
        // A call with an id is persistent already: no place needed.
        let mut with_id = retries(Some(("00000000-0000-4000-8000-000000000000", true)));
        with_id.attempts = 2;
        assert!(!with_id.would_give_up(&Attempt::Unreachable("refused".into())));
    }

    #[test]
    fn a_read_whose_hop_broke_is_sent_again_within_the_budget() {
        let mut read = retries(None);
        read.read_only = true;
        assert!(
            matches!(
                read.next(Attempt::Broke("reset".into())),
                Next::Retry { refresh: true, .. }
            ),
            "a read changed nothing: sent again, to the lease read afresh"
        );
        assert!(read.unknown_status().is_none(), "no outcome to be unsure of");
        read.budget_left = false;
        let status = ended(read.next(Attempt::Broke("reset".into()))).unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("only reads"), "{}", status.message());
        // A write without an id is not: its outcome is unknown.
        let mut write = retries(None);
        assert!(ended(write.next(Attempt::Broke("reset".into()))).is_err());
        assert!(write.unknown_status().is_some());
    }

    #[test]
    fn without_an_id_a_broken_hop_ends_in_an_unknown_outcome_no_stock_client_resends() {
        let mut plain = retries(None);
        let status = ended(plain.next(Attempt::Broke("connection reset".into()))).unwrap_err();
        assert!(
            !outcome::stock_peer_resends(status.code(), status.message()),
            "{status:?}"
        );
        assert!(outcome::from_status(&status).is_some());
    }

    #[test]
    fn with_an_id_ambiguity_is_retried_and_never_ends_in_a_resendable_answer() {
        for assigned in [false, true] {
            let mut call = retries(Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", assigned)));
            assert!(retried(&call.next(Attempt::Broke("connection reset".into()))));
            // Everything after it that a stock client would resend keeps the
            // call going instead of ending it.
            for attempt in 2..6 {
                call.attempts = attempt;
                let (response, hint) = not_owner();
                assert!(retried(&call.next(Attempt::NotOwner(response, hint))));
                assert!(retried(&call.next(Attempt::Unreachable("refused".into()))));
                assert!(retried(&call.next(Attempt::Unresolved(Status::unavailable(
                    "storage: connect refused"
                )))));
            }
            let status = call.unknown_status().expect("ambiguous");
            assert!(
                !outcome::stock_peer_resends(status.code(), status.message()),
                "{status:?}"
            );
            let detail = outcome::from_status(&status).unwrap();
            assert_eq!(detail.request_id, "0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10");
            // The deadline ends it with a status no stock client resends.
            let late = ended(call.next(Attempt::Late)).unwrap_err();
            assert!(!outcome::stock_peer_resends(late.code(), late.message()));
            assert!(late.message().contains(&detail.request_id));
        }
    }

    #[test]
    fn an_owners_unknown_outcome_is_retried_only_for_this_calls_id() {
        let id = "0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10";
        let unknown = status_response(&outcome::to_status(
            "orders",
            Some(id),
            Cause::StorageFailed,
            "log append failed",
        ));
        let mut call = retries(Some((id, true)));
        assert!(retried(&call.next(Attempt::OwnerUnknown(unknown))));
        let detail = outcome::from_status(&call.unknown_status().unwrap()).unwrap();
        assert_eq!(detail.reason, "log append failed");
        assert_eq!(detail.request_id, id);
        let unknown = status_response(&outcome::to_status("orders", None, Cause::StorageFailed, "x"));
        let mut plain = retries(None);
        assert!(ended(plain.next(Attempt::OwnerUnknown(unknown))).is_ok());
    }

    #[test]
    fn a_nodes_unavailable_is_retried_only_with_an_id() {
        let unavailable = || {
            status_response(&Status::unavailable(
                "cannot verify ownership: lease expired locally",
            ))
        };
        let mut call = retries(Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", true)));
        assert!(retried(&call.next(Attempt::NodeUnavailable(unavailable()))));
        assert!(call.unknown.is_none(), "refused before it ran: not ambiguous");
        let mut plain = retries(None);
        assert!(ended(plain.next(Attempt::NodeUnavailable(unavailable()))).is_ok());
    }

    #[test]
    fn a_load_refusal_is_passed_on_unless_an_attempt_may_have_committed() {
        let shed = || {
            status_response(&corium_fleet_wire::overload::refused(
                "queue full".into(),
                Duration::from_millis(300),
            ))
        };
        // Nothing ran: the refusal goes back as it is, even with an id.
        for id in [None, Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", true))] {
            let mut call = retries(id);
            let answer = ended(call.next(Attempt::Shed(shed(), Duration::from_millis(300))));
            let status = Status::from_header_map(answer.unwrap().headers()).unwrap();
            assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        }
        // After a break the call goes on with its id, no sooner than the hint.
        let mut call = retries(Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", true)));
        assert!(retried(&call.next(Attempt::Broke("reset".into()))));
        call.attempts = 2;
        match call.next(Attempt::Shed(shed(), Duration::from_millis(300))) {
            Next::Retry { pause, .. } => assert!(pause >= Duration::from_millis(300), "{pause:?}"),
            Next::Return(_) => panic!("ended"),
        }
    }

    #[test]
    fn an_empty_retry_budget_ends_costly_retries_with_what_is_known() {
        let id = Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", true));
        // A node's UNAVAILABLE goes back as it is.
        let mut call = retries(id);
        call.budget_left = false;
        let unavailable = status_response(&Status::unavailable("cannot verify ownership"));
        assert!(ended(call.next(Attempt::NodeUnavailable(unavailable))).is_ok());
        // A break ends in the typed unknown outcome, which no stock client
        // resends.
        let mut call = retries(id);
        call.budget_left = false;
        let status = ended(call.next(Attempt::Broke("reset".into()))).unwrap_err();
        assert!(outcome::from_status(&status).is_some(), "{status:?}");
        assert!(!outcome::stock_peer_resends(status.code(), status.message()));
        // Routing is not charged: a NotOwner redirect still happens.
        let mut call = retries(id);
        call.budget_left = false;
        let (response, hint) = not_owner();
        assert!(retried(&call.next(Attempt::NotOwner(response, hint))));
    }

    #[test]
    fn a_refused_assigned_id_is_dropped_and_the_call_sent_again() {
        let mut call = retries(Some(("0b7c3a52-1c1b-4a43-9a56-6d0c5a0e7f10", true)));
        assert!(retried(&call.next(Attempt::IdUnsupported)));
        assert!(call.id.is_none());
        // Without an id, a broken hop now ends the call.
        assert!(ended(call.next(Attempt::Broke("reset".into()))).is_err());
    }

    #[test]
    fn pauses_double_up_to_the_cap() {
        let mut call = retries(Some(("x", true)));
        let pauses: Vec<Duration> = (1..10)
            .map(|attempt| {
                call.attempts = attempt;
                call.pause()
            })
            .collect();
        assert_eq!(pauses[0], FIRST_PAUSE);
        assert_eq!(pauses[1], FIRST_PAUSE * 2);
        assert!(pauses.windows(2).all(|pair| pair[1] >= pair[0]));
        assert_eq!(*pauses.last().unwrap(), MAX_PAUSE);
    }
}
