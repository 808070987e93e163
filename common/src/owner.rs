//! Lease owners as the fleet writes them: `<node-id>/<incarnation>`, and the
//! wall clock lease expiries are compared with.

use std::time::{SystemTime, UNIX_EPOCH};

/// The node id part of a lease owner (`<node-id>/<incarnation>`); an owner
/// without an incarnation (a stock Corium transactor) is its own node id.
#[must_use]
pub fn node_of(owner: &str) -> &str {
    owner.split_once('/').map_or(owner, |(node, _)| node)
}

/// Milliseconds since the Unix epoch, the unit of lease expiries.
#[must_use]
pub fn now_unix_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_of_strips_the_incarnation() {
        assert_eq!(node_of("node-1/3f2a"), "node-1");
        assert_eq!(node_of("transactor-a"), "transactor-a");
        assert_eq!(node_of(""), "");
    }
}
