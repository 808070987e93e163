//! The one seam through which tests change what a node does: a wrapper
//! around the shared store (storage faults), an observer of commits (a
//! crash right after one) and hot standbys whose values Corium's warm start
//! must refuse (the fallback path). Production runs with [`Seams::default`], which
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
    /// What the node does differently once its store is open.
    pub hooks: Hooks,
}

/// The seams a started node consults ([`crate::start()`]).
#[derive(Clone, Default)]
pub struct Hooks {
    /// Observes commits (`None`: nobody).
    pub after_commit: Option<CommitObserver>,
    /// Hot standbys offer Corium values that diverge from the log at their
    /// basis, so every warm start is refused and the open recovers from
    /// storage: the fallback path, exercised under the fault suite.
    pub refuse_warm_starts: bool,
}
