//! One read replica: a stock `corium_peer::Connection` subscribed to the
//! database's owner, the stock peer-server service over it, and the probe
//! that tells whether it still follows that owner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use corium_fleet_wire::not_owner;
use corium_peer::server::{PeerServerConfig, PeerServerSvc};
use corium_peer::{ConnectConfig, Connection};
use corium_protocol::authz::Guard;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Status;
use tonic::transport::Channel;

use super::ReplicaError;
use crate::host::Host;

/// Called with the database's name when a replica stops following: drops
/// it from the node's set, so the next read builds one that follows the
/// current owner.
pub(super) type Retire = Arc<dyn Fn(String) + Send + Sync>;

/// A replica stops serving once it has not heard from its owner in this
/// many follow periods.
const LAPSE_PERIODS: u32 = 3;

/// Consecutive failed probes after which a replica is retired (one
/// `NotOwner` is enough).
const RETIRE_AFTER_FAILURES: u32 = 2;

/// What the follow probe last learned.
#[derive(Clone, Copy, Debug)]
struct Followed {
    /// When the owner last answered.
    heard: Instant,
    /// The owner's basis then.
    owner_basis: u64,
    /// The owner's basis one answer earlier: a replica that follows has
    /// applied at least this much (its stream is milliseconds behind, the
    /// probe a period), so a replica below it has lost its stream.
    before: u64,
}

/// One database's read replica on this node.
pub(crate) struct Replica {
    db: String,
    /// The node whose lease this replica follows (over mTLS its certificate
    /// was verified to name it).
    owner: String,
    connection: Arc<Connection>,
    /// Stock Corium's peer server over `connection`, with the node's guard:
    /// authorization, views, fuel and chunking are Corium's.
    pub service: PeerServerSvc,
    followed: Mutex<Followed>,
    /// Set when the probe found the owner gone or changed: never serves
    /// again.
    retired: AtomicBool,
    /// For `lag`: the last probe's owner basis less the replica's.
    lag: AtomicU64,
    follow_interval: Duration,
    /// A client for the owner's `Sync`, over the connection the probe uses.
    owner_client: TransactorClient<Channel>,
    token: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    probe: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        if let Some(probe) = self
            .probe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            probe.abort();
        }
    }
}

impl Replica {
    /// Subscribes to `db` at `owner` (`endpoint`) and waits until the
    /// replica has applied the owner's basis, then starts the follow probe.
    pub(super) async fn connect(
        host: &Arc<Host>,
        guard: Guard,
        db: &str,
        owner: &str,
        endpoint: &str,
        follow_interval: Duration,
        retire: Retire,
    ) -> Result<Arc<Self>, ReplicaError> {
        let mut config = ConnectConfig::new(endpoint.to_owned(), db.to_owned());
        config.token = host.peers.token().map(str::to_owned);
        config.tls = host.peers.tls_for(owner)?;
        // A lost stream is retried quickly; a replica that cannot get it
        // back is retired by its probe and rebuilt against the new owner.
        config.reconnect_min = Duration::from_millis(50);
        config.reconnect_max = Duration::from_secs(1);
        let connection = Connection::connect(config).await.map_err(|error| {
            ReplicaError::not_now(
                format!("cannot follow {db:?} at its owner {owner}: {error}"),
                follow_interval,
            )
        })?;
        let owner_client = TransactorClient::new(host.peers.channel(endpoint, owner).await?);
        let connection = Arc::new(connection);
        let service =
            PeerServerSvc::new(Arc::clone(&connection), PeerServerConfig::default()).with_guard(guard);
        let basis = connection.basis_t();
        let replica = Arc::new(Self {
            db: db.to_owned(),
            owner: owner.to_owned(),
            connection,
            service,
            // `connect` returned after applying the owner's basis at
            // subscription time: it follows now.
            followed: Mutex::new(Followed {
                heard: Instant::now(),
                owner_basis: basis,
                before: basis,
            }),
            retired: AtomicBool::new(false),
            lag: AtomicU64::new(0),
            follow_interval,
            owner_client,
            token: host
                .peers
                .token()
                .and_then(|token| format!("Bearer {token}").parse().ok()),
            probe: Mutex::new(None),
        });
        let probe = tokio::spawn(follow(Arc::downgrade(&replica), retire));
        *replica
            .probe
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(probe);
        tracing::info!(db, owner, basis_t = basis, "read replica following its owner");
        Ok(replica)
    }

    /// Whether the probe found the owner gone or changed.
    #[must_use]
    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Relaxed)
    }

    /// Transactions this replica was behind its owner at the last probe.
    #[must_use]
    pub(crate) fn lag(&self) -> u64 {
        self.lag.load(Ordering::Relaxed)
    }

    /// The basis this replica has applied.
    #[must_use]
    pub(crate) fn basis_t(&self) -> u64 {
        self.connection.basis_t()
    }

    /// The datoms this replica's database value holds (its whole history,
    /// as an owner's does): what the memory budget charges it.
    #[must_use]
    pub(crate) fn recorded_datoms(&self) -> usize {
        self.connection.db().recorded_len()
    }

    /// The furthest basis known of the database: the owner's at the last
    /// probe, or this replica's own if it has applied more since.
    #[must_use]
    pub(crate) fn owner_basis_seen(&self) -> u64 {
        let followed = self
            .followed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .owner_basis;
        followed.max(self.basis_t())
    }

    /// Refuses unless the replica follows its owner now.
    ///
    /// # Errors
    /// `UNAVAILABLE` with a retry hint.
    pub(crate) fn check_following(&self) -> Result<(), ReplicaError> {
        if self.is_retired() {
            return Err(ReplicaError::not_now(
                format!(
                    "the read replica of {:?} stopped following its owner; retry",
                    self.db
                ),
                self.follow_interval,
            ));
        }
        let followed = *self
            .followed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let silent = followed.heard.elapsed();
        if silent > self.follow_interval * LAPSE_PERIODS {
            return Err(ReplicaError::not_now(
                format!(
                    "the read replica of {:?} has not heard from its owner {} for {} ms; retry",
                    self.db,
                    self.owner,
                    silent.as_millis()
                ),
                self.follow_interval,
            ));
        }
        let basis = self.basis_t();
        if basis < followed.before {
            return Err(ReplicaError::not_now(
                format!(
                    "the read replica of {:?} is at {basis}, behind its owner's {}; retry",
                    self.db, followed.before
                ),
                self.follow_interval,
            ));
        }
        Ok(())
    }

    /// Waits, within `within`, until the replica has applied `min_basis`
    /// and the basis `view_t` names (capped at the owner's basis, which is
    /// asked for only when the replica is behind `view_t`). Returns whether
    /// it had to wait.
    ///
    /// # Errors
    /// `UNAVAILABLE` with a retry hint when the basis is not reached in
    /// time (nothing stale is ever answered).
    pub(crate) async fn reach(
        &self,
        min_basis: Option<u64>,
        view_t: Option<u64>,
        within: Duration,
    ) -> Result<bool, ReplicaError> {
        let started = Instant::now();
        let local = self.basis_t();
        let mut target = min_basis.unwrap_or(0);
        if let Some(t) = view_t
            && t > local.max(target)
        {
            // A stock peer server answers a view past its basis with its
            // present; here "its basis" is the owner's.
            // The owner cannot say (it is losing the lease, or gone): nothing
            // was read, so the caller may try another replica or later.
            let owner_basis = tokio::time::timeout(within, self.owner_basis())
                .await
                .map_err(|_| self.too_far(t, within))?
                .map_err(|status| {
                    ReplicaError::not_now(
                        format!(
                            "the read replica of {:?} cannot learn its owner's basis ({}: {}); retry",
                            self.db,
                            status.code(),
                            status.message()
                        ),
                        self.follow_interval,
                    )
                })?;
            target = target.max(t.min(owner_basis));
        }
        if local >= target {
            return Ok(false);
        }
        let left = within.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.connection.sync_to(target)).await {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(error)) => Err(ReplicaError::not_now(
                format!("the read replica of {:?} closed: {error}; retry", self.db),
                self.follow_interval,
            )),
            Err(_) => Err(self.too_far(target, within)),
        }
    }

    fn too_far(&self, target: u64, within: Duration) -> ReplicaError {
        ReplicaError::not_now(
            format!(
                "the read replica of {:?} did not reach basis {target} within {} ms (it is at {}); retry",
                self.db,
                within.as_millis(),
                self.basis_t()
            ),
            self.follow_interval,
        )
    }

    /// The owner's basis now (its `Sync` with `t` 0).
    async fn owner_basis(&self) -> Result<u64, Status> {
        let mut request = tonic::Request::new(pb::SyncRequest {
            db: self.db.clone(),
            t: 0,
        });
        request.set_timeout(self.follow_interval.max(Duration::from_secs(1)));
        if let Some(token) = &self.token {
            request.metadata_mut().insert("authorization", token.clone());
        }
        let answer = self.owner_client.clone().sync(request).await?.into_inner();
        let mut followed = self
            .followed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *followed = Followed {
            heard: Instant::now(),
            owner_basis: answer.basis_t,
            before: followed.owner_basis,
        };
        self.lag
            .store(answer.basis_t.saturating_sub(self.basis_t()), Ordering::Relaxed);
        Ok(answer.basis_t)
    }
}

/// The follow probe: every period, the owner's basis; a `NotOwner`, a
/// `NOT_FOUND` (the database was deleted), or [`RETIRE_AFTER_FAILURES`]
/// failures in a row, retire the replica. Ends
/// when the replica is dropped or retired.
async fn follow(replica: Weak<Replica>, retire: Retire) {
    let mut failures = 0;
    loop {
        let Some(interval) = replica.upgrade().map(|replica| replica.follow_interval) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let Some(this) = replica.upgrade() else {
            return;
        };
        match this.owner_basis().await {
            Ok(_) => failures = 0,
            Err(status) => {
                failures += 1;
                // The lease moved, or the database is gone: at once.
                let moved = not_owner::from_status(&status).is_some();
                let deleted = status.code() == tonic::Code::NotFound;
                if moved || deleted || failures >= RETIRE_AFTER_FAILURES {
                    this.retired.store(true, Ordering::Relaxed);
                    tracing::info!(
                        db = %this.db,
                        owner = %this.owner,
                        moved,
                        deleted,
                        code = ?status.code(),
                        "read replica stopped following its owner; retired"
                    );
                    retire(this.db.clone());
                    return;
                }
            }
        }
    }
}
