//! The one encoder and decoder of the typed `NotOwner` detail.
//!
//! A `NotOwner` answer is a trailers-only `FAILED_PRECONDITION` status whose
//! message contains the word `standby` (so stock Corium peers, which match on
//! that word, still fail over) and whose `grpc-status-details-bin` carries a
//! `google.rpc.Status` with one `Any` holding a [`NotOwner`]. Fleet callers
//! decide on the typed detail, never on the text.

use corium_fleet_proto::NOT_OWNER_TYPE_URL;
pub use corium_fleet_proto::fleet::{Candidate, NotOwner};

use crate::kind::ErrorKind;

/// Builds the status a node answers when it is not the lease holder.
#[must_use]
pub fn to_status(detail: &NotOwner) -> tonic::Status {
    let owner = if detail.owner_id.is_empty() {
        "no live owner".to_owned()
    } else {
        format!(
            "lease held by {} (version {})",
            detail.owner_id, detail.lease_version
        )
    };
    let message = format!(
        "standby for {:?}: this node does not hold the write lease; {owner}",
        detail.database
    );
    crate::detail::to_status(
        tonic::Code::FailedPrecondition,
        message,
        NOT_OWNER_TYPE_URL,
        detail,
    )
}

/// Reads the typed detail back from a status, if it carries one.
/// Returns `None` for any other status, including a `FAILED_PRECONDITION`
/// whose text mentions `standby` but has no typed detail.
#[must_use]
pub fn from_status(status: &tonic::Status) -> Option<NotOwner> {
    crate::detail::from_status(status, tonic::Code::FailedPrecondition, NOT_OWNER_TYPE_URL)
}

/// What a caller should do with a `NotOwner`.
#[must_use]
pub fn kind(detail: &NotOwner) -> ErrorKind {
    match (
        detail.retryable,
        detail.route_endpoint.is_empty() && detail.candidates.is_empty(),
    ) {
        (false, _) => ErrorKind::GiveUp,
        (true, false) => ErrorKind::RetryAtHint,
        (true, true) => ErrorKind::RetryLater,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The status as a client decodes it from trailers.
    fn wire(status: &tonic::Status) -> tonic::Status {
        let mut headers = tonic::codegen::http::HeaderMap::new();
        status.add_header(&mut headers).unwrap();
        tonic::Status::from_header_map(&headers).unwrap()
    }

    fn sample() -> NotOwner {
        NotOwner {
            database: "orders".into(),
            owner_id: "node-2".into(),
            lease_version: 7,
            retryable: true,
            route_endpoint: "https://node-2.internal:7001".into(),
            candidates: vec![Candidate {
                node_id: "node-2".into(),
                zone: "b".into(),
                endpoint: "https://node-2.internal:7001".into(),
                rank: 0,
                lacks_storage_key: false,
            }],
            last_basis_t: 42,
        }
    }

    #[test]
    fn status_keeps_code_and_the_word_stock_peers_match_on() {
        let status = to_status(&sample());
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("standby"), "{}", status.message());
        assert!(status.message().contains("node-2"));
    }

    #[test]
    fn round_trips_through_http_trailers() {
        // Survive the real wire form: headers → status, as a client sees it.
        let status = to_status(&sample());
        let back = wire(&status);
        assert_eq!(from_status(&back), Some(sample()));
    }

    #[test]
    fn other_statuses_have_no_detail() {
        assert_eq!(from_status(&tonic::Status::unavailable("standby")), None);
        assert_eq!(
            from_status(&tonic::Status::failed_precondition("standby for x")),
            None
        );
    }

    #[test]
    fn kind_follows_retryability_and_hints() {
        assert_eq!(kind(&sample()), ErrorKind::RetryAtHint);
        let mut no_hint = sample();
        no_hint.route_endpoint.clear();
        no_hint.candidates.clear();
        assert_eq!(kind(&no_hint), ErrorKind::RetryLater);
        no_hint.retryable = false;
        assert_eq!(kind(&no_hint), ErrorKind::GiveUp);
    }

    proptest! {
        #[test]
        fn any_detail_round_trips(
            database in "[a-z0-9_-]{1,40}",
            owner in "[a-z0-9/-]{0,40}",
            version in any::<u64>(),
            retryable in any::<bool>(),
            endpoint in "[a-z0-9:/.]{0,60}",
            basis in any::<u64>(),
            ranks in proptest::collection::vec(("[a-z0-9-]{1,12}", "[a-z]{0,3}"), 0..5),
        ) {
            let detail = NotOwner {
                database, owner_id: owner, lease_version: version, retryable,
                route_endpoint: endpoint.clone(), last_basis_t: basis,
                candidates: ranks.into_iter().enumerate().map(|(rank, (node_id, zone))| Candidate {
                    node_id, zone, endpoint: endpoint.clone(), rank: u32::try_from(rank).unwrap(), lacks_storage_key: false,
                }).collect(),
            };
            let back = wire(&to_status(&detail));
            prop_assert_eq!(from_status(&back), Some(detail));
        }
    }
}
