//! The ownership decision's "no", typed: why a node will not serve an
//! owner-dependent call for a database. The service edge maps it to a
//! status once (`service/status.rs`); nothing on the way decides on a
//! status.

use corium_fleet_wire::kind::ErrorKind;
use corium_fleet_wire::metadata::MetadataError;
use corium_fleet_wire::not_owner::{self, NotOwner};

/// Why a node refuses an owner-dependent call.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The fleet metadata is wrong (route header ≠ body, a second hop, a
    /// value that does not parse): `INVALID_ARGUMENT`.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// This node is not the lease holder (or cannot be now): a typed
    /// `NotOwner` naming the holder or the candidates. Decided before the
    /// call ran, so any caller may send it again.
    #[error("not the lease holder of {:?}", .0.database)]
    NotOwner(Box<NotOwner>),
    /// The name can name no database (Corium's rule): `INVALID_ARGUMENT`,
    /// decided before any storage read.
    #[error(transparent)]
    InvalidName(#[from] corium_fleet_common::names::InvalidName),
    /// The catalog has no such database: `NOT_FOUND`.
    #[error("unknown database {0:?}")]
    UnknownDatabase(String),
    /// Ownership cannot be verified (storage failed or did not answer, the
    /// lease could not be renewed, activation failed): `UNAVAILABLE`, never
    /// a guess (invariant 4).
    #[error("cannot verify ownership of {db:?}: {what}: {detail}; retry later")]
    Unverifiable {
        /// The database.
        db: String,
        /// What failed.
        what: &'static str,
        /// The underlying error.
        detail: String,
    },
    /// Opening the database would take this node past its memory budget
    /// and no idle database was left to make room: `RESOURCE_EXHAUSTED`.
    /// Nothing was opened; the database's other candidates may have room.
    #[error(
        "node {node} is at its memory budget ({used_mib} MiB of {budget_mib} MiB in use) and cannot open {db:?} now; retry later"
    )]
    OverBudget {
        /// This node.
        node: String,
        /// The database.
        db: String,
        /// What the node holds now, in MiB.
        used_mib: u64,
        /// Its budget, in MiB.
        budget_mib: u64,
    },
    /// The node is over its memory budget and no candidate has room for a
    /// database: a write that would grow memory is refused
    /// (`RESOURCE_EXHAUSTED`), before it ran. Reads go on; nothing
    /// acknowledged is lost; writes are admitted again once room returns.
    #[error(
        "node {node} is over its memory budget ({used_mib} MiB in use of {budget_mib} MiB) and no other candidate has room; writes to {db:?} ({db_mib} MiB here) are refused until memory is freed (a database deleted, handed away or evicted); reads go on"
    )]
    WritesRefused {
        /// This node.
        node: String,
        /// The database written to.
        db: String,
        /// What that database holds here, in MiB.
        db_mib: u64,
        /// What the node holds now, in MiB.
        used_mib: u64,
        /// Its budget, in MiB.
        budget_mib: u64,
    },
    /// The database is encrypted under a key this node was not started with
    /// (`--storage-key`): `FAILED_PRECONDITION` with the typed `KeyMissing`
    /// detail, decided before the lease was taken (Corium resolves keys
    /// first), so the holder was not fenced and nothing was written. The
    /// ingress tries the next candidate; a client gives up, since the answer
    /// does not change until an operator gives a node the key.
    #[error(
        "database {db:?} is encrypted under key {key_id}, which node {node} does not hold (start the node with --storage-key {key_id}); nothing was done"
    )]
    KeyMissing {
        /// This node.
        node: String,
        /// The database.
        db: String,
        /// The key id its manifest (or its create request) names.
        key_id: String,
    },
    /// The database alone needs more memory than this node's budget (a
    /// poison database): `RESOURCE_EXHAUSTED`, refused without opening it
    /// again until it is forgotten.
    #[error(
        "database {db:?} needs about {needs_mib} MiB, more than node {node}'s memory budget of {budget_mib} MiB; it is not served here (give the node more memory or --memory-budget-mib)"
    )]
    TooLarge {
        /// This node.
        node: String,
        /// The database.
        db: String,
        /// Its estimate when it was last open, in MiB.
        needs_mib: u64,
        /// The node's budget, in MiB.
        budget_mib: u64,
    },
}

impl Refusal {
    /// What the caller should do.
    #[must_use]
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Metadata(_)
            | Self::InvalidName(_)
            | Self::UnknownDatabase(_)
            | Self::TooLarge { .. }
            | Self::KeyMissing { .. } => ErrorKind::GiveUp,
            Self::NotOwner(detail) => not_owner::kind(detail),
            Self::Unverifiable { .. } | Self::OverBudget { .. } | Self::WritesRefused { .. } => {
                ErrorKind::RetryLater
            }
        }
    }
}
