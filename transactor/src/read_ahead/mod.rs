//! Log read-ahead: a database's log records read in one go when its cell
//! opens, served from memory to both of Corium's recovery passes, and
//! dropped when the open is done; and again for each whole-log read of an
//! open cell.
//!
//! On storage where the log is roots (`PostgreSQL`, S3), Corium 0.1.90's
//! recovery lists the log and reads every record with its own `get_root`,
//! sequentially, twice (docs/benchmarks.md: 4,015 root reads for 2,000
//! records). The view answers the first log listing of an activation with
//! one bulk read instead ([`PrefixRead`](corium_fleet_store::prefix_read::PrefixRead): one query on `PostgreSQL`), keeps
//! the records, and serves Corium's reads of them from memory.
//!
//! Why this cannot change what a new owner sees:
//! - a record (`log:<db>:v<version>:r<t>`) is written once, by a create-only
//!   compare-and-swap, and never rewritten; only records are kept, never
//!   a mutable root (`meta:`, `db:`, `lease:`, legacy chunks);
//! - the bulk read happens inside the open, after the lease was acquired
//!   (Corium acquires, then recovers), so it *is* the listing after the
//!   lease that decides what exists; a later listing goes to storage, and a
//!   record it names that was not read ahead is read from storage;
//! - the records are dropped when the open returns, or kept a few seconds
//!   more for the open cell's first whole-log reads (below), whose listing
//!   still decides what exists.
//!
//! A handoff reads ahead earlier: the owner asks its target to
//! [`Budget::prepare`] while it still serves, the target reads the log
//! then, and the activation that follows lists the log from storage and
//! reads only the records committed since. That is safe for a further
//! reason: a record's name is never reused. Its version is the lease
//! version its writer acquired, lease roots are never deleted (Corium's
//! `delete_db` leaves `lease:<db>`), so a database deleted and created again
//! writes under higher versions; the one exception, a fork's log written
//! under version 0 (a name forked into, deleted and forked into again), is
//! never kept ahead. A prepared log not used within [`PREPARED_FOR`](budget::PREPARED_FOR) is
//! dropped.
//!
//! Corium 0.1.90 answers *every* `tx_range`, not only recovery's, by
//! listing the log and reading each record (`corium-log`
//! `read_native_merged`): a request-id replay of one transaction, or a
//! subscription's catch-up, read 16,000 records one by one at 16,000
//! transactions (seconds on `PostgreSQL`; the failover outliers in
//! docs/benchmarks.md). Such a read holds a [`WholeLog`](log::WholeLog) guard, which arms
//! the cell's read-ahead again for its duration: its listing is one bulk
//! read, its record reads are served from it, and the records are dropped
//! when the last guard goes. The same argument holds: the bulk read is a
//! listing like any other (Corium's merge and takeover cutoff run over it
//! unchanged), and records are never rewritten.
//!
//! The first whole-log reads come right after an open: the replay of a
//! `Transact` that the dead owner committed (its client's retry reaches
//! the successor within a second) and subscriptions catching up. So an
//! open's records are kept for [`KEPT_AFTER_OPEN`](log::KEPT_AFTER_OPEN); such a read then lists
//! the log (or is answered with the open's listing, while the cell has
//! written nothing) and reads only the tail. Kept records are the first to
//! go when an activation finds the budget short.
//!
//! Every read-ahead also keeps the log's listing while it holds records
//! (`log.rs`): Corium lists the log four times in an open, twice in a
//! whole-log read, and all but the first are answered with it until the
//! cell writes to its log.
//!
//! Memory is bounded: every read-ahead reserves its bytes from the node's
//! budget (`--activation-read-ahead-mib`, [`Budget`]) before it reads, at most
//! [`MAX_PER_ACTIVATION`](pool::MAX_PER_ACTIVATION) each; when the budget is spent (hundreds of
//! activations at once during a drain) an activation reads as before. A read
//! that fails or stops at its bound falls back to plain listing and reads.
//!
//! The published index is read the same way: the first blob an
//! activation's open asks for reads every manifest and chunk the `db:` root
//! names, eight at a time (`index.rs`), and a handoff's
//! target reads them with the log. Blobs are content-addressed, so a blob
//! read ahead is the blob storage holds under its id.
//!
//! A node also keeps warm the databases it is the first standby of
//! (`warm.rs`): their records and index blobs, refreshed while the owner
//! serves, so a takeover after a crash starts like a handoff's target.
//!
//! Layout: `pool.rs` — the node's memory budget, the counts and record
//! names; `log.rs` — one cell's read-ahead and the [`WholeLog`](log::WholeLog) guard;
//! `index.rs` — reading a database's published index blobs; `warm.rs` —
//! the databases this node keeps warm as their first standby;
//! `budget.rs` — starting a read-ahead for an activation, and reading a log
//! ahead of a handoff.

mod budget;
mod index;
mod log;
mod pool;
#[cfg(test)]
mod tests;
mod warm;

pub(crate) use budget::{Budget, PreparedLog};
pub(crate) use log::ReadAhead;
