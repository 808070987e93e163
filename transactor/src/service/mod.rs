//! The node's gRPC services: Corium's `corium.v1` `Transactor` and `Catalog`
//! dispatched per database to its cell, the fleet's own admin service, and
//! `Requests` ("did my request commit?"), Corium's `PeerServer` (reads from
//! read replicas, [`peer_server`]).
//!
//! What the services share is the [`node::Node`]: the host (ownership
//! state only) and the guard, the limits, the waits, the subscriptions and
//! the read replicas. Every call passes the front door first ([`admit`]: who, may they, the
//! name, the owner, a place, the permit, in that order), and every status a
//! caller sees is made in [`status`].

pub(crate) mod admin;
pub(crate) mod admit;
pub(crate) mod catalog;
pub(crate) mod forward;
pub(crate) mod node;
pub(crate) mod peer_server;
pub(crate) mod refused;
pub(crate) mod relay;
pub(crate) mod requests;
pub(crate) mod status;
pub(crate) mod subscribe;
pub(crate) mod transactor;

/// Largest gRPC message sent, and accepted on the node-to-node services
/// (Corium's transaction batches are bounded well below this); client
/// requests are held to `--max-request-bytes` (`Config::max_request_bytes`).
pub(crate) const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Default deadline of a call that arrives without `grpc-timeout`.
pub(crate) const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_mins(1);
