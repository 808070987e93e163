//! The one encoder and decoder of the typed `OutcomeUnknown` detail, and the
//! stock Corium clients' retry rule it is built against.
//!
//! A write whose outcome is unknown (its log append may have landed) must
//! never be answered with a status a stock Corium peer resends on its own:
//! corium-peer 0.1.90's `Connection::transact` silently resends a failure it
//! believes is pre-commit — `FAILED_PRECONDITION` whose message contains
//! `standby` or `deposed`, `UNAVAILABLE` whose message contains `connect` (a
//! substring test) — and a resend without a request id commits twice.
//! [`stock_peer_resends`] states that rule; every status built here is
//! `UNAVAILABLE` with a message from a fixed vocabulary that contains none of
//! those words (no database name, no error text: either could), and the
//! database, the request id and the cause ride in the typed detail.
//! `docs/design/0009-stock-client-statuses.md` has the whole table.

pub use corium_fleet_proto::fleet::OutcomeUnknown;
use corium_fleet_proto::fleet::RequestIdUnsupported;
use corium_fleet_proto::{OUTCOME_UNKNOWN_TYPE_URL, REQUEST_ID_UNSUPPORTED_TYPE_URL};

/// Why a write's outcome is unknown. Each has fixed, client-safe text.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub enum Cause {
    /// Storage failed (or did not answer) while the commit was in flight.
    StorageFailed,
    /// The write lease moved while the commit was in flight (the
    /// post-append fence found another holder).
    LeaseMoved,
    /// The hop from the ingress to the lease holder broke after the request
    /// was sent.
    HopBroke,
    /// The lease holder did not answer within the call's deadline.
    NoAnswerInTime,
}

impl Cause {
    /// The client-facing words for the cause.
    #[must_use]
    pub const fn text(self) -> &'static str {
        match self {
            Self::StorageFailed => "storage failed while the commit was in flight",
            Self::LeaseMoved => "the write lease moved while the commit was in flight",
            Self::HopBroke => "the hop to the lease holder broke after the request was sent",
            Self::NoAnswerInTime => "the lease holder did not answer before the deadline",
        }
    }
}

/// The words whose presence in a status message makes a stock Corium peer
/// resend a transaction (with the codes that go with them).
pub const STOCK_RETRY_WORDS: [&str; 3] = ["connect", "standby", "deposed"];

/// Whether corium-peer 0.1.90's `Connection::transact` resends a
/// transaction that failed with `code` and `message` on its own (its
/// `retry_is_safe`, restated as a specification of what the fleet may
/// answer): `FAILED_PRECONDITION` mentioning `standby` or `deposed`, or
/// `UNAVAILABLE` mentioning `connect`.
#[must_use]
pub fn stock_peer_resends(code: tonic::Code, message: &str) -> bool {
    match code {
        tonic::Code::FailedPrecondition => message.contains("standby") || message.contains("deposed"),
        tonic::Code::Unavailable => message.contains("connect"),
        _ => false,
    }
}

/// The status of a write whose outcome is unknown.
///
/// `request_id` is the id the write was sent under, if it had one: the
/// message then says how to resend it safely and how to ask whether it
/// committed.
#[must_use]
pub fn to_status(database: &str, request_id: Option<&str>, cause: Cause, reason: &str) -> tonic::Status {
    let advice = match request_id {
        Some(id) => format!(
            "resending it with corium-request-id {id} commits it at most once, and \
             `corium-fleet request-status DATABASE {id}` tells whether it did"
        ),
        None => "check the database before sending a write again".to_owned(),
    };
    let message = format!(
        "the outcome of this call is unknown: {}; it may or may not have taken effect. {advice}",
        cause.text()
    );
    let detail = OutcomeUnknown {
        database: database.to_owned(),
        request_id: request_id.unwrap_or_default().to_owned(),
        reason: reason.to_owned(),
    };
    crate::detail::to_status(
        tonic::Code::Unavailable,
        message,
        OUTCOME_UNKNOWN_TYPE_URL,
        &detail,
    )
}

/// Reads the typed detail back from a status, if it carries one.
#[must_use]
pub fn from_status(status: &tonic::Status) -> Option<OutcomeUnknown> {
    crate::detail::from_status(status, tonic::Code::Unavailable, OUTCOME_UNKNOWN_TYPE_URL)
}

/// The refusal of an ingress-assigned request id on `database` (nothing was
/// committed; the ingress sends the call again without an id).
#[must_use]
pub fn unsupported_status(database: &str, reason: &str) -> tonic::Status {
    let message = format!("request ids cannot be used on this database: {reason}; nothing was committed");
    let detail = RequestIdUnsupported {
        database: database.to_owned(),
        reason: reason.to_owned(),
    };
    crate::detail::to_status(
        tonic::Code::FailedPrecondition,
        message,
        REQUEST_ID_UNSUPPORTED_TYPE_URL,
        &detail,
    )
}

/// Whether a status is the refusal of an ingress-assigned request id.
#[must_use]
pub fn is_unsupported(status: &tonic::Status) -> bool {
    crate::detail::from_status::<RequestIdUnsupported>(
        status,
        tonic::Code::FailedPrecondition,
        REQUEST_ID_UNSUPPORTED_TYPE_URL,
    )
    .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CAUSES: [Cause; 4] = [
        Cause::StorageFailed,
        Cause::LeaseMoved,
        Cause::HopBroke,
        Cause::NoAnswerInTime,
    ];

    /// The status as a client decodes it from the trailers.
    fn over_the_wire(status: &tonic::Status) -> tonic::Status {
        let response = status.clone().into_http::<tonic::body::Body>();
        tonic::Status::from_header_map(response.headers()).expect("a status in the headers")
    }

    #[test]
    fn the_stock_rule_matches_coriums_words() {
        assert!(stock_peer_resends(
            tonic::Code::FailedPrecondition,
            "standby for \"a\": lease held by n1"
        ));
        assert!(stock_peer_resends(
            tonic::Code::FailedPrecondition,
            "deposed: write lease for \"a\" is held elsewhere"
        ));
        assert!(stock_peer_resends(tonic::Code::Unavailable, "connection lost"));
        assert!(!stock_peer_resends(tonic::Code::Unavailable, "Connection reset"));
        assert!(!stock_peer_resends(tonic::Code::Internal, "deposed"));
        assert!(!stock_peer_resends(tonic::Code::DeadlineExceeded, "connect"));
    }

    proptest! {
        /// Whatever the database, id and cause text, the answer is one a
        /// stock peer surfaces, and the detail survives the wire.
        #[test]
        fn unknown_outcomes_are_never_resent_by_stock_peers(
            database in ".{0,40}",
            id in proptest::option::of("[0-9a-f-]{36}"),
            cause in 0usize..4,
            reason in ".{0,80}",
        ) {
            let status = over_the_wire(&to_status(&database, id.as_deref(), CAUSES[cause], &reason));
            prop_assert_eq!(status.code(), tonic::Code::Unavailable);
            prop_assert!(!stock_peer_resends(status.code(), status.message()), "{}", status.message());
            for word in STOCK_RETRY_WORDS {
                prop_assert!(!status.message().contains(word), "{}", status.message());
            }
            let detail = from_status(&status).expect("typed detail");
            prop_assert_eq!(detail.database, database);
            prop_assert_eq!(detail.request_id, id.unwrap_or_default());
            prop_assert_eq!(detail.reason, reason);
        }
    }

    #[test]
    fn other_statuses_carry_no_outcome() {
        assert!(from_status(&tonic::Status::unavailable("x")).is_none());
        let not_owner = crate::not_owner::to_status(&crate::not_owner::NotOwner {
            database: "d".into(),
            ..crate::not_owner::NotOwner::default()
        });
        assert!(from_status(&not_owner).is_none());
    }
}
