//! Whether the ingress can read storage, probed in the background, and what
//! that means for readiness.
//!
//! Storage trouble is a metric (`corium_fleet_ingress_storage_up`) and a log
//! line, not a reason to leave the Service: a `PostgreSQL` blip would
//! otherwise take every ingress pod out at once, although each can still
//! route to the owners it has seen (`owner_cache`). The ingress is ready
//! once it has read storage at least once since it started (before that it
//! knows no owner at all) and until it shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use corium_store::FullStore;

use crate::metrics::Metrics;

/// How often storage is probed.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(2);

/// The ingress's view of its storage.
#[derive(Default)]
pub(crate) struct StorageHealth {
    /// Set by the first probe that answered; never cleared.
    reached: AtomicBool,
}

impl StorageHealth {
    /// Whether the ingress may take traffic: storage was reached once.
    #[must_use]
    pub(crate) fn ready(&self) -> bool {
        self.reached.load(Ordering::Acquire)
    }

    /// Probes `store` every [`PROBE_EVERY`] (each read bounded by
    /// `timeout`) until `stop`, keeping the gauge and logging changes.
    pub(crate) async fn follow(
        self: Arc<Self>,
        store: Arc<dyn FullStore>,
        timeout: Duration,
        metrics: Arc<Metrics>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut was_up = None;
        loop {
            let probed = tokio::time::timeout(timeout, store.get_root("meta:")).await;
            let up = matches!(probed, Ok(Ok(_)));
            metrics.storage_up.store(u64::from(up), Ordering::Relaxed);
            if up {
                self.reached.store(true, Ordering::Release);
            }
            match (was_up, up) {
                (Some(true) | None, false) => {
                    let error = match probed {
                        Ok(Err(error)) => error.to_string(),
                        _ => format!("no answer within {} ms", timeout.as_millis()),
                    };
                    tracing::warn!(%error, "storage unreachable; routing on the last owners seen");
                }
                (Some(false), true) => tracing::info!("storage reachable again"),
                _ => {}
            }
            was_up = Some(up);
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}
