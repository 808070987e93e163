//! `corium-fleet-client`: the Rust SDK for Corium Fleet.
//!
//! One fleet address (an ingress), and every call made the way the fleet
//! wants it: the configured bearer token (`authorization: Bearer <token>`,
//! [`Config::token`]) on every call, the `corium-database-route` header on
//! every database call, a
//! fresh `corium-request-id` on every `Transact` (kept across its retries, so
//! a retry after an ambiguous failure commits at most once), retries with
//! capped exponential backoff and jitter inside a time budget, decided on
//! the error's kind, typed `NotOwner` and ambiguity errors, and
//! subscriptions that resume from the last fully applied basis after any
//! disconnect, and reads from read replicas that never miss this client's
//! own writes (`corium-min-basis`, [`reads`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), corium_fleet_client::Error> {
//! use corium_fleet_client::{Client, Config};
//! let client = Client::connect(Config::new("http://127.0.0.1:4334")).await?;
//! let orders = client.database("orders");
//! let done = orders.transact_edn(r#"[{:db/id "o" :order/id "A-1"}]"#).await?;
//! println!("committed at t={} (request id {})", done.response.basis_t, done.request_id);
//! # Ok(()) }
//! ```
//!
//! Layout:
//! - [`config`] — endpoint, TLS, token, deadlines, retry policy;
//! - [`auth`] — the bearer token every call carries;
//! - [`error`] — the SDK's error and its [`ErrorKind`];
//! - [`retry`] — backoff with jitter and the retry budget;
//! - [`client`] — [`Client`] and [`Database`]: create, transact, status,
//!   "did my request commit?";
//! - [`reads`] — queries and counts from the fleet's read replicas, at
//!   least as far as this client's own writes (read-your-writes);
//! - [`subscription`] — resuming subscriptions;
//! - [`written`] — the highest basis this client saw committed, per
//!   database (what its reads wait for).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod auth;
pub mod client;
pub mod config;
pub mod error;
pub mod reads;
pub mod retry;
pub mod subscription;
pub mod written;

pub use client::{Client, Database, RequestStatus, Transacted};
pub use config::{Config, RetryPolicy, Tls};
pub use corium_fleet_wire::kind::ErrorKind;
pub use error::Error;
pub use subscription::Subscription;
