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
use corium_store::{RootStore, StoreError};
use serde::{Deserialize, Serialize};

use crate::host::Host;

/// The reservation root of fork target `target`.
fn root_name(target: &str) -> String {
    format!("fleet-fork:{target}")
}

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
    store: &'a dyn RootStore,
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
        Self::take_in(
            host.base.as_ref(),
            &host.config.node_id,
            &host.incarnation,
            target,
        )
        .await
    }

    /// [`Reservation::take`] in `store`, for node `node_id` in process
    /// `incarnation`.
    async fn take_in(
        store: &'a dyn RootStore,
        node_id: &str,
        incarnation: &str,
        target: &str,
    ) -> Result<Self, ReserveError> {
        let name = root_name(target);
        let record = Record {
            node_id: node_id.to_owned(),
            incarnation: incarnation.to_owned(),
            expires_unix_ms: now_unix_ms()
                .saturating_add(i64::try_from(HOLD.as_millis()).unwrap_or(i64::MAX)),
        };
        let bytes = serde_json::to_vec(&record).unwrap_or_default();
        let unavailable = |source: StoreError| ReserveError::Storage {
            target: target.to_owned(),
            source,
        };
        let current = store.get_root(&name).await.map_err(unavailable)?;
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
        match store.cas_root(&name, current.as_deref(), &bytes).await {
            Ok(()) => Ok(Self { store, name, bytes }),
            Err(StoreError::CasFailed { .. }) => Err(ReserveError::Concurrent {
                target: target.to_owned(),
            }),
            Err(error) => Err(unavailable(error)),
        }
    }

    /// Gives the name back (only if this reservation still holds it).
    pub(crate) async fn release(self) {
        match self.store.get_root(&self.name).await {
            Ok(Some(current)) if current == self.bytes => {
                if let Err(error) = self.store.delete_root(&self.name).await {
                    tracing::warn!(reservation = %self.name, %error, "cannot release fork reservation; it expires on its own");
                }
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(reservation = %self.name, %error, "cannot read fork reservation"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use corium_store::MemoryStore;
    use tonic::Code;

    use super::*;

    /// A store whose first `waiting` root reads wait for each other after
    /// reading: every racer sees the name before any of them writes it, so
    /// only the CAS can decide between them (the pre-read cannot).
    struct Gated {
        inner: MemoryStore,
        waiting: usize,
        reads: AtomicUsize,
        barrier: tokio::sync::Barrier,
    }

    impl Gated {
        fn new(inner: MemoryStore, waiting: usize) -> Self {
            Self {
                inner,
                waiting,
                reads: AtomicUsize::new(0),
                barrier: tokio::sync::Barrier::new(waiting),
            }
        }
    }

    #[async_trait::async_trait]
    impl RootStore for Gated {
        async fn get_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
            let read = self.inner.get_root(name).await;
            if self.reads.fetch_add(1, Ordering::SeqCst) < self.waiting {
                self.barrier.wait().await;
            }
            read
        }

        async fn cas_root(&self, name: &str, expected: Option<&[u8]>, new: &[u8]) -> Result<(), StoreError> {
            self.inner.cas_root(name, expected, new).await
        }

        async fn delete_root(&self, name: &str) -> Result<(), StoreError> {
            self.inner.delete_root(name).await
        }

        async fn list_roots(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
            self.inner.list_roots(prefix).await
        }
    }

    impl std::fmt::Debug for Reservation<'_> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Reservation")
                .field("name", &self.name)
                .finish_non_exhaustive()
        }
    }

    /// The reservation record of `target` in `store`, if any.
    async fn held(store: &dyn RootStore, target: &str) -> Option<Record> {
        let bytes = store.get_root(&root_name(target)).await.unwrap()?;
        Some(serde_json::from_slice(&bytes).expect("a reservation record"))
    }

    /// Writes a reservation of `target` by `node_id` expiring at
    /// `expires_unix_ms`, as a forker that crashed would have left it.
    async fn leave(store: &dyn RootStore, target: &str, node_id: &str, expires_unix_ms: i64) -> Vec<u8> {
        let record = Record {
            node_id: node_id.to_owned(),
            incarnation: "gone".to_owned(),
            expires_unix_ms,
        };
        let bytes = serde_json::to_vec(&record).unwrap();
        let name = root_name(target);
        let current = store.get_root(&name).await.unwrap();
        store.cas_root(&name, current.as_deref(), &bytes).await.unwrap();
        bytes
    }

    /// Two forks into one name reserve it at the same moment (both read it
    /// free before either writes): the CAS lets exactly one through, the
    /// other is `Concurrent` — `ABORTED`, naming the target — and the root
    /// names the winner.
    #[tokio::test]
    async fn of_two_simultaneous_reservations_of_one_target_exactly_one_wins() {
        let store = Gated::new(MemoryStore::default(), 2);
        let (first, second) = tokio::join!(
            Reservation::take_in(&store, "node-1", "i1", "dst"),
            Reservation::take_in(&store, "node-2", "i2", "dst"),
        );
        let (winner, loser) = match (first, second) {
            (Ok(_), Err(loser)) => ("node-1", loser),
            (Err(loser), Ok(_)) => ("node-2", loser),
            (Ok(_), Ok(_)) => panic!("both forks reserved \"dst\""),
            (Err(a), Err(b)) => panic!("neither fork reserved \"dst\": {a}; {b}"),
        };
        assert!(
            matches!(&loser, ReserveError::Concurrent { target } if target == "dst"),
            "{loser:?}"
        );
        let status = tonic::Status::from(loser);
        assert_eq!(status.code(), Code::Aborted);
        assert!(status.message().contains("\"dst\""), "{status:?}");
        assert_eq!(held(&store, "dst").await.unwrap().node_id, winner);
    }

    /// Eight forks into one name at once, each reading whenever it gets to:
    /// one holds the name, every other is refused (`Running` naming the
    /// holder if it read the holder's record, `Concurrent` if it lost the
    /// CAS), and other names are not affected.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn of_many_racing_reservations_exactly_one_holds_the_name() {
        let store = MemoryStore::default();
        let nodes: Vec<String> = (1..=8).map(|i| format!("node-{i}")).collect();
        let answers = futures::future::join_all(
            nodes
                .iter()
                .map(|node| Reservation::take_in(&store, node, "i", "dst")),
        )
        .await;
        let holder = held(&store, "dst").await.expect("someone holds \"dst\"").node_id;
        let mut won = 0;
        for (node, answer) in nodes.iter().zip(&answers) {
            match answer {
                Ok(_) => {
                    won += 1;
                    assert_eq!(node, &holder, "the winner is the one the root names");
                }
                Err(ReserveError::Running {
                    target,
                    node: running,
                }) => {
                    assert_eq!((target.as_str(), running), ("dst", &holder));
                }
                Err(ReserveError::Concurrent { target }) => assert_eq!(target, "dst"),
                Err(error) => panic!("{node}: {error:?}"),
            }
        }
        assert_eq!(won, 1, "{answers:?}");
        // Another target is free all along.
        assert!(Reservation::take_in(&store, "node-9", "i", "other").await.is_ok());
    }

    /// A refused fork leaves the holder's reservation as it was; a released
    /// reservation (a fork that finished or failed: the service releases
    /// either way) frees the name at once, leaving no root behind.
    #[tokio::test]
    async fn a_released_reservation_frees_the_name_and_a_refusal_changes_nothing() {
        let store = MemoryStore::default();
        let first = Reservation::take_in(&store, "node-1", "i1", "dst").await.unwrap();
        let before = store.get_root(&root_name("dst")).await.unwrap();
        let refused = Reservation::take_in(&store, "node-2", "i2", "dst").await;
        assert!(
            matches!(&refused, Err(ReserveError::Running { target, node }) if target == "dst" && node == "node-1"),
            "{refused:?}"
        );
        let status = tonic::Status::from(refused.err().unwrap());
        assert_eq!(status.code(), Code::Aborted);
        assert!(
            status.message().contains("\"dst\"") && status.message().contains("node-1"),
            "{status:?}"
        );
        assert_eq!(store.get_root(&root_name("dst")).await.unwrap(), before);
        first.release().await;
        assert_eq!(
            store.get_root(&root_name("dst")).await.unwrap(),
            None,
            "released: no root left"
        );
        assert!(store.list_roots("fleet-fork:").await.unwrap().is_empty());
        let second = Reservation::take_in(&store, "node-2", "i2", "dst").await.unwrap();
        assert_eq!(held(&store, "dst").await.unwrap().node_id, "node-2");
        second.release().await;
        assert!(store.list_roots("fleet-fork:").await.unwrap().is_empty());
    }

    /// A forker that crashed never releases. While its reservation has not
    /// expired the name stays refused, naming that node; once expired the
    /// next fork takes it over — and when two forks find it expired at
    /// once, still only one of them.
    #[tokio::test]
    async fn a_crashed_forkers_reservation_blocks_until_it_expires_then_one_fork_takes_it_over() {
        let store = MemoryStore::default();
        let now = now_unix_ms();
        leave(&store, "dst", "crashed", now + 60_000).await;
        let refused = Reservation::take_in(&store, "node-1", "i1", "dst").await;
        assert!(
            matches!(&refused, Err(ReserveError::Running { node, .. }) if node == "crashed"),
            "{refused:?}"
        );
        assert_eq!(held(&store, "dst").await.unwrap().node_id, "crashed");
        // Expired: taken over, by one of two racing forks only.
        leave(&store, "dst", "crashed", now - 1).await;
        let store = Gated::new(store, 2);
        let (first, second) = tokio::join!(
            Reservation::take_in(&store, "node-1", "i1", "dst"),
            Reservation::take_in(&store, "node-2", "i2", "dst"),
        );
        let winner = match (&first, &second) {
            (Ok(_), Err(ReserveError::Concurrent { .. })) => "node-1",
            (Err(ReserveError::Concurrent { .. }), Ok(_)) => "node-2",
            _ => panic!("{first:?} / {second:?}"),
        };
        let record = held(&store, "dst").await.unwrap();
        assert_eq!(record.node_id, winner);
        assert!(record.expires_unix_ms >= now + i64::try_from(HOLD.as_millis()).unwrap());
        // The winner's release frees it.
        first.into_iter().chain(second).next().unwrap().release().await;
        assert_eq!(held(&store, "dst").await.map(|record| record.node_id), None);
    }

    /// A reservation that expired and was taken over by another fork is no
    /// longer this one's: its release leaves the other's in place.
    #[tokio::test]
    async fn a_release_leaves_a_reservation_taken_over_meanwhile() {
        let store = MemoryStore::default();
        let stale = Reservation::take_in(&store, "node-1", "i1", "dst").await.unwrap();
        // As if it expired and node-2 took the name over.
        let taken_over = leave(&store, "dst", "node-2", now_unix_ms() + 60_000).await;
        stale.release().await;
        assert_eq!(store.get_root(&root_name("dst")).await.unwrap(), Some(taken_over));
    }
}
