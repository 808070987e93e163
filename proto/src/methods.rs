//! Every gRPC method either tier serves, read from the service descriptors
//! the generated code was built from (the fleet's `.proto` files and
//! Corium's `corium.proto`) by `build.rs`, which writes the table: its path
//! and its kind (unary or streaming). Metrics label calls by these, so the
//! list is never kept by hand and a method Corium adds is labelled the day
//! the pin moves.

use std::collections::HashMap;
use std::sync::OnceLock;

/// How a method's messages flow, from its descriptor's streaming flags.
#[derive(Clone, Copy, Debug, Eq, Hash, PartialEq)]
pub enum RpcKind {
    /// One request, one response.
    Unary,
    /// A stream of requests, one response.
    ClientStreaming,
    /// One request, a stream of responses (`Subscribe`, `Query`).
    ServerStreaming,
    /// Streams both ways.
    BidiStreaming,
}

impl RpcKind {
    /// The kind's label value: `unary`, `client_stream`, `server_stream`,
    /// `bidi_stream`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::ClientStreaming => "client_stream",
            Self::ServerStreaming => "server_stream",
            Self::BidiStreaming => "bidi_stream",
        }
    }
}

/// One method: `/package.Service/Method` and its kind.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
pub struct Method {
    /// The HTTP/2 path a call to it carries.
    pub path: &'static str,
    /// Unary or streaming.
    pub kind: RpcKind,
}

include!(concat!(env!("OUT_DIR"), "/method_table.rs"));

/// Every method of every service in Corium's and the fleet's protocol, in
/// the order the files declare them.
#[must_use]
pub const fn all() -> &'static [Method] {
    METHODS
}

/// The position in [`all`] of the method at `path`, if either protocol
/// declares one there (a hashed lookup: metrics do it for every call).
#[must_use]
pub fn index(path: &str) -> Option<usize> {
    static BY_PATH: OnceLock<HashMap<&'static str, usize>> = OnceLock::new();
    BY_PATH
        .get_or_init(|| {
            METHODS
                .iter()
                .enumerate()
                .map(|(at, method)| (method.path, at))
                .collect()
        })
        .get(path)
        .copied()
}

/// The method at `path`, if either protocol declares one there.
#[must_use]
pub fn find(path: &str) -> Option<&'static Method> {
    index(path).and_then(|at| METHODS.get(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corium_and_fleet_services_are_read_with_their_streaming_kinds() {
        let kind = |path: &str| find(path).map(|method| method.kind);
        assert_eq!(kind("/corium.v1.Transactor/Transact"), Some(RpcKind::Unary));
        assert_eq!(
            kind("/corium.v1.Transactor/Subscribe"),
            Some(RpcKind::ServerStreaming)
        );
        assert_eq!(
            kind("/corium.v1.PeerServer/Query"),
            Some(RpcKind::ServerStreaming)
        );
        assert_eq!(kind("/corium.v1.PeerServer/Pull"), Some(RpcKind::Unary));
        assert_eq!(kind("/corium.v1.Catalog/CreateDatabase"), Some(RpcKind::Unary));
        assert_eq!(kind("/corium.fleet.v1.FleetAdmin/Handoff"), Some(RpcKind::Unary));
        assert_eq!(kind("/corium.fleet.v1.Requests/Status"), Some(RpcKind::Unary));
        assert_eq!(kind("/no.such/Method"), None);
    }

    #[test]
    fn every_service_of_both_protocols_is_listed_once() {
        let paths: Vec<&str> = all().iter().map(|method| method.path).collect();
        let unique: std::collections::HashSet<&&str> = paths.iter().collect();
        assert_eq!(unique.len(), paths.len(), "{paths:?}");
        for service in [
            "corium.v1.Transactor",
            "corium.v1.Catalog",
            "corium.v1.PeerServer",
            "corium.fleet.v1.FleetAdmin",
            "corium.fleet.v1.Requests",
        ] {
            assert!(
                paths.iter().any(|path| path.starts_with(&format!("/{service}/"))),
                "{service} missing from {paths:?}"
            );
        }
    }
}
