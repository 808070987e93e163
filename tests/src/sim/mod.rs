//! The simulation tier of the fault suite: a seeded [`Plan`] run against
//! several transactor hosts in one process, on a current-thread runtime,
//! sharing one in-memory store that each sees through its own
//! `FaultyStore`. Clients transact with request ids and retry like the SDK;
//! subscribers follow each database across reconnects; at the end every
//! node is brought back, the logs are read and [`checker::check`] judges
//! the run.
//!
//! Deterministic where it can be: the plan, the storage coin flips and the
//! clients' choices come from the seed; the interleaving still depends on
//! the wall clock, because Corium's lease expiry reads the system clock
//! (no seam for a simulated one in 0.1.90), so a seed replays the same
//! faults at the same protocol boundaries, not the same schedule of every
//! task.
//!
//! Layout: [`plan`] — plans and their text form; [`world`] — the hosts and
//! their process events; this file — the workload and the run.

pub mod plan;
pub mod world;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use corium_fleet_faults::Rng;
use corium_fleet_transactor::FleetCatalog;
use corium_fleet_transactor::FleetTransactor;
use corium_fleet_wire::metadata::REQUEST_ID;
use corium_fleet_wire::not_owner;
use corium_protocol::pb;
use corium_protocol::pb::catalog_server::Catalog as _;
use corium_protocol::pb::transactor_server::Transactor as _;
use futures::StreamExt as _;
use prost::Message as _;
use tokio::time::Instant;

pub use plan::{Event, Plan, Shape};
use world::World;

use crate::checker::{self, Ack, Durable, History, Report};
use crate::corium;

/// The size of a simulated run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Nodes, databases and the lease TTL.
    pub shape: Shape,
    /// Writers per database, each sending `txs` transactions in turn.
    pub writers_per_db: usize,
    /// Transactions each writer sends.
    pub txs: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            shape: Shape {
                nodes: 3,
                dbs: 3,
                lease_ttl: Duration::from_millis(600),
            },
            writers_per_db: 2,
            txs: 12,
        }
    }
}

/// Deadline of one call (an attempt that takes longer is abandoned, like
/// a client's `grpc-timeout`).
const CALL_DEADLINE: Duration = Duration::from_secs(2);
/// How long one transaction may keep retrying before it is given up.
const TX_BUDGET: Duration = Duration::from_secs(30);
/// A crashed or drained node is restarted after this long.
const RESTART_AFTER: Duration = Duration::from_millis(1500);
/// Bound on a whole run (workload and checks), so a hung run fails.
const RUN_BOUND: Duration = Duration::from_mins(2);

fn db_name(index: usize) -> String {
    format!("db-{index}")
}

/// Shared between the workload tasks and the driver.
struct Shared {
    world: tokio::sync::RwLock<World>,
    history: Mutex<History>,
    started: Instant,
    /// Set when the writers are done; subscribers then catch up and stop.
    writers_done: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    fn record<R>(&self, with: impl FnOnce(&mut History) -> R) -> R {
        with(
            &mut self
                .history
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

/// Statuses a caller retries with the same request id; any other status
/// is a bug whatever failed.
fn retryable(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Aborted
            | tonic::Code::FailedPrecondition
            | tonic::Code::Cancelled
            | tonic::Code::ResourceExhausted
    )
}

/// Where to send the next attempt: the node a `NotOwner` named, else a
/// seeded random one.
fn next_node(status: Option<&tonic::Status>, world: &World, rng: &mut Rng) -> usize {
    if let Some(detail) = status.and_then(not_owner::from_status) {
        if let Some(n) = world.index_of(&detail.owner_id) {
            return n;
        }
        let candidates: Vec<usize> = detail
            .candidates
            .iter()
            .filter_map(|candidate| world.index_of(&candidate.node_id))
            .collect();
        if !candidates.is_empty() {
            return candidates[usize::try_from(rng.below(candidates.len() as u64)).unwrap_or(0)];
        }
    }
    usize::try_from(rng.below(world.len() as u64)).unwrap_or(0)
}

/// One transaction attempt at node `n`.
async fn attempt(
    shared: &Shared,
    n: usize,
    request: &pb::TransactRequest,
    id: &str,
) -> Result<tonic::Response<pb::TransactResponse>, tonic::Status> {
    let Some(host) = shared.world.read().await.host(n) else {
        return Err(tonic::Status::unavailable("node down (connection refused)"));
    };
    let mut call = tonic::Request::new(request.clone());
    call.metadata_mut()
        .insert(REQUEST_ID, id.parse().expect("uuid is ascii"));
    tokio::time::timeout(CALL_DEADLINE, FleetTransactor(host).transact(call))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("call deadline"))?
}

/// A writer: `txs` transactions into `db`, each with its own request id,
/// retried with that id until acknowledged (bounded).
async fn writer(shared: Arc<Shared>, db: String, writer: usize, txs: usize, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut last_status: Option<tonic::Status> = None;
    for k in 0..txs {
        let item = format!("{db}-w{writer}-{k}");
        let id = uuid::Uuid::from_u64_pair(seed, k as u64).to_string();
        let request = corium::transact_request(&db, &item);
        let deadline = Instant::now() + TX_BUDGET;
        loop {
            let n = next_node(last_status.as_ref(), &*shared.world.read().await, &mut rng);
            shared.record(|history| history.attempts += 1);
            match attempt(&shared, n, &request, &id).await {
                Ok(answer) => {
                    let ack = Ack::answered(&db, &item, &id, &answer, shared.started.elapsed());
                    shared.record(|history| history.acks.push(ack));
                    last_status = None;
                    break;
                }
                Err(status) => {
                    let at = shared.started.elapsed();
                    let code = status.code();
                    // A `NotOwner` naming the owner is a redirect (what the
                    // ingress follows for stock clients), not a failure.
                    let redirect =
                        not_owner::from_status(&status).is_some_and(|detail| !detail.owner_id.is_empty());
                    shared.record(|history| {
                        if !redirect {
                            history.errors.push((db.clone(), at, code));
                        }
                        if !retryable(code) {
                            history
                                .unexpected
                                .push(format!("{db} {item} at node-{n}: {code:?} {}", status.message()));
                        }
                    });
                    if !retryable(code) {
                        return;
                    }
                    if Instant::now() >= deadline {
                        shared.record(|history| history.abandoned.push((db.clone(), item.clone())));
                        break;
                    }
                    let not_owner_hint = not_owner::from_status(&status).is_some();
                    last_status = Some(status);
                    let pause = if not_owner_hint { 10 } else { 50 + rng.below(100) };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
            }
        }
    }
}

/// The last `t` a subscriber delivered (0: none yet).
fn last_t(delivered: &[checker::Delivered]) -> u64 {
    delivered.last().map_or(0, |(t, _)| *t)
}

/// A subscriber: follows `db` from the start across reconnects, recording
/// every transaction it delivers (skipping what a resumed stream backfills again,
/// as the SDK does), until the writers are done and it has caught up.
async fn subscriber(shared: Arc<Shared>, db: String, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut delivered: Vec<checker::Delivered> = Vec::new();
    let mut last_status: Option<tonic::Status> = None;
    let mut done = shared.writers_done.subscribe();
    let mut caught_up_at: Option<u64> = None;
    loop {
        if *done.borrow() && caught_up_at.is_some_and(|basis| last_t(&delivered) >= basis) {
            break;
        }
        let n = next_node(last_status.as_ref(), &*shared.world.read().await, &mut rng);
        let Some(host) = shared.world.read().await.host(n) else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let from = last_t(&delivered);
        let request = tonic::Request::new(crate::corium::subscribe_request(&db, from));
        let mut stream =
            match tokio::time::timeout(CALL_DEADLINE, FleetTransactor(host).subscribe(request)).await {
                Ok(Ok(response)) => response.into_inner(),
                Ok(Err(status)) => {
                    last_status = Some(status);
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    continue;
                }
                Err(_) => continue,
            };
        last_status = None;
        let mut interner = corium_core::KeywordInterner::default();
        loop {
            let next = tokio::select! {
                next = tokio::time::timeout(Duration::from_secs(3), stream.next()) => next,
                _ = done.changed(), if !*done.borrow() => continue,
            };
            let last = last_t(&delivered);
            match next {
                Ok(Some(Ok(pb::SubscribeItem {
                    item: Some(pb::subscribe_item::Item::Handshake(handshake)),
                }))) if *done.borrow() => caught_up_at = Some(handshake.basis_t),
                Ok(Some(Ok(pb::SubscribeItem {
                    item: Some(pb::subscribe_item::Item::Report(report)),
                }))) if report.t > last => {
                    let strings = corium::report_strings(&report, &mut interner).unwrap_or_default();
                    delivered.push((report.t, strings));
                }
                Ok(Some(Ok(_))) => {}
                // Stalled or ended: resubscribe from the last delivered t.
                Ok(Some(Err(_)) | None) | Err(_) => break,
            }
            if *done.borrow() {
                if caught_up_at.is_none() {
                    // Resubscribe to learn the basis at the end.
                    break;
                }
                if caught_up_at.is_some_and(|basis| last_t(&delivered) >= basis) {
                    break;
                }
            }
        }
    }
    shared.record(|history| {
        history.deliveries.insert((db.clone(), 0), delivered);
    });
}

/// Runs `f` against the owner of a database, following `NotOwner`s, until
/// it succeeds (bounded).
async fn at_owner<T, F, Fut>(shared: &Shared, mut f: F) -> Result<T, tonic::Status>
where
    F: FnMut(Arc<corium_fleet_transactor::Node>) -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut rng = Rng::new(7);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last: Option<tonic::Status> = None;
    loop {
        let n = next_node(last.as_ref(), &*shared.world.read().await, &mut rng);
        let host = shared.world.read().await.host(n);
        let result = match host {
            Some(host) => tokio::time::timeout(Duration::from_secs(10), f(host))
                .await
                .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("call deadline"))),
            None => Err(tonic::Status::unavailable("node down")),
        };
        match result {
            Ok(value) => return Ok(value),
            Err(status) if retryable(status.code()) && Instant::now() < deadline => {
                last = Some(status);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => return Err(status),
        }
    }
}

/// Applies one process event.
async fn apply(shared: &Shared, event: &Event) -> String {
    match event {
        Event::Crash(n) => {
            shared.world.write().await.crash(*n);
            format!("crashed node-{n}")
        }
        Event::Drain(n) => {
            // The node keeps answering while it hands its databases off
            // (as a real one does until its server stops), then stops.
            let host = shared.world.read().await.host(*n);
            if let Some(host) = host {
                host.host().release_all().await;
            }
            shared.world.write().await.stopped(*n).await;
            format!("drained node-{n}")
        }
        Event::Handoff(d) => {
            let db = db_name(*d);
            let world = shared.world.read().await;
            let owner =
                (0..world.len()).find(|n| world.host(*n).is_some_and(|host| host.host().cell(&db).is_some()));
            let Some(owner) = owner else {
                return format!("handoff of {db} skipped: no owner");
            };
            let node = world.host(owner).expect("owner is up");
            drop(world);
            let host = node.host();
            let target = host
                .candidates(&db)
                .into_iter()
                .find(|member| member.node_id != host.config.node_id);
            let Some(target) = target else {
                return format!("handoff of {db} skipped: no other candidate");
            };
            let outcome =
                tokio::time::timeout(Duration::from_secs(10), host.handoff(&db, &target.node_id)).await;
            format!(
                "handoff of {db} from node-{owner} to {}: {:?}",
                target.node_id,
                outcome.map(|r| r
                    .map(|r| r.lease_version)
                    .map_err(|e| tonic::Status::from(e).code()))
            )
        }
        Event::Map(d, nodes) => {
            let db = db_name(*d);
            let line = format!(
                "{db} = {}\n",
                nodes
                    .iter()
                    .map(|n| format!("node-{n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let map = corium_fleet_common::placement_map::Map::parse(&line).expect("generated map parses");
            let world = shared.world.read().await;
            for n in 0..world.len() {
                if let Some(host) = world.host(n) {
                    host.host().map.replace(map.clone());
                }
            }
            format!("placement map: {}", line.trim())
        }
    }
}

/// Runs one plan to its report. A run that does not finish within
/// `RUN_BOUND` is a violation; its report still shows what happened.
///
/// # Panics
/// When the simulated fleet cannot be set up at all.
pub async fn run(plan: &Plan, options: Options) -> Report {
    let shape = options.shape;
    let mut world = World::new(shape.nodes, shape.lease_ttl);
    for n in 0..shape.nodes {
        // Storage faults are armed once the databases exist (below), so
        // their times and operation counts fall in the run.
        world.start(n, corium_fleet_faults::Schedule::default()).await;
    }
    let (writers_done, _) = tokio::sync::watch::channel(false);
    let shared = Arc::new(Shared {
        world: tokio::sync::RwLock::new(world),
        history: Mutex::new(History::default()),
        started: Instant::now(),
        writers_done,
    });
    let label = format!("seed {}", plan.seed);
    tokio::time::timeout(RUN_BOUND, run_bounded(plan, options, Arc::clone(&shared)))
        .await
        .unwrap_or_else(|_| {
            let mut history = shared.record(|history| history.clone());
            history.unexpected.push(format!(
                "the run did not finish within {RUN_BOUND:?} (hung); history so far above"
            ));
            checker::check(&label, &history, &Durable::default(), &BTreeSet::new())
        })
}

async fn run_bounded(plan: &Plan, options: Options, shared: Arc<Shared>) -> Report {
    let shape = options.shape;
    for d in 0..shape.dbs {
        let db = db_name(d);
        at_owner(&shared, |host| {
            let db = db.clone();
            async move {
                FleetCatalog(host)
                    .create_database(tonic::Request::new(pb::CreateDatabaseRequest {
                        db,
                        schema: corium::schema(),
                        storage_key: String::new(),
                    }))
                    .await
                    .map(|_| ())
            }
        })
        .await
        .unwrap_or_else(|status| panic!("create {db}: {status:?}"));
    }
    // Arm the plan's storage schedules now that the databases exist: times
    // and operation counts start from here.
    {
        let world = shared.world.read().await;
        for (n, schedule) in &plan.storage {
            if let Some(store) = world.store(*n) {
                store.arm(schedule.clone());
            }
        }
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for d in 0..shape.dbs {
        for w in 0..options.writers_per_db {
            let seed = plan.seed.wrapping_mul(1000).wrapping_add((d * 100 + w) as u64);
            tasks.push(tokio::spawn(writer(
                Arc::clone(&shared),
                db_name(d),
                w,
                options.txs,
                seed,
            )));
        }
    }
    let subscribers: Vec<_> = (0..shape.dbs)
        .map(|d| tokio::spawn(subscriber(Arc::clone(&shared), db_name(d), plan.seed ^ d as u64)))
        .collect();
    // Drive the plan's events and the supervisor until the writers finish.
    let mut events = plan.events.iter().peekable();
    while !tasks.iter().all(tokio::task::JoinHandle::is_finished) {
        while let Some((at, event)) = events.peek() {
            if started.elapsed() < *at {
                break;
            }
            let done = apply(&shared, event).await;
            shared.record(|history| history.faults.push(format!("@{}ms {done}", at.as_millis())));
            events.next();
        }
        let restarted = shared.world.write().await.supervise(RESTART_AFTER).await;
        for n in restarted {
            let at = started.elapsed().as_millis();
            shared.record(|history| history.faults.push(format!("@{at}ms node-{n} restarted")));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for task in tasks {
        let _ = task.await;
    }
    shared.world.write().await.heal().await;
    let _ = shared.writers_done.send(true);
    for subscriber in subscribers {
        if tokio::time::timeout(Duration::from_secs(30), subscriber)
            .await
            .is_err()
        {
            shared.record(|history| {
                history
                    .unexpected
                    .push("a subscriber did not catch up within 30 s".to_owned());
            });
        }
    }
    let durable = read_back(&shared, shape.dbs).await;
    let mut history = shared.record(|history| history.clone());
    for (node, injected) in shared.world.read().await.injected() {
        history
            .faults
            .push(format!("{node} storage faults injected: {injected:?}"));
    }
    for (n, schedule) in &plan.storage {
        history
            .faults
            .insert(0, format!("node-{n} storage schedule: {schedule}"));
    }
    shared.world.write().await.shutdown();
    checker::check(
        &format!("seed {}", plan.seed),
        &history,
        &durable,
        &BTreeSet::new(),
    )
}

/// The durable state at the end: each log read through its owner, the
/// native log's record keys listed from storage, and every third request id
/// sent again.
async fn read_back(shared: &Shared, dbs: usize) -> Durable {
    let mut durable = Durable::default();
    for d in 0..dbs {
        let db = db_name(d);
        let log = at_owner(shared, |host| {
            let db = db.clone();
            async move {
                let mut stream = FleetTransactor(host)
                    .subscribe(tonic::Request::new(crate::corium::subscribe_request(&db, 0)))
                    .await?
                    .into_inner();
                corium::read_log(&mut stream).await
            }
        })
        .await;
        match log {
            Ok(log) => {
                durable.logs.insert(db.clone(), log);
            }
            Err(status) => shared.record(|history| {
                history
                    .unexpected
                    .push(format!("{db}: log could not be read back: {status:?}"));
            }),
        }
        let store = Arc::clone(&shared.world.read().await.shared);
        match checker::record_keys(store.as_ref(), &db).await {
            Ok(keys) => {
                durable.record_keys.insert(db, keys);
            }
            Err(error) => shared.record(|history| {
                history
                    .unexpected
                    .push(format!("{db}: log records could not be listed: {error}"));
            }),
        }
    }
    let acks: Vec<Ack> = shared.record(|history| history.acks.clone());
    for (index, ack) in acks.iter().enumerate().step_by(3) {
        let request = corium::transact_request(&ack.db, &ack.item);
        let replayed = at_owner(shared, |host| {
            let mut call = tonic::Request::new(request.clone());
            call.metadata_mut()
                .insert(REQUEST_ID, ack.request_id.parse().expect("uuid is ascii"));
            async move { FleetTransactor(host).transact(call).await }
        })
        .await
        .map(|response| response.into_inner().encode_to_vec())
        .map_err(|status| format!("{:?} {}", status.code(), status.message()));
        durable.replays.push((index, replayed));
    }
    durable
}
