//! What a node's answer may not tell a client: the internal endpoints and
//! zones in a typed `NotOwner`.
//!
//! A node's `NotOwner` names where the holder and the candidates listen
//! (`route_endpoint`, each candidate's `endpoint`) and their zones, for the
//! ingress to follow. When the ingress stops retrying and passes one on (a
//! call without a request id meeting a second `NotOwner` with no place in
//! the failover buffer, a create whose hinted candidates refused again),
//! those addresses would reach the client: a map of the fleet's internal
//! network for anyone who can make a call (issue 35). The client keeps what
//! it can use through this ingress — the database, the holder's node id and
//! lease version, whether to retry, the candidates' node ids and ranks, the
//! basis — and the status stays `FAILED_PRECONDITION` with "standby" in its
//! message, so stock clients still fail over (design note 0009).
//!
//! Applied once, to every answer the ingress returns (owner, candidate,
//! any-node and replica paths alike). A node decides `NotOwner` before a
//! call runs, so it is always a trailers-only answer: the status is in the
//! response headers, where this looks.

use corium_fleet_wire::not_owner;
use hyper::http::Response;

use super::header_names as names;
use crate::body::Body;

/// Strips internal endpoints and zones from `response` if it is a typed
/// `NotOwner` (anything else is left as it is).
pub(super) fn not_owner(response: &mut Response<Body>) {
    let headers = response.headers_mut();
    // The usual answer has no status detail in its headers: one lookup.
    if !headers.contains_key(&names::GRPC_STATUS_DETAILS) {
        return;
    }
    let Some(detail) = tonic::Status::from_header_map(headers)
        .as_ref()
        .and_then(not_owner::from_status)
    else {
        return;
    };
    let public = not_owner::to_status(&public(detail));
    if let Err(error) = public.add_header(headers) {
        // Not reachable with the fleet's own message; never pass the
        // original detail on if it were.
        tracing::warn!(%error, "cannot write a redacted not-owner status; dropping its detail");
        headers.remove(&names::GRPC_STATUS_DETAILS);
        headers.remove(&names::GRPC_MESSAGE);
    }
}

/// `detail` without the node's internal endpoints and zones.
fn public(mut detail: not_owner::NotOwner) -> not_owner::NotOwner {
    detail.route_endpoint.clear();
    for candidate in &mut detail.candidates {
        candidate.endpoint.clear();
        candidate.zone.clear();
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::status_response;
    use corium_fleet_wire::not_owner::{Candidate, NotOwner};

    fn internal() -> NotOwner {
        NotOwner {
            database: "orders".into(),
            owner_id: "node-2".into(),
            lease_version: 7,
            retryable: true,
            route_endpoint: "https://node-2.fleet.svc:7001".into(),
            candidates: vec![
                Candidate {
                    node_id: "node-2".into(),
                    zone: "eu-west-1b".into(),
                    endpoint: "https://node-2.fleet.svc:7001".into(),
                    rank: 0,
                    lacks_storage_key: false,
                },
                Candidate {
                    node_id: "node-3".into(),
                    zone: "eu-west-1c".into(),
                    endpoint: "https://10.1.2.3:7001".into(),
                    rank: 1,
                    lacks_storage_key: false,
                },
            ],
            last_basis_t: 42,
        }
    }

    /// Everything a client sees of a response: its headers, as text.
    fn seen(response: &Response<Body>) -> String {
        use std::fmt::Write as _;
        let mut text = String::new();
        for (name, value) in response.headers() {
            let _ = writeln!(text, "{name}: {}", String::from_utf8_lossy(value.as_bytes()));
        }
        text
    }

    #[test]
    fn a_not_owner_passed_on_names_no_endpoint_and_no_zone() {
        let mut response = status_response(&not_owner::to_status(&internal()));
        not_owner(&mut response);
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("standby"), "{}", status.message());
        let detail = not_owner::from_status(&status).expect("still a typed NotOwner");
        let mut expected = internal();
        expected.route_endpoint.clear();
        for candidate in &mut expected.candidates {
            candidate.endpoint.clear();
            candidate.zone.clear();
        }
        assert_eq!(detail, expected);
        let text = format!("{} {detail:?} {}", seen(&response), status.message());
        for secret in ["node-2.fleet.svc", "10.1.2.3", "7001", "eu-west"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
    }

    #[test]
    fn other_answers_are_left_alone() {
        for status in [
            tonic::Status::unavailable("cannot verify ownership; retry later"),
            tonic::Status::failed_precondition("standby for \"x\""),
            corium_fleet_wire::outcome::to_status(
                "orders",
                Some("a-request-id"),
                corium_fleet_wire::outcome::Cause::HopBroke,
                "reset",
            ),
        ] {
            let mut response = status_response(&status);
            let before = seen(&response);
            not_owner(&mut response);
            assert_eq!(seen(&response), before);
        }
        let mut ok = Response::new(Body::default());
        not_owner(&mut ok);
        assert!(ok.headers().is_empty());
    }
}
