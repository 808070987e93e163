//! "Not here: this node lacks the key": the typed refusal of a node asked to
//! open, create or take over an encrypted database whose key it was not
//! started with.
//!
//! `FAILED_PRECONDITION` with a [`KeyMissing`] detail, answered before the
//! node took the lease or wrote anything (Corium resolves keys before it
//! fences). Stock Corium clients give up on `FAILED_PRECONDITION` (they
//! resend only what corium-peer's `retry_is_safe` recognises), which is right
//! for a caller: the answer does not change until an operator gives a node
//! the key. The ingress reads the detail and tries the database's next
//! candidate instead; only when none holds the key does the refusal reach
//! the client, naming the key and the nodes that lack it.

use corium_fleet_proto::KEY_MISSING_TYPE_URL;
pub use corium_fleet_proto::fleet::KeyMissing;

/// The refusal of `node_id`, which lacks `key_id`, to serve `database`.
#[must_use]
pub fn refused(database: &str, node_id: &str, key_id: &str) -> tonic::Status {
    let message = format!(
        "database {database:?} is encrypted under key {key_id}, which node {node_id} does not hold \
         (start the node with --storage-key {key_id}); nothing was done"
    );
    with_message(message, database, node_id, key_id)
}

/// The same refusal in the caller's words (the ingress's, naming every
/// candidate that refused). Words that would make a stock peer resend it (a
/// database or key named with `standby` or `deposed` in it: corium-peer
/// reads those words in a `FAILED_PRECONDITION` as "pre-commit, try again")
/// are replaced by words that name neither; the typed detail still does.
#[must_use]
pub fn with_message(message: String, database: &str, node_id: &str, key_id: &str) -> tonic::Status {
    let message = if crate::outcome::stock_peer_resends(tonic::Code::FailedPrecondition, &message) {
        "this database is encrypted under a key the answering node does not hold (the key and the \
         node are named in the KeyMissing detail, the key by `corium-fleet where` too); nothing was done"
            .to_owned()
    } else {
        message
    };
    let detail = KeyMissing {
        database: database.to_owned(),
        node_id: node_id.to_owned(),
        key_id: key_id.to_owned(),
    };
    crate::detail::to_status(
        tonic::Code::FailedPrecondition,
        message,
        KEY_MISSING_TYPE_URL,
        &detail,
    )
}

/// The detail of a status that is this refusal.
#[must_use]
pub fn from_status(status: &tonic::Status) -> Option<KeyMissing> {
    crate::detail::from_status(status, tonic::Code::FailedPrecondition, KEY_MISSING_TYPE_URL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_the_key_and_the_node_and_reads_back() {
        let status = refused("payroll", "node-2", "file:/keys/a");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("file:/keys/a"), "{}", status.message());
        assert!(status.message().contains("node-2"), "{}", status.message());
        let detail = from_status(&status).expect("typed");
        assert_eq!(
            (
                detail.database.as_str(),
                detail.node_id.as_str(),
                detail.key_id.as_str()
            ),
            ("payroll", "node-2", "file:/keys/a")
        );
    }

    #[test]
    fn a_stock_peer_never_resends_it_whatever_the_names() {
        for (db, node, key) in [
            ("payroll", "node-2", "file:/keys/a"),
            ("standby-orders", "node-2", "file:/keys/a"),
            ("payroll", "standby-node", "file:/keys/a"),
            ("x", "node-2", "file:/k/deposed"),
        ] {
            let status = refused(db, node, key);
            assert!(
                !crate::outcome::stock_peer_resends(status.code(), status.message()),
                "{db}/{node}/{key}: {}",
                status.message()
            );
            assert_eq!(from_status(&status).expect("typed").key_id, key);
        }
    }

    #[test]
    fn other_failed_preconditions_are_not_this_refusal() {
        assert!(from_status(&tonic::Status::failed_precondition("file:/keys/a")).is_none());
        let unsupported = crate::outcome::unsupported_status("payroll", "created elsewhere");
        assert!(from_status(&unsupported).is_none());
    }
}
