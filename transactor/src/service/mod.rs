//! The node's gRPC services: Corium's `corium.v1` `Transactor` and `Catalog`
//! dispatched per database to its cell, the fleet's own admin service, and
//! `Requests` ("did my request commit?"), Corium's `PeerServer` (reads from
//! read replicas, [`peer_server`]).
//!
//! Every call passes the front door first ([`admit`]: who, may they, the
//! name, the owner, a place, the permit, in that order), and every status a
//! caller sees is made in [`status`].

pub mod admin;
pub(crate) mod admit;
pub mod catalog;
pub mod peer_server;
pub mod requests;
pub(crate) mod status;
pub mod subscribe;
pub mod transactor;
