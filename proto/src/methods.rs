//! Every gRPC method either tier serves, read from the service descriptors
//! the generated code was built from (the fleet's `.proto` files and
//! Corium's `corium.proto`; `build.rs`): its path and its kind (unary or
//! streaming). Metrics label calls by these, so the list is never kept by
//! hand and a method Corium adds is labelled the day the pin moves.

use std::sync::OnceLock;

use prost::Message as _;

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

    const fn of(client_streaming: bool, server_streaming: bool) -> Self {
        match (client_streaming, server_streaming) {
            (false, false) => Self::Unary,
            (true, false) => Self::ClientStreaming,
            (false, true) => Self::ServerStreaming,
            (true, true) => Self::BidiStreaming,
        }
    }
}

/// One method: `/package.Service/Method` and its kind.
#[derive(Clone, Debug, Eq, PartialEq)]
pub struct Method {
    /// The HTTP/2 path a call to it carries.
    pub path: String,
    /// Unary or streaming.
    pub kind: RpcKind,
}

/// The descriptor sets `build.rs` wrote.
const DESCRIPTOR_SETS: [&[u8]; 2] = [
    include_bytes!(concat!(env!("OUT_DIR"), "/corium_descriptors.bin")),
    include_bytes!(concat!(env!("OUT_DIR"), "/fleet_descriptors.bin")),
];

/// Every method of every service in Corium's and the fleet's protocol, in
/// the order the files declare them.
#[must_use]
pub fn all() -> &'static [Method] {
    static METHODS: OnceLock<Vec<Method>> = OnceLock::new();
    METHODS.get_or_init(|| {
        DESCRIPTOR_SETS
            .iter()
            .flat_map(|bytes| methods_of(bytes))
            .collect()
    })
}

/// The methods `bytes` (an encoded `FileDescriptorSet`) declares; none if it
/// cannot be decoded (it was written by this crate's build, so it can).
fn methods_of(bytes: &[u8]) -> Vec<Method> {
    let Ok(set) = prost_types::FileDescriptorSet::decode(bytes) else {
        return Vec::new();
    };
    let mut methods = Vec::new();
    for file in &set.file {
        let package = file.package();
        for service in &file.service {
            for method in &service.method {
                let service_name = if package.is_empty() {
                    service.name().to_owned()
                } else {
                    format!("{package}.{}", service.name())
                };
                methods.push(Method {
                    path: format!("/{service_name}/{}", method.name()),
                    kind: RpcKind::of(method.client_streaming(), method.server_streaming()),
                });
            }
        }
    }
    methods
}

/// The method at `path`, if either protocol declares one there.
#[must_use]
pub fn find(path: &str) -> Option<&'static Method> {
    all().iter().find(|method| method.path == path)
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
        let paths: Vec<&str> = all().iter().map(|method| method.path.as_str()).collect();
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
