//! Fault injection for Corium Fleet's tests: never part of a production
//! build. The transactor links it only with its `fault-injection` feature
//! (the test suite turns it on), through its one seam — a store wrapper and
//! an after-commit observer (`corium_fleet_transactor::Seams`).
//!
//! Layout:
//! - [`schedule`] — fault schedules: entries, their text form, the seeded
//!   generator;
//! - [`store`] — [`FaultyStore`], the storage wrapper that follows one;
//! - [`env`](mod@env) — what a real node reads from its environment: a schedule for
//!   its store, a commit to crash after.

pub mod env;
pub mod schedule;
pub mod store;

pub use schedule::{Entry, Fault, OpClass, Rng, Schedule, When};
pub use store::FaultyStore;
