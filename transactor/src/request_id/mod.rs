//! Exactly-once `Transact`: durable request ids at the owner.
//!
//! A `Transact` carrying `corium-request-id` (a UUID, the caller's or one
//! the ingress assigned) commits at most once per database, and every retry
//! gets the first answer back, byte for byte. The record is part of the
//! database itself (design note 0006), so it survives crashes, failover,
//! idle eviction and restarts. The attributes are part of the schema of
//! every database the fleet creates (Corium installs attributes only through
//! its schema path).
//!
//! - [`record`] — what the transaction writes about itself and how it is
//!   found again;
//! - [`answer`] — how a committed request's answer is read back from it;
//! - [`key`] — the one `bytes` value that is the whole record of most
//!   transactions;
//! - [`shape`] — the caller's tempids, read with Corium's own converter;
//! - [`ledger`] — one cell's ledger: commit once, replay, and "did it
//!   commit?" with a fence;
//! - [`retention`] — records older than the window retracted, so their
//!   memory goes at the next open.

pub(crate) mod answer;
pub(crate) mod key;
pub(crate) mod ledger;
pub(crate) mod record;
pub(crate) mod retention;
pub(crate) mod shape;
#[cfg(test)]
mod tests;

pub(crate) use ledger::{Database, Ledger, LedgerError, Origin, Outcome, RequestStatus, Sender, Unsupported};
