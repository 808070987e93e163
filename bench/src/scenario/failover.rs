//! Failover and handoff, measured from a client's side under a steady write
//! load through the ingress: SIGKILL of the owner → first acknowledged
//! commit; admin handoff and SIGTERM drain → the longest gap between
//! acknowledged commits around the event.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use corium_fleet_tests::{Backend, Fleet, corium};
use serde::Serialize;

use crate::stats::{self, Spread};

/// The scenario's result, in milliseconds.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) backend: String,
    pub(crate) lease_ttl_ms: u64,
    /// SIGKILL of the owner → first commit acknowledged through the ingress.
    pub(crate) sigkill_to_commit_ms: Spread,
    /// Admin handoff: the owner's own measure (stop admitting → target serves).
    pub(crate) handoff_reported_ms: Spread,
    /// Admin handoff: longest gap between a client's acknowledged commits.
    pub(crate) handoff_client_gap_ms: Spread,
    /// SIGTERM drain of the owner: longest client gap.
    pub(crate) drain_client_gap_ms: Spread,
    /// The client's gap with nothing happening (the baseline).
    pub(crate) quiet_client_gap_ms: Spread,
    /// Transactions in the database before the first event.
    pub(crate) history: usize,
    /// The successor's own recovery after the SIGKILL (its
    /// `corium_fleet_recovery_seconds`), without waiting out the lease.
    pub(crate) takeover_recovery_ms: Spread,
    /// Calls the client saw fail, summed over the repetitions of each event.
    pub(crate) client_errors: ClientErrors,
    pub(crate) load: String,
}

/// Failed calls the clients saw, by event: the writer's `Transact`s (with
/// request ids) and a second client's `Sync`s (without: the ingress may not
/// resend them after an ambiguous failure).
#[derive(Debug, Default, Serialize)]
pub(crate) struct ClientErrors {
    pub(crate) sigkill: usize,
    pub(crate) handoff: usize,
    pub(crate) drain: usize,
    pub(crate) sync_sigkill: usize,
    pub(crate) sync_handoff: usize,
    pub(crate) sync_drain: usize,
}

/// A client committing through the ingress in a loop, recording the time of
/// every acknowledgement.
struct Writer {
    acks: Arc<Mutex<Vec<Instant>>>,
    errors: Arc<Mutex<Vec<Instant>>>,
    /// When the `Sync` client's calls failed.
    sync_errors: Arc<Mutex<Vec<Instant>>>,
    syncer: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    fn start(address: String, db: &'static str) -> Self {
        let address_for_sync = address.clone();
        let acks = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let recorded = Arc::clone(&acks);
        let failed = Arc::clone(&errors);
        let task = tokio::spawn(async move {
            let channel = corium::channel(&address).await;
            let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(channel);
            for n in 0u64.. {
                if *stopped.borrow() {
                    return;
                }
                let mut request = tonic::Request::new(corium::transact_request(db, &format!("w-{n}")));
                request.set_timeout(Duration::from_secs(10));
                let id = uuid::Uuid::new_v4().to_string();
                if let Ok(value) = id.parse() {
                    request
                        .metadata_mut()
                        .insert(corium_fleet_wire::metadata::REQUEST_ID, value);
                }
                if client.transact(request).await.is_ok() {
                    recorded
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Instant::now());
                } else {
                    failed
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(Instant::now());
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        });
        let sync_errors = Arc::new(Mutex::new(Vec::new()));
        let syncer = {
            let failed = Arc::clone(&sync_errors);
            let mut stopped = stop.subscribe();
            tokio::spawn(async move {
                let channel = corium::channel(&address_for_sync).await;
                let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(channel);
                while !*stopped.borrow_and_update() {
                    let mut request = tonic::Request::new(corium_protocol::pb::SyncRequest {
                        db: db.to_owned(),
                        t: 0,
                    });
                    request.set_timeout(Duration::from_secs(10));
                    if client.sync(request).await.is_err() {
                        failed
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .push(Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Self {
            acks,
            errors,
            sync_errors,
            syncer,
            stop,
            task,
        }
    }

    /// Failed `Sync`s in `[from, to]`.
    fn sync_errors_between(&self, from: Instant, to: Instant) -> usize {
        self.sync_errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|at| **at >= from && **at <= to)
            .count()
    }

    /// Failed calls in `[from, to]`.
    fn errors_between(&self, from: Instant, to: Instant) -> usize {
        self.errors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|at| **at >= from && **at <= to)
            .count()
    }

    fn first_after(&self, at: Instant) -> Option<Instant> {
        self.acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .copied()
            .find(|ack| *ack > at)
    }

    /// The longest gap between acknowledgements in `[from, to]`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let acks = self
            .acks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let window: Vec<Instant> = acks
            .iter()
            .copied()
            .filter(|ack| *ack >= from && *ack <= to)
            .collect();
        window
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or(Duration::ZERO)
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(15), self.task).await;
        let _ = tokio::time::timeout(Duration::from_secs(15), self.syncer).await;
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

async fn owner_index(fleet: &Fleet, db: &str) -> anyhow::Result<usize> {
    let view = corium::placement(&fleet.ingresses[0].endpoint(), db).await;
    Ok(fleet.index(&view.owner_id))
}

/// Waits (bounded) until the writer has acknowledged something after `at`.
async fn acked_after(writer: &Writer, at: Instant, limit: Duration) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(ack) = writer.first_after(at) {
            return Ok(ack);
        }
        anyhow::ensure!(Instant::now() < deadline, "no commit within {limit:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Seconds of recovery a node has spent, from its `/metrics`.
async fn recovery_seconds(fleet: &Fleet, index: usize) -> anyhow::Result<f64> {
    let (_, text) = corium_fleet_tests::http_get(fleet.nodes[index].admin, "/metrics")
        .await
        .ok_or_else(|| anyhow::anyhow!("no /metrics from node {index}"))?;
    corium_fleet_tests::metric(&text, "corium_fleet_recovery_seconds_sum")
        .ok_or_else(|| anyhow::anyhow!("no corium_fleet_recovery_seconds_sum"))
}

/// Runs `reps` repetitions of each event on a database with `history`
/// transactions written first.
///
/// # Errors
/// When the fleet does not recover within bounds.
pub(crate) async fn run(
    backend: Backend,
    reps: usize,
    history: usize,
    ingress_flags: &[&str],
    node_flags: &[&str],
) -> anyhow::Result<Result> {
    const DB: &str = "bench-failover";
    let ttl = Duration::from_secs(5);
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(ttl)
        .node_flags(node_flags)
        .start()
        .await;
    fleet.start_ingresses(1, ingress_flags).await;
    let address = fleet.ingresses[0].endpoint();
    corium::create(&address, DB).await?;
    if history > 0 {
        let shape = crate::load::Shape {
            concurrency: 16,
            requests: history,
            request_ids: false,
        };
        crate::load::transact(&address, DB, "history", shape).await?;
    }
    measure(&mut fleet, DB, reps, ttl, history, false).await
}

/// Waits (at most a minute) until the candidate of `db` other than `owner`
/// follows it as a hot standby and has applied a transaction from its
/// stream since this call (the writer keeps writing): a move then finds the
/// successor as a promotion in place would. `false` when it did not.
pub(crate) async fn await_hot_standby(fleet: &Fleet, db: &str, owner: usize) -> bool {
    let Some(successor) = fleet.other_candidate(db, owner) else {
        return false;
    };
    let applied = || async {
        let text = super::metrics(fleet.nodes[successor].admin).await;
        (
            super::counter(&text, "corium_fleet_hot_standbys"),
            super::counter(&text, "corium_fleet_hot_standby_applied_total"),
        )
    };
    let (_, from) = applied().await;
    let deadline = Instant::now() + Duration::from_mins(1);
    while Instant::now() < deadline {
        let (followed, now) = applied().await;
        if followed >= 1.0 && now > from {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The events of [`run`] on `fleet` (its first ingress, `db` written with
/// `history` transactions already): `reps` times SIGKILL of the owner, an
/// admin handoff and a SIGTERM drain, under a client's steady writes; with
/// `hot_standbys`, each event waits first for the successor to follow
/// ([`await_hot_standby`]).
///
/// # Errors
/// When the fleet does not recover within bounds.
pub(crate) async fn measure(
    fleet: &mut Fleet,
    db: &'static str,
    reps: usize,
    ttl: Duration,
    history: usize,
    hot_standbys: bool,
) -> anyhow::Result<Result> {
    let name = match &fleet.backend {
        Backend::Filesystem => "filesystem",
        Backend::Postgres { .. } => "postgres",
        Backend::S3 { .. } => "s3",
    };
    let address = fleet.ingresses[0].endpoint();
    let writer = Writer::start(address.clone(), db);
    // Which build, store, length and event an error is about.
    let build = if hot_standbys {
        "this build"
    } else {
        "the previous release"
    };
    let at = |event: &str| format!("{name}, {build}, {history} transactions: {event}");
    acked_after(&writer, Instant::now(), Duration::from_secs(30))
        .await
        .with_context(|| at("the writer's first commit"))?;
    let (mut kill, mut handoff_reported, mut handoff_gap, mut drain_gap, mut quiet_gap) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut takeover = Vec::new();
    let mut errors = ClientErrors::default();
    for _ in 0..reps {
        // Quiet baseline.
        let from = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        quiet_gap.push(ms(writer.longest_gap(from, Instant::now())));
        // SIGKILL.
        let owner = owner_index(fleet, db).await?;
        if hot_standbys && !await_hot_standby(fleet, db, owner).await {
            eprintln!("the successor of {db} did not follow it within a minute; measuring anyway");
        }
        let mut recovered = Vec::new();
        for index in 0..fleet.nodes.len() {
            recovered.push(if index == owner {
                0.0
            } else {
                recovery_seconds(fleet, index).await?
            });
        }
        fleet.nodes[owner].kill();
        let killed = Instant::now();
        let first = acked_after(&writer, killed, ttl * 6)
            .await
            .with_context(|| at("after the owner's SIGKILL"))?;
        kill.push(ms(first - killed));
        errors.sigkill += writer.errors_between(killed, first);
        errors.sync_sigkill += writer.sync_errors_between(killed, first + Duration::from_millis(500));
        let successor = owner_index(fleet, db).await?;
        takeover.push((recovery_seconds(fleet, successor).await? - recovered[successor]) * 1e3);
        fleet.nodes[owner].restart().await;
        // Admin handoff to the other candidate.
        let owner = owner_index(fleet, db).await?;
        if hot_standbys && !await_hot_standby(fleet, db, owner).await {
            eprintln!("the successor of {db} did not follow it within a minute; measuring anyway");
        }
        let started = Instant::now();
        let unavailable_ms = super::hand_off_from(fleet, owner, db).await?;
        handoff_reported.push(f64::from(u32::try_from(unavailable_ms).unwrap_or(u32::MAX)));
        acked_after(&writer, Instant::now(), Duration::from_secs(30))
            .await
            .with_context(|| at("after the handoff"))?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        handoff_gap.push(ms(writer.longest_gap(started, Instant::now())));
        errors.handoff += writer.errors_between(started, Instant::now());
        errors.sync_handoff += writer.sync_errors_between(started, Instant::now());
        // SIGTERM drain of the owner.
        let owner = owner_index(fleet, db).await?;
        if hot_standbys && !await_hot_standby(fleet, db, owner).await {
            eprintln!("the successor of {db} did not follow it within a minute; measuring anyway");
        }
        let started = Instant::now();
        fleet.nodes[owner].terminate().await;
        let drained = ms(started.elapsed());
        acked_after(&writer, Instant::now(), Duration::from_secs(30))
            .await
            .with_context(|| {
                at(&format!(
                    "after the SIGTERM drain (the node took {drained:.0} ms to exit)"
                ))
            })?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        drain_gap.push(ms(writer.longest_gap(started, Instant::now())));
        errors.drain += writer.errors_between(started, Instant::now());
        errors.sync_drain += writer.sync_errors_between(started, Instant::now());
        fleet.nodes[owner].restart().await;
    }
    writer.stop().await;
    Ok(Result {
        backend: name.to_owned(),
        lease_ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        sigkill_to_commit_ms: stats::spread(&kill),
        handoff_reported_ms: stats::spread(&handoff_reported),
        handoff_client_gap_ms: stats::spread(&handoff_gap),
        drain_client_gap_ms: stats::spread(&drain_gap),
        quiet_client_gap_ms: stats::spread(&quiet_gap),
        history,
        takeover_recovery_ms: stats::spread(&takeover),
        client_errors: errors,
        load: stats::load(),
    })
}
