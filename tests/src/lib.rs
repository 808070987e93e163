//! Harness for multi-process tests: starts real `corium-fleet-transactor`
//! and `corium-fleet-ingress` processes on random loopback ports over a
//! temporary data directory and a real storage backend, and talks to them
//! with real Corium clients. The tiers are described in `docs/testing.md`.
//!
//! Layout:
//! - [`backend`] — [`Backend`]: the filesystem store, `PostgreSQL` (a fresh
//!   database per test on the server named by `CORIUM_FLEET_TEST_PG_URL`,
//!   which `make test` starts) or S3 (a fresh prefix per test on the
//!   `SeaweedFS` named by `CORIUM_FLEET_TEST_S3_ENDPOINT`, likewise);
//! - [`balancer`] — a round-robin TCP balancer without affinity in front of
//!   several ingresses (a Kubernetes Service);
//! - [`ports`] — [`free_port`] (reserved across test processes) and
//!   [`bin_dir`];
//! - [`node`] — [`Node`]: one process (spawn, signal, SIGKILL, SIGTERM,
//!   restart, environment, log);
//! - [`fleet`] — [`Fleet`], started only through [`Fleet::builder`]
//!   ([`FleetBuilder`]): nodes, ingresses, placement as the nodes compute it;
//! - [`fake_server`] — a recording fake of the fleet's gRPC services, for
//!   the SDK's and the CLI's tests without a fleet;
//! - [`eventually`](mod@eventually) — [`eventually()`]: the one way a test
//!   waits for a condition;
//! - [`http`] — [`http_get`] on an admin port and [`metric`] from its
//!   `/metrics`;
//! - [`cli`] — the `corium-fleet` operator CLI run as an operator would;
//! - [`corium`] — small helpers over the stock `corium.v1` clients;
//! - [`drain`](mod@drain) — one drain measured (tests and the `drain` benchmark);
//! - [`load`] — a write load over many databases and its check;
//! - [`otlp`] — a real OTLP/gRPC trace receiver on loopback;
//! - [`proxy`] — a cuttable TCP path between a node and its storage server;
//! - [`scripted`] — a scripted HTTP/2 hop in front of a node (what clients
//!   see when the hop to the owner misbehaves);
//! - [`stock`] — a stock Corium transactor (crates.io `corium-cli`), the
//!   reference of the differential tests;
//! - [`differential`] — one scripted client run against a stock transactor
//!   and the fleet, answers compared field by field;
//! - [`checker`] — the fault suite's judge of the fleet's promises and its
//!   per-run report (both tiers);
//! - [`sim`] — the in-process simulation tier: seeded plans over hosts
//!   sharing one store through `FaultyStore`s.

pub mod backend;
pub mod balancer;
pub mod checker;
pub mod cli;
pub mod corium;
pub mod differential;
pub mod drain;
pub mod eventually;
pub mod fake_server;
pub mod fleet;
pub mod http;
pub mod load;
pub mod node;
pub mod otlp;
pub mod ports;
pub mod proxy;
pub mod scripted;
pub mod sim;
pub mod stock;
pub mod stock_load;

pub use backend::Backend;
pub use eventually::eventually;
pub use fleet::{Fleet, FleetBuilder};
pub use http::{http_get, metric};
pub use node::{Node, WithLogs};
pub use ports::{bin_dir, free_port};
