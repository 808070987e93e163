//! What the node's read replicas did, counted for `/metrics`.

use std::sync::atomic::AtomicU64;

/// Reads by what became of them, for `/metrics`.
#[derive(Default)]
pub(crate) struct ReadCounts {
    /// Answered at once.
    pub served: AtomicU64,
    /// Answered after waiting for the replica to reach a basis.
    pub waited: AtomicU64,
    /// Refused: the replica could not reach the basis in time, or does not
    /// follow its owner now.
    pub refused: AtomicU64,
    /// Replicas built.
    pub activations: AtomicU64,
    /// Replicas evicted (idle, over the cap) or retired (the database was
    /// deleted, or no owner could be followed).
    pub evictions: AtomicU64,
    /// Replicas that went on following a new owner after a move, their
    /// state kept (through the relay, `relay.rs`).
    pub owner_changes: AtomicU64,
}
