//! The one seam through which tests change what a node does: a wrapper
//! around the shared store (storage faults) and an observer of commits (a
//! crash right after one). Production runs with [`Seams::default`], which
//! changes nothing; the binary fills them in only when built with the
//! `fault-injection` feature (the test suite's `corium-fleet-faults`).

use std::sync::Arc;

use corium_store::FullStore;

/// Wraps the node's shared store before the node uses it.
pub type StoreWrapper = Box<dyn FnOnce(Arc<dyn FullStore>) -> Result<Arc<dyn FullStore>, String> + Send>;

/// Called after a transaction under a request id committed, before its
/// answer is sent.
pub type CommitObserver = Arc<dyn Fn(&uuid::Uuid) + Send + Sync>;

/// What tests may inject into a node.
#[derive(Default)]
pub struct Seams {
    /// Wraps the store (`None`: the store as opened).
    pub wrap_store: Option<StoreWrapper>,
    /// Observes commits (`None`: nobody).
    pub after_commit: Option<CommitObserver>,
}
