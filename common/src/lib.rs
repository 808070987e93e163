//! Shared pieces of Corium Fleet used by the transactor nodes, the ingress,
//! the CLI and the tests.
//!
//! Layout:
//! - [`metadata`] — the fleet's gRPC metadata keys and their parsing;
//! - [`not_owner`] — the one encoder/decoder of the typed `NotOwner` detail;
//! - [`placement`] — members and the deterministic candidate function;
//! - [`kind`] — the coarse error kind that tells a caller what to do.

pub mod kind;
pub mod metadata;
pub mod not_owner;
pub mod placement;
