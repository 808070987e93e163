//! Shared pieces of the Corium Fleet servers (transactor nodes, ingress) and
//! their command-line tools: placement, the admin port, TLS, the binaries'
//! process shape. What a client needs on the wire is in `corium-fleet-wire`.
//!
//! Layout:
//! - [`balance`] — load-aware placement: which database to move where so
//!   the fleet's calls per second even out (pure; nodes and the CLI use it);
//! - [`auth`] — stock Corium's authentication flags and guard, and the
//!   principal envelope the ingress sends to the owner;
//! - [`every`] — the pace of a background loop: a tick every period until shutdown;
//! - [`counted`] — counts per key with a limit (open calls, streams, waits
//!   per database, principal or address), given back when a place drops;
//! - [`cert_reload`] — TLS material that follows its files (poll and SIGHUP),
//!   and its expiry gauge;
//! - [`admin_http`] — the plain HTTP admin port (`/metrics`, `/healthz`, `/readyz`);
//! - [`launch`] — the command line of a node or an ingress, and the readiness
//!   probe: how the local launcher and the tests start processes;
//! - [`telemetry`] — the binaries' logs (text or JSON) and OTLP span export, W3C trace context;
//! - [`memory`] — the process's resident set, its cgroup's memory limit, a
//!   node's memory budget;
//! - [`names`] — Corium's database-name rule (and saga branches), checked
//!   on every request before storage;
//! - [`owner`] — lease owner ids (`<node-id>/<incarnation>`) and the lease clock;
//! - [`placement`] — members and the deterministic candidate function;
//! - [`placement_map`] — the operator's per-database override, reloaded safely;
//! - [`process`] — the shared shape of the binaries' `main` and their exit codes;
//! - [`metrics`] — the `/metrics` exposition (`prometheus-client`): a
//!   scrape's collectors, calls by method, RPC kind and code, process series;
//! - [`settings`] — the flag groups both binaries share (membership,
//!   logging, TLS) and the one merge of a `--config` file under the flags;
//! - [`signal`] — SIGTERM/SIGINT as a future;
//! - [`tls`] — PEM loading, rustls configs for the fleet's mTLS, peer identity.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod admin_http;
pub mod auth;
pub mod balance;
pub mod cert_reload;
pub mod counted;
pub mod every;
pub mod launch;
pub mod memory;
pub mod metrics;
pub mod names;
pub mod owner;
pub mod placement;
pub mod placement_map;
pub mod process;

/// The version of the Corium crates this build calls (pinned in the
/// workspace's `Cargo.toml`).
pub const CORIUM_VERSION: &str = "0.1.90";

pub mod settings;
pub mod signal;
pub mod telemetry;
pub mod tls;
