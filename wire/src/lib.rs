//! Corium Fleet's wire conventions beside the `corium.v1` protocol: what a
//! client or a server needs to speak to the fleet, with no server stack.
//!
//! Layout:
//! - [`metadata`] — the fleet's gRPC metadata keys and their parsing;
//! - [`detail`] — typed status details (`google.rpc.Status` in `grpc-status-details-bin`);
//! - [`not_owner`] — the one encoder/decoder of the typed `NotOwner` detail;
//! - [`outcome`] — the typed `OutcomeUnknown` detail (a write that may have
//!   committed) and the stock clients' resend rule it is built against;
//! - [`overload`] — `RESOURCE_EXHAUSTED` with the standard retry hint;
//! - [`key_missing`] — a node's typed refusal of an encrypted database whose
//!   key it lacks;
//! - [`kind`] — the coarse error kind that tells a caller what to do.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod detail;
pub mod key_missing;
pub mod kind;
pub mod metadata;
pub mod not_owner;
pub mod outcome;
pub mod overload;
