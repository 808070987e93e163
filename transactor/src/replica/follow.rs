//! One read replica: a stock `corium_peer::Connection` subscribed to the
//! database's owner, the stock peer-server service over it, and the probe
//! that tells whether it still follows that owner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use corium_fleet_proto::fleet::NotOwner;
use corium_fleet_wire::not_owner;
use corium_peer::server::{PeerServerConfig, PeerServerSvc};
use corium_peer::{ConnectConfig, Connection};
use corium_protocol::authz::Guard;
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Status;

use corium_fleet_common::names;

use super::counts::ReadCounts;
use super::relay::{Owner, Relay, Seat};
use super::{ReplicaError, owner};
use crate::host::Host;

/// Called with the database's name when a replica stops following: drops
/// it from the node's set, so the next read builds one that follows the
/// current owner.
pub(super) type Retire = Arc<dyn Fn(String) + Send + Sync>;

/// How a replica follows: shared by the node's replicas.
pub(super) struct Following {
    /// How often the probe asks the owner for its basis.
    pub interval: Duration,
    /// Where the replica's connection subscribes.
    pub relay: Arc<Relay>,
    /// The node's replica counts (owner changes are counted here).
    pub counts: Arc<ReadCounts>,
    /// Drops a retired replica from the node's set.
    pub retire: Retire,
}

/// A replica stops serving once it has not heard from its owner in this
/// many follow periods.
const LAPSE_PERIODS: u32 = 3;

/// Consecutive failed probes after which the replica looks up who holds
/// the lease now (one `NotOwner` is enough).
const LOOK_UP_AFTER_FAILURES: u32 = 2;

/// Follow periods without an owner's answer after which a replica is
/// retired (the next read builds one): longer than a failover (a lease TTL
/// and the successor's open) at the default period.
const RETIRE_AFTER_PERIODS: u32 = 40;

/// How soon the probe asks again while no owner answers (a move in
/// progress), when that is sooner than a period.
const PROBE_WHILE_MOVING: Duration = Duration::from_millis(100);

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
    /// This replica's place at the relay, holding the owner it follows:
    /// whom the probe asks and where the connection's subscription is
    /// forwarded; changed when the lease moves.
    seat: Seat,
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
    counts: Arc<ReadCounts>,
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
    /// Subscribes to `db` (through the relay, which forwards to `owner` at
    /// `endpoint`) and waits until the replica has applied the owner's
    /// basis, then starts the follow probe.
    pub(super) async fn connect(
        host: &Arc<Host>,
        guard: Guard,
        db: &str,
        owner: &str,
        endpoint: &str,
        following: Following,
    ) -> Result<Arc<Self>, ReplicaError> {
        let Following {
            interval: follow_interval,
            relay,
            counts,
            retire,
        } = following;
        let client = TransactorClient::new(host.peers.channel(endpoint, owner).await?);
        let seat = relay
            .seat(Owner {
                node: owner.to_owned(),
                client,
            })
            .ok_or_else(|| {
                ReplicaError::not_now(
                    "this node's replica relay is not serving; try another".to_owned(),
                    follow_interval,
                )
            })?;
        let mut config = ConnectConfig::new(seat.endpoint.clone(), db.to_owned());
        config.token = Some(seat.token.clone());
        // A lost stream (the probe followed a new owner, which ends the
        // relayed stream) is taken up again at once, from the replica's
        // basis, at the relay, which forwards to the owner then.
        config.reconnect_min = Duration::from_millis(50);
        config.reconnect_max = Duration::from_millis(250);
        let connection = Connection::connect(config).await.map_err(|error| {
            ReplicaError::not_now(
                format!("cannot follow {db:?} at its owner {owner}: {error}"),
                follow_interval,
            )
        })?;
        let connection = Arc::new(connection);
        let service =
            PeerServerSvc::new(Arc::clone(&connection), PeerServerConfig::default()).with_guard(guard);
        let basis = connection.basis_t();
        let replica = Arc::new(Self {
            db: db.to_owned(),
            seat,
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
            counts,
            probe: Mutex::new(None),
        });
        let probe = tokio::spawn(follow(Arc::downgrade(&replica), Arc::downgrade(host), retire));
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
                    self.owner_node(),
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
        if let Some(token) = self.seat.node_token() {
            request.metadata_mut().insert("authorization", token);
        }
        let answer = self.seat.owner().client.sync(request).await?.into_inner();
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

impl Replica {
    /// The node this replica follows now.
    fn owner_node(&self) -> String {
        self.seat.owner().node
    }

    /// Who holds the lease now — the node a `NotOwner` from the old owner
    /// named (`hint`; the named node checks its own lease when asked), else
    /// the lease root — and, when it is another node, follows it: the probe
    /// asks it from now on, and the relayed stream ends so the connection
    /// resubscribes there from its basis. Returns whether the owner changed.
    ///
    /// Nothing the replica holds is wrong for the new owner: it applied only
    /// what an owner streamed, which is what that owner acknowledged, and
    /// every later lease holder's log holds every acknowledged transaction
    /// (the fencing invariant). Until it has applied what the new owner had
    /// one period ago, its reads are refused as before (`check_following`).
    async fn follow_the_holder(
        &self,
        host: &Arc<Host>,
        hint: Option<NotOwner>,
    ) -> Result<bool, ReplicaError> {
        let (node, endpoint) = match hint {
            Some(hint) if !hint.owner_id.is_empty() && !hint.route_endpoint.is_empty() => {
                (hint.owner_id, hint.route_endpoint)
            }
            _ => owner::holder(host, names::home(&self.db)).await?,
        };
        let before = self.owner_node();
        if node == before {
            return Ok(false);
        }
        let client = TransactorClient::new(host.peers.channel(&endpoint, &node).await?);
        self.seat.follow(Owner {
            node: node.clone(),
            client,
        });
        self.counts.owner_changes.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            db = %self.db,
            from = %before,
            to = %node,
            basis_t = self.basis_t(),
            "read replica follows the database's new owner"
        );
        Ok(true)
    }

    fn retire(&self, retire: &Retire, why: &str, status: &Status) {
        self.retired.store(true, Ordering::Relaxed);
        tracing::info!(
            db = %self.db,
            owner = %self.owner_node(),
            why,
            code = ?status.code(),
            "read replica stopped following; retired"
        );
        retire(self.db.clone());
    }
}

/// The follow probe: every period (every [`PROBE_WHILE_MOVING`] while no
/// owner answers), the owner's basis. A `NotOwner`, or
/// [`LOOK_UP_AFTER_FAILURES`] failures in a row, look up who holds the lease
/// now and follow it; a `NOT_FOUND` (the database was deleted), or
/// [`RETIRE_AFTER_PERIODS`] periods with no owner answering, retire the
/// replica. Ends when the replica is dropped or retired.
async fn follow(replica: Weak<Replica>, host: Weak<Host>, retire: Retire) {
    let mut failures = 0;
    // Since when no owner has answered (`None` while one does).
    let mut failing_since: Option<Instant> = None;
    loop {
        let Some((interval, nudged)) = replica
            .upgrade()
            .map(|replica| (replica.follow_interval, replica.seat.nudged()))
        else {
            return;
        };
        // While the owner does not answer (a move in progress), ask again
        // sooner: the replica serves again as soon as the new owner answers.
        let pause = if failing_since.is_some() {
            interval.min(PROBE_WHILE_MOVING)
        } else {
            interval
        };
        // Or at once when the owner refused or ended a relayed subscription
        // (a move under way).
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = nudged.notified() => {}
        }
        let (Some(this), Some(host)) = (replica.upgrade(), host.upgrade()) else {
            return;
        };
        let Err(status) = this.owner_basis().await else {
            failures = 0;
            failing_since = None;
            continue;
        };
        failures += 1;
        let since = *failing_since.get_or_insert_with(Instant::now);
        if status.code() == tonic::Code::NotFound {
            this.retire(&retire, "the database was deleted", &status);
            return;
        }
        // The lease moved (at once), or the owner stopped answering.
        let moved = not_owner::from_status(&status);
        if moved.is_some() || failures >= LOOK_UP_AFTER_FAILURES {
            match this.follow_the_holder(&host, moved).await {
                // Heard from the new owner at once, so reads need not wait
                // a period for it (the staleness rule is unchanged).
                Ok(true) if this.owner_basis().await.is_ok() => {
                    failures = 0;
                    failing_since = None;
                }
                Ok(_) => {}
                Err(error) if error.is_about_the_name() => {
                    this.retire(&retire, "the database is gone", &status);
                    return;
                }
                Err(error) => {
                    tracing::debug!(db = %this.db, %error, "no owner for the read replica to follow yet");
                }
            }
        }
        if failing_since.is_some() && since.elapsed() >= interval * RETIRE_AFTER_PERIODS {
            this.retire(&retire, "no owner answered", &status);
            return;
        }
    }
}
