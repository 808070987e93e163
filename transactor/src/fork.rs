//! Fleet-wide serialisation of fork targets.
//!
//! Corium's fork writes the target's log first and publishes its catalog
//! entry last; its lock is per process. Two nodes forking into one name at
//! once would write the same log concurrently. A reservation root
//! `fleet-fork:<target>` (created by CAS, with an expiry so a crashed
//! forker does not block the name forever) makes one fork into a name run at
//! a time across the fleet.

use std::time::Duration;

use corium_fleet_common::owner::now_unix_ms;
use corium_store::StoreError;
use serde::{Deserialize, Serialize};

use crate::host::Host;

/// How long a reservation holds without being released.
const HOLD: Duration = Duration::from_mins(5);

#[derive(Serialize, Deserialize)]
struct Record {
    node_id: String,
    incarnation: String,
    expires_unix_ms: i64,
}

/// Why a fork target could not be reserved; the service edge makes its
/// status (`service/status.rs`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReserveError {
    /// Storage failed: `UNAVAILABLE`.
    #[error("cannot reserve fork target {target:?}: {source}")]
    Storage {
        /// The fork target.
        target: String,
        /// The store's error.
        source: StoreError,
    },
    /// Another fork into the name is running: `ABORTED`.
    #[error("a fork into {target:?} is already running on {node}; retry when it finishes")]
    Running {
        /// The fork target.
        target: String,
        /// The node running it.
        node: String,
    },
    /// Another fork into the name took it meanwhile: `ABORTED`.
    #[error("a fork into {target:?} started concurrently; retry when it finishes")]
    Concurrent {
        /// The fork target.
        target: String,
    },
}

/// A held reservation of a fork target name.
pub(crate) struct Reservation<'a> {
    host: &'a Host,
    name: String,
    bytes: Vec<u8>,
}

impl<'a> Reservation<'a> {
    /// Reserves `target` or refuses.
    ///
    /// # Errors
    /// [`ReserveError::Running`] or [`ReserveError::Concurrent`] while
    /// another fork into it runs, [`ReserveError::Storage`] when storage
    /// fails.
    pub(crate) async fn take(host: &'a Host, target: &str) -> Result<Self, ReserveError> {
        let name = format!("fleet-fork:{target}");
        let record = Record {
            node_id: host.config.node_id.clone(),
            incarnation: host.incarnation.clone(),
            expires_unix_ms: now_unix_ms()
                .saturating_add(i64::try_from(HOLD.as_millis()).unwrap_or(i64::MAX)),
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        let unavailable = |source: StoreError| ReserveError::Storage {
            target: target.to_owned(),
            source,
        };
        let current = host.base.get_root(&name).await.map_err(unavailable)?;
        if let Some(existing) = current
            .as_deref()
            .and_then(|bytes| serde_json::from_slice::<Record>(bytes).ok())
            && existing.expires_unix_ms > now_unix_ms()
        {
            return Err(ReserveError::Running {
                target: target.to_owned(),
                node: existing.node_id,
            });
        }
        match host.base.cas_root(&name, current.as_deref(), &bytes).await {
            Ok(()) => Ok(Self { host, name, bytes }),
            Err(StoreError::CasFailed { .. }) => Err(ReserveError::Concurrent {
                target: target.to_owned(),
            }),
            Err(error) => Err(unavailable(error)),
        }
    }

    /// Gives the name back (only if this reservation still holds it).
    pub(crate) async fn release(self) {
        match self.host.base.get_root(&self.name).await {
            Ok(Some(current)) if current == self.bytes => {
                if let Err(error) = self.host.base.delete_root(&self.name).await {
                    tracing::warn!(reservation = %self.name, %error, "cannot release fork reservation; it expires on its own");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(reservation = %self.name, %error, "cannot read fork reservation"),
        }
    }
}
