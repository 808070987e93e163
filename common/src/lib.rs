//! Shared pieces of Corium Fleet used by the transactor nodes, the ingress,
//! the CLI and the tests.
//!
//! Layout:
//! - [`admin_http`] — the plain HTTP admin port (`/metrics`, `/healthz`, `/readyz`);
//! - [`detail`] — typed status details (`google.rpc.Status` in `grpc-status-details-bin`);
//! - [`logging`] — the binaries' `tracing` setup;
//! - [`metadata`] — the fleet's gRPC metadata keys and their parsing;
//! - [`not_owner`] — the one encoder/decoder of the typed `NotOwner` detail;
//! - [`outcome`] — the one encoder/decoder of the typed `OutcomeUnknown` detail, and the
//!   stock clients' resend rule every ambiguous answer is built against;
//! - [`owner`] — lease owner ids (`<node-id>/<incarnation>`) and the lease clock;
//! - [`placement`] — members and the deterministic candidate function;
//! - [`placement_map`] — the operator's per-database override, reloaded safely;
//! - [`process`] — the shared shape of the binaries' `main` and their exit codes;
//! - [`prometheus`] — counters, gauges, histograms in Prometheus text;
//! - [`signal`] — SIGTERM/SIGINT as a future;
//! - [`tls`] — PEM loading, rustls configs for the fleet's mTLS, peer identity;
//! - [`kind`] — the coarse error kind that tells a caller what to do.

pub mod admin_http;
pub mod detail;
pub mod kind;
pub mod logging;
pub mod metadata;
pub mod not_owner;
pub mod outcome;
pub mod owner;
pub mod placement;
pub mod placement_map;
pub mod process;
pub mod prometheus;
pub mod signal;
pub mod tls;
