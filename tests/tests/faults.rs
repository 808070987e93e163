//! The process tier of the fault suite: a seeded plan of real process
//! faults against real binaries — SIGSTOP of an owner past its lease then
//! SIGCONT (a zombie that must be fenced), SIGKILL and restart, a storage
//! partition and lost acknowledgements on one node (its storage wrapped by
//! `CORIUM_FLEET_FAULT_SCHEDULE`), an ingress restart, load-aware placement
//! moving the busy databases off their owner — while stock Corium
//! clients write with request ids through a random ingress per attempt and
//! the SDK follows a database by subscription. The checker
//! (`tests/src/checker.rs`) judges the run and prints its report.
//!
//! - `CORIUM_FLEET_FAULT_SEEDS=a,b,c` picks the seeds (default: 1,2); odd
//!   seeds run on `PostgreSQL`, even seeds on the filesystem store; seeds 2
//!   and 3 modulo 4 run with every warm start refused
//!   (`CORIUM_FLEET_FAULT_WARM_START=refuse`: hot standbys offer values that
//!   diverge from the log, so every move recovers from storage), the others
//!   with hot standbys promoted in place; `make soak` runs ten;
//!   `CORIUM_FLEET_FAULT_LOGS=1` prints every process's log even when the
//!   run passes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_faults::Rng;
use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::checker::{self, Ack, Durable, History};
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, eventually};
use corium_fleet_wire::metadata::REQUEST_ID;
use corium_protocol::pb::transactor_client::TransactorClient;
use prost::Message as _;

const TTL: Duration = Duration::from_millis(1500);
/// Per-attempt deadline of the stock clients.
const CALL_DEADLINE: Duration = Duration::from_secs(5);
/// Per-transaction retry budget.
const TX_BUDGET: Duration = Duration::from_secs(45);

/// Whether a caller retries (with the same request id): the fleet's
/// retryable answers, and any failure of the client's own transport (a
/// connection refused or reset while an ingress restarts: tonic reports
/// these with the transport error as the status's source; a server never
/// sends one).
fn retryable(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::FailedPrecondition
            | tonic::Code::Aborted
    ) || std::error::Error::source(status).is_some()
}

/// A writer: transactions with request ids into `db` until `stop`, each
/// retried with its id through `addresses` (a seeded random one per
/// attempt) until acknowledged.
async fn writer(
    addresses: Vec<String>,
    db: String,
    label: String,
    seed: u64,
    started: Instant,
    history: Arc<Mutex<History>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut rng = Rng::new(seed);
    let mut clients = BTreeMap::new();
    for n in 0..2_000u64 {
        if *stop.borrow() {
            break;
        }
        let item = format!("{db}-{label}-{n}");
        history.lock().unwrap().note_attempted(&db, &item);
        let id = uuid::Uuid::from_u64_pair(seed, n).to_string();
        let deadline = Instant::now() + TX_BUDGET;
        loop {
            let address = &addresses[usize::try_from(rng.below(addresses.len() as u64)).unwrap_or(0)];
            if !clients.contains_key(address) {
                let endpoint = tonic::transport::Endpoint::from_shared(address.clone())
                    .unwrap()
                    .connect_timeout(Duration::from_secs(2))
                    .timeout(CALL_DEADLINE);
                clients.insert(address.clone(), TransactorClient::new(endpoint.connect_lazy()));
            }
            let client = clients.get_mut(address).unwrap();
            let mut request = tonic::Request::new(corium::transact_request(&db, &item));
            request.metadata_mut().insert(REQUEST_ID, id.parse().unwrap());
            request.set_timeout(CALL_DEADLINE);
            history.lock().unwrap().attempts += 1;
            match client.transact(request).await {
                Ok(answer) => {
                    let ack = Ack::answered(&db, &item, &id, &answer, started.elapsed());
                    history.lock().unwrap().acks.push(ack);
                    break;
                }
                Err(status) => {
                    let give_up = {
                        let mut history = history.lock().unwrap();
                        history.note_error(&db, started.elapsed(), status.code());
                        if !retryable(&status) {
                            history.unexpected.push(format!(
                                "{db} {item} via {address}: {:?} {}",
                                status.code(),
                                status.message()
                            ));
                            true
                        } else if Instant::now() > deadline {
                            history.abandoned.push((db.clone(), item.clone()));
                            true
                        } else {
                            false
                        }
                    };
                    if give_up {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100 + rng.below(150))).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
}

/// The storage schedule of the faulted node's first incarnation, drawn
/// from the seed: a partition a few seconds after it starts, then lost
/// log acknowledgements. Returns the schedule and when its last window
/// ends (from the process's start).
fn storage_schedule(rng: &mut Rng) -> (String, Duration) {
    let partition_at = 3_000 + rng.below(1_000);
    let partition_for = 1_500 + rng.below(1_500);
    let lost_at = partition_at + partition_for + 500;
    let schedule = format!(
        "seed={}; @{partition_at}ms partition for {partition_for}ms; @{lost_at}ms lost-ack for 1500ms p=0.3 op=log",
        rng.next_u64() % 1000
    );
    (schedule, Duration::from_millis(lost_at + 1_500))
}

/// Hands each of `dbs` to `to` if another node owns it, so the next fault
/// lands on their owner.
async fn hand_to(fleet: &Fleet, dbs: &[String], to: usize) {
    for db in dbs {
        eventually(
            Duration::from_secs(20),
            format!("hand {db} to {}", fleet.nodes[to].id),
            async || {
                let view = corium::placement(&fleet.nodes[to].endpoint(), db).await;
                if view.owner_id == fleet.nodes[to].id {
                    return Ok(());
                }
                if view.owner_id.is_empty() {
                    // Cold: the next write activates it on its top candidate.
                    return Err("no owner yet".to_owned());
                }
                let owner = fleet.index(&view.owner_id);
                corium_fleet_tests::corium::admin(&fleet.nodes[owner].endpoint())
                    .await
                    .handoff(HandoffRequest {
                        database: db.clone(),
                        target_node_id: fleet.nodes[to].id.clone(),
                    })
                    .await
                    .map(|_| ())
                    .map_err(|status| format!("{status:?}"))
            },
        )
        .await;
    }
}

#[allow(clippy::too_many_lines)] // One seeded scenario, from the fleet's start to the checker's verdict.
async fn run_seed(seed: u64, backend: Backend) -> checker::Report {
    let mut rng = Rng::new(seed);
    let refuse_warm_starts = seed % 4 >= 2;
    let warm_env: &[(&str, &str)] = if refuse_warm_starts {
        &[(corium_fleet_faults::env::WARM_START, "refuse")]
    } else {
        &[]
    };
    // Load-aware placement compares every 500 ms (instead of 10 s), so its
    // moves — the victim owns the busy databases — land among the faults.
    let mut fleet = Fleet::builder(backend.clone())
        .lease_ttl(TTL)
        .node_flags(&["--load-balance-interval-ms", "500"])
        .env(warm_env)
        .start()
        .await;
    fleet.start_ingresses(2, &[]).await;
    let addresses = fleet.ingress_endpoints();
    let victim = usize::try_from(rng.below(3)).unwrap();
    // Databases the victim is the top candidate of (they move), and ones
    // it is no candidate of (they must see no error at all).
    let names: Vec<String> = (0..40).map(|i| format!("f{seed}-{i}")).collect();
    let moved: Vec<String> = names
        .iter()
        .filter(|db| fleet.candidates(db)[0] == victim)
        .take(3)
        .cloned()
        .collect();
    let quiet: Vec<String> = names
        .iter()
        .filter(|db| !fleet.candidates(db).contains(&victim))
        .take(2)
        .cloned()
        .collect();
    for db in moved.iter().chain(&quiet) {
        assert!(corium::create(&addresses[0], db).await.unwrap(), "create {db}");
    }
    // The victim restarts into an incarnation whose storage follows the
    // seeded schedule (times count from its start); SIGTERM first (it
    // leaves the registry), so the restart registers at once and the
    // schedule's times fall where they were drawn.
    let (schedule, storage_faults_end) = storage_schedule(&mut rng);
    fleet.nodes[victim].set_env(corium_fleet_faults::env::SCHEDULE, Some(&schedule));
    fleet.nodes[victim].terminate().await;
    fleet.nodes[victim].restart().await;
    let victim_started = Instant::now();
    fleet.nodes[victim].set_env(corium_fleet_faults::env::SCHEDULE, None);
    // The drain handed the moved databases to their successor: back to
    // the victim, so the storage faults land on their owner.
    hand_to(&fleet, &moved, victim).await;
    let started = Instant::now();
    let history = Arc::new(Mutex::new(History::default()));
    history.lock().unwrap().faults.push(format!(
        "victim {} (top candidate of {moved:?}); storage schedule of its first incarnation: {schedule}; warm starts {}",
        fleet.nodes[victim].id,
        if refuse_warm_starts { "refused" } else { "taken" },
    ));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut writers = Vec::new();
    for (i, db) in moved.iter().enumerate() {
        for w in 0..2 {
            writers.push(tokio::spawn(writer(
                addresses.clone(),
                db.clone(),
                format!("w{w}"),
                seed * 1000 + (i * 10 + w) as u64,
                started,
                Arc::clone(&history),
                stop.clone(),
            )));
        }
    }
    // Quiet databases go through the ingress that is never restarted.
    for (i, db) in quiet.iter().enumerate() {
        writers.push(tokio::spawn(writer(
            vec![addresses[0].clone()],
            db.clone(),
            "q".to_owned(),
            seed * 1000 + 500 + i as u64,
            started,
            Arc::clone(&history),
            stop.clone(),
        )));
    }
    // The SDK follows the first moved database across everything.
    let sdk = corium_fleet_client::Client::connect(corium_fleet_client::Config::new(&addresses[0]))
        .await
        .unwrap();
    let mut subscription = sdk.database(moved[0].clone()).subscribe(0);
    let delivered: Arc<Mutex<Vec<checker::Delivered>>> = Arc::new(Mutex::new(Vec::new()));
    let follower = {
        let delivered = Arc::clone(&delivered);
        tokio::spawn(async move {
            let mut interner = corium_core::KeywordInterner::default();
            while let Ok(Ok(report)) =
                tokio::time::timeout(Duration::from_secs(90), subscription.next()).await
            {
                let strings = corium::report_strings(&report, &mut interner).unwrap_or_default();
                delivered.lock().unwrap().push((report.t, strings));
            }
        })
    };

    // The process plan, in seeded order, after the storage faults had
    // their time: pause past the lease, kill and restart, ingress restart.
    let record = |text: String| history.lock().unwrap().note_fault(started.elapsed(), &text);
    let mut order = vec![0u8, 1, 2];
    for i in (1..order.len()).rev() {
        order.swap(i, usize::try_from(rng.below(i as u64 + 1)).unwrap());
    }
    // The storage schedule runs first; the process faults follow.
    tokio::time::sleep(storage_faults_end.saturating_sub(victim_started.elapsed())).await;
    record("storage schedule over".to_owned());
    for step in order {
        // Each fault hits the owner of the moved databases.
        hand_to(&fleet, &moved, victim).await;
        match step {
            0 => {
                let pause = TTL * 2 + Duration::from_millis(rng.below(1500));
                let node = &fleet.nodes[victim];
                record(format!("SIGSTOP {} for {} ms", node.id, pause.as_millis()));
                node.pause(pause).await;
                record(format!("SIGCONT {}", node.id));
            }
            1 => {
                record(format!("SIGKILL {}", fleet.nodes[victim].id));
                fleet.nodes[victim].kill();
                tokio::time::sleep(TTL * 2).await;
                fleet.nodes[victim].restart().await;
                record(format!("{} restarted", fleet.nodes[victim].id));
            }
            _ => {
                record("SIGKILL ingress-2".to_owned());
                fleet.ingresses[1].kill();
                tokio::time::sleep(Duration::from_millis(500 + rng.below(1000))).await;
                fleet.ingresses[1].restart().await;
                record("ingress-2 restarted".to_owned());
            }
        }
        tokio::time::sleep(Duration::from_millis(1500 + rng.below(1500))).await;
    }
    // Leave time for the storage schedule to run out, then stop.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let _ = stop_tx.send(true);
    for writer in writers {
        writer.await.unwrap();
    }
    let mut load_moves = 0.0;
    for node in &fleet.nodes {
        if let Some((_, text)) = corium_fleet_tests::http_get(node.admin, "/metrics").await {
            load_moves += corium_fleet_tests::metric(&text, "corium_fleet_load_moves_total").unwrap_or(0.0);
        }
    }
    record(format!(
        "load-aware placement moved {load_moves} databases (live nodes' counts)"
    ));

    let mut durable = Durable::default();
    for db in moved.iter().chain(&quiet) {
        durable
            .logs
            .insert(db.clone(), corium::log(&addresses[0], db).await.unwrap());
    }
    // The subscription has caught up once it delivered the log's last t.
    let last_t = durable.logs[&moved[0]].last().map_or(0, |(t, _)| *t);
    let caught_up = Instant::now() + Duration::from_secs(30);
    let last_delivered = || delivered.lock().unwrap().last().map_or(0, |(t, _)| *t);
    while last_delivered() < last_t && Instant::now() < caught_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    follower.abort();
    let mut history = history.lock().unwrap().clone();
    history
        .deliveries
        .insert((moved[0].clone(), 0), delivered.lock().unwrap().clone());
    if last_delivered() < last_t {
        history
            .unexpected
            .push(format!("the SDK subscription did not catch up to t={last_t}"));
    }
    // Log record keys, where the log is in the root store.
    if let Backend::Postgres { url } = &backend {
        let store = corium_fleet_store::open(
            &corium_fleet_store::Storage::Postgres { url: url.clone() },
            &fleet.path("keys"),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        for db in moved.iter().chain(&quiet) {
            let keys = checker::record_keys(store.as_ref(), db).await.unwrap();
            durable.record_keys.insert(db.clone(), keys);
        }
    }
    // Every tenth request id, sent again through the other ingress.
    for (index, ack) in history.acks.iter().enumerate().step_by(10) {
        let mut client = TransactorClient::new(channel(&addresses[1]).await);
        let mut request = tonic::Request::new(corium::transact_request(&ack.db, &ack.item));
        request
            .metadata_mut()
            .insert(REQUEST_ID, ack.request_id.parse().unwrap());
        let replayed = client
            .transact(request)
            .await
            .map(|response| response.into_inner().encode_to_vec())
            .map_err(|status| format!("{:?} {}", status.code(), status.message()));
        durable.replays.push((index, replayed));
    }
    let quiet: BTreeSet<String> = quiet.into_iter().collect();
    let report = checker::check(&format!("seed {seed} on {backend:?}"), &history, &durable, &quiet);
    if !report.passed() || std::env::var_os("CORIUM_FLEET_FAULT_LOGS").is_some() {
        eprintln!("{}", fleet.logs());
    }
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_process_faults_keep_every_promise() {
    let seeds: Vec<u64> = std::env::var("CORIUM_FLEET_FAULT_SEEDS").ok().map_or_else(
        || vec![1, 2],
        |text| {
            text.split(',')
                .filter_map(|seed| seed.trim().parse().ok())
                .collect()
        },
    );
    let mut failed = Vec::new();
    for seed in seeds {
        // Odd seeds on PostgreSQL (which `make test` provides), even seeds
        // on the filesystem store.
        let backend = if seed % 2 == 1 {
            let base = std::env::var("CORIUM_FLEET_TEST_PG_URL")
                .expect("CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL");
            Backend::postgres(&base)
        } else {
            Backend::Filesystem
        };
        eprintln!("process fault plan: seed {seed} on {backend:?}");
        let report = run_seed(seed, backend).await;
        eprintln!("{report}");
        if !report.passed() {
            failed.push(seed);
        }
        assert!(report.acked > 0, "seed {seed}: nothing acknowledged");
    }
    assert!(
        failed.is_empty(),
        "seeds {failed:?} broke a promise; replay with CORIUM_FLEET_FAULT_SEEDS=<seed>"
    );
}
