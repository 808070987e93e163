//! Candidates that lack an encrypted database's key: a node started without
//! the key a database is encrypted under answers the typed `KeyMissing`
//! refusal before it took the lease or wrote anything
//! (`corium_fleet_wire::key_missing`), so the call moves on to the next
//! candidate, as after a refused connection. When no candidate served, the
//! client gets one refusal naming the key and every node that lacks it
//! (`FAILED_PRECONDITION`, which stock clients do not resend: only an
//! operator can change the answer) — unless a candidate could not be
//! reached, which may hold the key: then the call is unsent and retried like
//! any unreachable one.

use hyper::http::Response;
use tonic::Status;

use crate::body::Body;

/// The key refusals one attempt over a database's candidates met.
#[derive(Debug, Default)]
pub(super) struct KeyRefusals {
    /// The database and key the refusals name (the first one's).
    key: Option<(String, String)>,
    /// The refusing nodes, in the order asked.
    nodes: Vec<String>,
}

impl KeyRefusals {
    /// Whether `response` is a node's key refusal; if so it is counted here
    /// and the call should move on to the next candidate.
    pub(super) fn note(&mut self, response: &Response<Body>) -> bool {
        let Some(detail) = Status::from_header_map(response.headers())
            .as_ref()
            .and_then(corium_fleet_wire::key_missing::from_status)
        else {
            return false;
        };
        self.key.get_or_insert((detail.database, detail.key_id));
        self.nodes.push(detail.node_id);
        true
    }

    /// The answer when no candidate served and every one was reached.
    pub(super) fn refusal(&self) -> Option<Status> {
        let (db, key_id) = self.key.as_ref()?;
        let nodes = self.nodes.join(", ");
        let message = format!(
            "database {db:?} is encrypted under key {key_id}, which none of its reachable candidates holds \
             ({nodes} lack it): start a candidate with --storage-key {key_id}; nothing was done"
        );
        Some(corium_fleet_wire::key_missing::with_message(
            message,
            db,
            self.nodes.first().map_or("", String::as_str),
            key_id,
        ))
    }

    /// What to add to an "unreachable" message when some candidates were
    /// reached and lack the key.
    pub(super) fn and_unreachable(&self, unreachable: &str) -> String {
        match &self.key {
            Some((_, key_id)) => format!(
                "{unreachable}; the reachable candidates ({}) lack the database's key {key_id}",
                self.nodes.join(", ")
            ),
            None => unreachable.to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::status_response;

    #[test]
    fn key_refusals_are_gathered_and_other_answers_pass() {
        let mut refusals = KeyRefusals::default();
        assert!(!refusals.note(&status_response(&Status::failed_precondition("file:/k"))));
        assert!(!refusals.note(&status_response(&Status::unavailable("x"))));
        assert!(refusals.refusal().is_none());
        for node in ["node-0", "node-2"] {
            let refused = corium_fleet_wire::key_missing::refused("payroll", node, "file:/k");
            assert!(refusals.note(&status_response(&refused)));
        }
        let status = refusals.refusal().expect("a refusal");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        for part in ["payroll", "file:/k", "node-0, node-2"] {
            assert!(status.message().contains(part), "{part}: {}", status.message());
        }
        let detail = corium_fleet_wire::key_missing::from_status(&status).expect("still typed");
        assert_eq!(detail.key_id, "file:/k");
        let unreachable = refusals.and_unreachable("node-1 refused the connection");
        assert!(
            unreachable.contains("node-1") && unreachable.contains("node-0, node-2"),
            "{unreachable}"
        );
    }
}
