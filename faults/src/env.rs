//! Process-level fault injection for the fault tier of the test suite
//! (`docs/testing.md`). Read from the environment once; unset in any real
//! deployment, and a node that finds one set says so loudly at start.
//!
//! - `CORIUM_FLEET_FAULT_CRASH_AFTER_COMMIT=<request id>` or `#<n>`: the
//!   process aborts right after the transaction carrying that
//!   `corium-request-id` (or its n-th transaction carrying any, which is
//!   every write through an ingress) is durably committed and before the
//!   answer is sent — the "owner died after the log append, before the
//!   reply" case that exactly-once must survive.
//! - `CORIUM_FLEET_FAULT_SCHEDULE=<schedule>`: the node's storage is wrapped
//!   in a [`FaultyStore`](crate::FaultyStore) following that
//!   schedule (text form in `schedule.rs`), times counted from start:
//!   a partition of this one node from storage, lost acknowledgements,
//!   errors, delays, stale reads, a freeze. A schedule that does not parse
//!   stops the node (exit 2) naming the entry.
//! - `CORIUM_FLEET_FAULT_WARM_START=refuse`: the node's hot standbys offer
//!   Corium values that diverge from the log at their basis, so every warm
//!   start is refused and each open recovers from storage (the fallback
//!   path, which must keep every promise too).

use std::sync::OnceLock;

/// The environment variable naming the request id to crash after.
pub const CRASH_AFTER_COMMIT: &str = "CORIUM_FLEET_FAULT_CRASH_AFTER_COMMIT";

/// What [`CRASH_AFTER_COMMIT`] names.
#[derive(Clone, Copy, Debug, Eq, PartialEq)]
enum CrashAfter {
    /// The transaction carrying this request id.
    Id(uuid::Uuid),
    /// The n-th transaction carrying a request id (from 1).
    Nth(u64),
}

fn crash_after() -> Option<CrashAfter> {
    static ARMED: OnceLock<Option<CrashAfter>> = OnceLock::new();
    *ARMED.get_or_init(|| {
        let text = std::env::var(CRASH_AFTER_COMMIT).ok()?;
        let text = text.trim();
        match text.strip_prefix('#') {
            Some(n) => n.parse().ok().filter(|n| *n > 0).map(CrashAfter::Nth),
            None => uuid::Uuid::parse_str(text).ok().map(CrashAfter::Id),
        }
    })
}

/// The environment variable holding a storage fault schedule.
pub const SCHEDULE: &str = "CORIUM_FLEET_FAULT_SCHEDULE";

/// `store`, wrapped in a `FaultyStore` when [`SCHEDULE`] is set.
///
/// # Errors
/// The schedule does not parse.
pub fn wrap_store(
    store: std::sync::Arc<dyn corium_store::FullStore>,
) -> Result<std::sync::Arc<dyn corium_store::FullStore>, String> {
    let Some(text) = std::env::var(SCHEDULE)
        .ok()
        .filter(|text| !text.trim().is_empty())
    else {
        return Ok(store);
    };
    let schedule: crate::Schedule = text.parse().map_err(|error| format!("{SCHEDULE}: {error}"))?;
    tracing::warn!(schedule = %schedule, "FAULT INJECTION ARMED: this node's storage follows a fault schedule");
    Ok(std::sync::Arc::new(crate::FaultyStore::new(store, schedule)))
}

/// The environment variable that forces warm starts to be refused.
pub const WARM_START: &str = "CORIUM_FLEET_FAULT_WARM_START";

/// Whether [`WARM_START`] says `refuse` (anything else: warm starts as
/// usual; a value other than empty or `refuse` is logged and ignored).
#[must_use]
pub fn refuse_warm_starts() -> bool {
    match std::env::var(WARM_START).ok().as_deref().map(str::trim) {
        Some("refuse") => {
            tracing::warn!("FAULT INJECTION ARMED: this node's hot standbys offer values Corium must refuse");
            true
        }
        None | Some("") => false,
        Some(other) => {
            tracing::warn!(
                value = other,
                "{WARM_START} is neither empty nor `refuse`; ignored"
            );
            false
        }
    }
}

/// Logs any fault that is armed (called once at start).
pub fn announce() {
    if let Some(armed) = crash_after() {
        tracing::warn!(
            ?armed,
            "FAULT INJECTION ARMED: this process aborts after committing that transaction"
        );
    }
}

/// Aborts the process if the transaction just committed under `id` is the
/// armed one.
pub fn after_commit(id: &uuid::Uuid) {
    static COMMITTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let Some(armed) = crash_after() else { return };
    let n = COMMITTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if armed == CrashAfter::Id(*id) || armed == CrashAfter::Nth(n) {
        tracing::error!(request_id = %id, n, "fault injection: aborting after the commit, before the reply");
        std::process::abort();
    }
}
