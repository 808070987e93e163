//! Process-level fault injection for the fault tier of the test suite
//! (`docs/testing.md`). Read from the environment once; unset in any real
//! deployment, and a node that finds one set says so loudly at start.
//!
//! - `CORIUM_FLEET_FAULT_CRASH_AFTER_COMMIT=<request id>`: the process
//!   aborts right after the transaction carrying that `corium-request-id`
//!   is durably committed and before the answer is sent — the "owner died
//!   after the log append, before the reply" case that exactly-once must
//!   survive.
//! - `CORIUM_FLEET_FAULT_SCHEDULE=<schedule>`: the node's storage is wrapped
//!   in a [`FaultyStore`](crate::faulty::FaultyStore) following that
//!   schedule (text form in `faulty/schedule.rs`), times counted from start:
//!   a partition of this one node from storage, lost acknowledgements,
//!   errors, delays, stale reads, a freeze. A schedule that does not parse
//!   stops the node (exit 2) naming the entry.

use std::sync::OnceLock;

/// The environment variable naming the request id to crash after.
pub const CRASH_AFTER_COMMIT: &str = "CORIUM_FLEET_FAULT_CRASH_AFTER_COMMIT";

fn crash_id() -> Option<&'static uuid::Uuid> {
    static ID: OnceLock<Option<uuid::Uuid>> = OnceLock::new();
    ID.get_or_init(|| {
        std::env::var(CRASH_AFTER_COMMIT)
            .ok()
            .and_then(|text| uuid::Uuid::parse_str(text.trim()).ok())
    })
    .as_ref()
}

/// The environment variable holding a storage fault schedule.
pub const SCHEDULE: &str = "CORIUM_FLEET_FAULT_SCHEDULE";

/// `store`, wrapped in a `FaultyStore` when [`SCHEDULE`] is set.
///
/// # Errors
/// The schedule does not parse.
pub fn wrap_store(
    store: std::sync::Arc<corium_transactor::NodeStore>,
) -> Result<std::sync::Arc<dyn corium_store::FullStore>, String> {
    let Some(text) = std::env::var(SCHEDULE)
        .ok()
        .filter(|text| !text.trim().is_empty())
    else {
        return Ok(store);
    };
    let schedule: crate::faulty::Schedule = text.parse().map_err(|error| format!("{SCHEDULE}: {error}"))?;
    tracing::warn!(schedule = %schedule, "FAULT INJECTION ARMED: this node's storage follows a fault schedule");
    Ok(std::sync::Arc::new(crate::faulty::FaultyStore::new(
        store, schedule,
    )))
}

/// Logs any fault that is armed (called once at start).
pub fn announce() {
    if let Some(id) = crash_id() {
        tracing::warn!(request_id = %id, "FAULT INJECTION ARMED: this process aborts after committing that request id");
    }
}

/// Aborts the process if `id` is the armed crash-after-commit id.
pub fn after_commit(id: &uuid::Uuid) {
    if crash_id() == Some(id) {
        tracing::error!(request_id = %id, "fault injection: aborting after the commit, before the reply");
        std::process::abort();
    }
}
