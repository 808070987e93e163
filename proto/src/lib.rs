//! Corium Fleet's wire protocol: the `corium.fleet.v1` package (the typed
//! `NotOwner` and `OutcomeUnknown` status details, the fleet admin service
//! and the `Requests` service) and the
//! `google.rpc.Status` envelope that carries status details.
//!
//! Layout:
//! - `proto/corium/fleet/v1/fleet.proto` — the fleet package;
//! - `proto/google/rpc/status.proto` — the rich-error envelope;
//! - `proto/google/rpc/error_details.proto` — `RetryInfo`, the standard retry hint;
//! - [`fleet`] and [`rpc`] — the generated Rust types and tonic stubs;
//! - [`methods`] — every method of Corium's and the fleet's services, and
//!   whether it streams, read from their descriptors (`build.rs`).
//!
//! Encoding and decoding of these details on a `tonic::Status` lives in
//! `corium-fleet-wire`, the one place that does it.
//!
//! The generated modules allow every lint: their code is written by
//! `tonic-prost-build`, not by us, and its field docs come from the
//! `.proto` comments.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

/// `corium.fleet.v1`: generated messages, client and server.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod fleet {
    tonic::include_proto!("corium.fleet.v1");
}

pub mod methods;

/// `google.rpc`: the status envelope.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod rpc {
    tonic::include_proto!("google.rpc");
}

/// The `Any.type_url` of a [`rpc::RetryInfo`] detail (the standard one).
pub const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// The `Any.type_url` of a [`fleet::NotOwner`] detail.
pub const NOT_OWNER_TYPE_URL: &str = "type.googleapis.com/corium.fleet.v1.NotOwner";

/// The `Any.type_url` of a [`fleet::OutcomeUnknown`] detail.
pub const OUTCOME_UNKNOWN_TYPE_URL: &str = "type.googleapis.com/corium.fleet.v1.OutcomeUnknown";

/// The `Any.type_url` of a [`fleet::RequestIdUnsupported`] detail.
pub const REQUEST_ID_UNSUPPORTED_TYPE_URL: &str = "type.googleapis.com/corium.fleet.v1.RequestIdUnsupported";

/// The `Any.type_url` of a [`fleet::KeyMissing`] detail.
pub const KEY_MISSING_TYPE_URL: &str = "type.googleapis.com/corium.fleet.v1.KeyMissing";
