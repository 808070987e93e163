//! Request-id retention on a node (`--request-id-retention-secs`): every
//! interval, each owned database in use has its request records older than
//! the window retracted, at most [`BATCH`] in one transaction
//! (`request_id::retention` says why this frees their memory at the next
//! open). A database left idle is not woken for it: its records are
//! retracted when it is in use again. A database created before the key
//! attribute was `:db/noHistory` keeps its records (retracting them would
//! only add datoms).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use corium_protocol::codec;

use super::{Host, now_unix_ms};
use crate::request_id::retention;

/// Records retracted in one transaction at most.
const BATCH: usize = 10_000;
/// A database idle this long is left alone.
const IDLE: Duration = Duration::from_secs(30);

impl Host {
    /// Retracts expired request records until `shutdown` (nothing without a
    /// window).
    pub(crate) async fn retain_request_ids(self: Arc<Self>, shutdown: tokio::sync::watch::Receiver<bool>) {
        let Some(window) = self.config.request_id_retention else {
            return;
        };
        let period = (window / 4).clamp(Duration::from_millis(250), Duration::from_mins(1));
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let mut every = corium_fleet_common::every::Every::new(period, shutdown);
        while every.tick().await {
            if self.is_stopping() {
                return;
            }
            let cutoff = now_unix_ms().saturating_sub(window_ms);
            for cell in self.cells() {
                if cell.idle_for().is_some_and(|idle| idle >= IDLE) {
                    continue;
                }
                let Ok(state) = cell.node.db_state(&cell.db).await else {
                    continue;
                };
                let db = state.db();
                // A database created before its keys left the history index
                // would only grow by retracting them: left as it is.
                if !retention::keys_leave_history(&db) {
                    continue;
                }
                let expired = retention::expired(&db, cutoff, BATCH);
                let Some(retraction) = retention::retraction(&expired) else {
                    continue;
                };
                let Some(permit) = cell.admit() else { continue };
                let (result, _permit) = cell
                    .commit(permit, &cell.db, codec::encode_edn(&retraction), None)
                    .await;
                match result {
                    Ok(answer) => {
                        let count = u64::try_from(expired.len()).unwrap_or(u64::MAX);
                        self.metrics
                            .request_ids_expired
                            .fetch_add(count, Ordering::Relaxed);
                        tracing::debug!(db = %cell.db, count, basis_t = answer.basis_t, "expired request records retracted");
                    }
                    Err(error) => {
                        tracing::warn!(db = %cell.db, %error, "cannot retract expired request records");
                    }
                }
                self.reset_if_failed(&cell);
            }
        }
    }
}
