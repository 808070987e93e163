//! Exactly-once for stock Corium clients through the ingress.
//!
//! A stock `corium_peer::Connection` and a raw `corium.v1` stub — neither
//! sends a request id, so the ingress assigns one — write continuously
//! through the ingress of a 3-node fleet while the owner of their
//! databases is killed with SIGKILL (and restarted) and paused past its lease; on top,
//! every incarnation is armed to abort on its own as owner, right after a
//! commit or (`PostgreSQL`, S3: the log in the root store) right after a log
//! append lands, and loses some log acknowledgements before that. Routing
//! has no affinity: two ingresses
//! sit behind a round-robin TCP balancer (a Kubernetes Service) and close
//! connections older than 2 s, so a stock connection moves between them;
//! the raw stub sends each attempt through the other ingress than the last.
//! The checker then counts
//! every item committed twice — acknowledged or not — and every
//! acknowledgement the durable log does not hold.
//!
//! `CORIUM_FLEET_STOCK_KILLS` (default 20) and `CORIUM_FLEET_STOCK_PAUSES`
//! (default 5) size the run; `CORIUM_FLEET_STOCK_SEED` picks the plan.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_faults::Rng;
use corium_fleet_tests::balancer::Balancer;
use corium_fleet_tests::checker::{self, Ack, Durable, History};
use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric};
use corium_fleet_wire::outcome;
use corium_peer::{ConnectConfig, Connection, PeerError};
use corium_protocol::pb::transactor_client::TransactorClient;

const TTL: Duration = Duration::from_millis(1500);

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(default)
}

/// One fault of the plan.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL the owner, restart it after the lease lapsed.
    Kill,
    /// SIGSTOP the owner past its lease, then SIGCONT (a zombie).
    Pause,
}

/// A stock `Connection` writing unique items until `stop`. An error is the
/// caller's to see: a stock user cannot safely resend a write (no request
/// id), so the writer records it and moves on.
async fn stock_writer(
    address: String,
    db: String,
    started: Instant,
    history: Arc<Mutex<History>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut config = ConnectConfig::new(address, db.clone());
    config.failover_timeout = Duration::from_secs(30);
    let connection = Connection::connect(config).await.expect("stock connect");
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let item = format!("{db}-stock-{n}");
        {
            let mut history = history.lock().unwrap();
            history.attempted.insert((db.clone(), item.clone()));
            history.attempts += 1;
        }
        let answered = tokio::time::timeout(
            Duration::from_secs(90),
            connection.transact(corium::item_forms(&item)),
        )
        .await;
        record(&history, &db, item, started, answered);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Records what the stock client answered for `item`.
fn record(
    history: &Mutex<History>,
    db: &str,
    item: String,
    started: Instant,
    answered: Result<Result<corium_peer::TxResult, PeerError>, tokio::time::error::Elapsed>,
) {
    let mut history = history.lock().unwrap();
    match answered {
        Ok(Ok(result)) => history.acks.push(Ack {
            db: db.to_owned(),
            item,
            request_id: String::new(),
            t: result.basis_t,
            lease_version: None,
            replayed: false,
            response: Vec::new(),
            at: started.elapsed(),
        }),
        Ok(Err(error)) => {
            let code = match &error {
                PeerError::Rpc(status) => status.code(),
                _ => tonic::Code::Unknown,
            };
            history.errors.push((db.to_owned(), started.elapsed(), code));
            history.faults.push(format!(
                "@{:?} stock writer on {db}: {item}: {error}",
                started.elapsed()
            ));
        }
        Err(_) => history
            .unexpected
            .push(format!("{db}: the stock client hung on {item} for 90 s")),
    }
}

/// A raw stub writing unique items with no request id, resending exactly
/// what a stock peer resends (its rule, `outcome::stock_peer_resends`) and
/// nothing else; each attempt goes to the next of `addresses`, so a resend
/// never reaches the ingress that saw the first attempt.
async fn raw_writer(
    addresses: Vec<String>,
    db: String,
    started: Instant,
    history: Arc<Mutex<History>>,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut clients: Vec<_> = addresses
        .into_iter()
        .map(|address| {
            let endpoint = tonic::transport::Endpoint::from_shared(address)
                .unwrap()
                .connect_timeout(Duration::from_secs(2));
            TransactorClient::new(endpoint.connect_lazy())
        })
        .collect();
    let mut attempt = 0;
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let item = format!("{db}-raw-{n}");
        history.lock().unwrap().note_attempted(&db, &item);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut request = tonic::Request::new(corium::transact_request(&db, &item));
            request.set_timeout(Duration::from_mins(1));
            history.lock().unwrap().attempts += 1;
            attempt += 1;
            let next = attempt % clients.len();
            let client = &mut clients[next];
            match client.transact(request).await {
                Ok(answer) => {
                    let ack = Ack::answered(&db, &item, "", &answer, started.elapsed());
                    history.lock().unwrap().acks.push(ack);
                    break;
                }
                Err(status) => {
                    let resend = outcome::stock_peer_resends(status.code(), status.message())
                        || std::error::Error::source(&status).is_some();
                    let mut history = history.lock().unwrap();
                    history.note_error(&db, started.elapsed(), status.code());
                    if !resend || Instant::now() > deadline {
                        history.faults.push(format!(
                            "@{:?} raw writer on {db}: {item}: {:?} {}",
                            started.elapsed(),
                            status.code(),
                            status.message()
                        ));
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The live owner of `db`, once there is one.
///
/// # Panics
/// When `db` has no live owner within 30 s.
async fn owner_of(fleet: &Fleet, address: &str, db: &str) -> usize {
    eventually(
        Duration::from_secs(30),
        format!("a live owner of {db}"),
        async || {
            let view = corium::placement(address, db).await;
            if !view.owner_id.is_empty()
                && view.lease_expires_unix_ms > corium_fleet_common::owner::now_unix_ms()
            {
                let index = fleet.index(&view.owner_id);
                if fleet.nodes[index].pid().is_some() {
                    return Ok(index);
                }
            }
            Err(format!("{view:?}"))
        },
    )
    .await
}

/// The self-abort each incarnation of a node is armed with: right after
/// its n-th commit (every store), and on `PostgreSQL` and S3 (whose log is
/// in the root store) right after its m-th log append lands (before the post-append fence and the answer), with
/// lost log acknowledgements a little before.
fn armed(backend: &Backend, rng: &mut Rng) -> Vec<(&'static str, String)> {
    let mut armed = vec![(
        corium_fleet_faults::env::CRASH_AFTER_COMMIT,
        format!("#{}", 150 + rng.below(150)),
    )];
    if matches!(backend, Backend::Postgres { .. } | Backend::S3 { .. }) {
        armed.push((
            corium_fleet_faults::env::SCHEDULE,
            format!(
                "seed={}; @3000ms lost-ack for 1500ms p=0.2 op=append; after append#{} abort",
                rng.below(1000),
                120 + rng.below(150)
            ),
        ));
    }
    armed
}

/// Restarts every node that aborted on its own (armed afresh), counting
/// them.
async fn revive(
    fleet: &mut Fleet,
    backend: &Backend,
    rng: &mut Rng,
    aborted: &mut usize,
    record: &impl Fn(String),
) {
    for index in 0..fleet.nodes.len() {
        if fleet.nodes[index].exited() {
            record(format!(
                "{} aborted on its own; restarting it",
                fleet.nodes[index].id
            ));
            *aborted += 1;
            fleet.nodes[index].kill();
            for (key, value) in armed(backend, rng) {
                fleet.nodes[index].set_env(key, Some(&value));
            }
            fleet.nodes[index].restart().await;
        }
    }
}

#[allow(clippy::too_many_lines)] // One seeded scenario, from the fleet's start to the checker's verdict.
async fn run(backend: Backend, seed: u64) -> checker::Report {
    let kills = env_count("CORIUM_FLEET_STOCK_KILLS", 20);
    let pauses = env_count("CORIUM_FLEET_STOCK_PAUSES", 5);
    let mut rng = Rng::new(seed);
    // A restarted node waits out its predecessor's registry record: keep
    // that short so a kill costs about one lease TTL.
    let mut fleet = Fleet::builder(backend.clone())
        .lease_ttl(TTL)
        .node_flags(&["--registry-ttl-ms", "3000", "--registry-renew-ms", "1000"])
        .start()
        .await;
    // Every incarnation aborts on its own after a while as the owner
    // (right after a commit or an append): arm the first ones, restart.
    for index in 0..fleet.nodes.len() {
        fleet.nodes[index].terminate().await;
        for (key, value) in armed(&backend, &mut rng) {
            fleet.nodes[index].set_env(key, Some(&value));
        }
        fleet.nodes[index].restart().await;
    }
    fleet
        .start_ingresses(2, &["--max-connection-age-ms", "2000"])
        .await;
    let balancer = Balancer::start(fleet.ingresses.iter().map(|ingress| ingress.grpc).collect()).await;
    let address = balancer.endpoint();
    let direct = fleet.ingress_endpoints();
    // Two databases with the same top candidate, so every fault lands on
    // the owner of both.
    let first = "stock-0".to_owned();
    let top = fleet.candidates(&first)[0];
    let dbs: Vec<String> = std::iter::once(first)
        .chain(
            (1..200)
                .map(|i| format!("stock-{i}"))
                .filter(|db| fleet.candidates(db)[0] == top)
                .take(1),
        )
        .collect();
    for db in &dbs {
        assert!(corium::create(&address, db).await.unwrap(), "create {db}");
    }
    let started = Instant::now();
    let history = Arc::new(Mutex::new(History::default()));
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut writers = Vec::new();
    for db in &dbs {
        writers.push(tokio::spawn(stock_writer(
            address.clone(),
            db.clone(),
            started,
            Arc::clone(&history),
            stop.clone(),
        )));
        writers.push(tokio::spawn(raw_writer(
            direct.clone(),
            db.clone(),
            started,
            Arc::clone(&history),
            stop.clone(),
        )));
    }
    let record = |text: String| history.lock().unwrap().note_fault(started.elapsed(), &text);
    // The plan: the kills and pauses, shuffled by the seed; self-aborts
    // come on top, whenever an armed owner reaches its count.
    let mut plan: Vec<Fault> = std::iter::repeat_n(Fault::Kill, kills)
        .chain(std::iter::repeat_n(Fault::Pause, pauses))
        .collect();
    for i in (1..plan.len()).rev() {
        plan.swap(i, usize::try_from(rng.below(i as u64 + 1)).unwrap());
    }
    let (mut kills_done, mut pauses_done, mut aborted) = (0, 0, 0);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for fault in plan {
        revive(&mut fleet, &backend, &mut rng, &mut aborted, &record).await;
        let owner = owner_of(&fleet, &address, &dbs[0]).await;
        match fault {
            Fault::Kill => {
                record(format!("SIGKILL {}", fleet.nodes[owner].id));
                fleet.nodes[owner].kill();
                tokio::time::sleep(TTL + Duration::from_millis(rng.below(700))).await;
                for (key, value) in armed(&backend, &mut rng) {
                    fleet.nodes[owner].set_env(key, Some(&value));
                }
                fleet.nodes[owner].restart().await;
                kills_done += 1;
            }
            Fault::Pause => {
                let pause = TTL * 2 + Duration::from_millis(rng.below(1000));
                let node = &fleet.nodes[owner];
                record(format!("SIGSTOP {} for {} ms", node.id, pause.as_millis()));
                node.pause(pause).await;
                pauses_done += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(500 + rng.below(1000))).await;
    }
    revive(&mut fleet, &backend, &mut rng, &mut aborted, &record).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop_tx.send(true);
    for writer in writers {
        tokio::time::timeout(Duration::from_mins(2), writer)
            .await
            .expect("writers stop")
            .unwrap();
    }
    assert!(
        kills_done >= kills && pauses_done >= pauses,
        "{kills_done} kills, {pauses_done} pauses"
    );
    eprintln!(
        "{kills_done} SIGKILLs, {aborted} self-aborts after a commit or an append, {pauses_done} pauses past the lease"
    );
    // No affinity: both ingresses carried writes.
    for ingress in &fleet.ingresses {
        let (_, text) = http_get(ingress.admin, "/metrics").await.expect("metrics");
        let served = metric(
            &text,
            "corium_fleet_ingress_requests_total{method=\"/corium.v1.Transactor/Transact\",kind=\"unary\",code=\"OK\"}",
        )
        .unwrap_or(0.0);
        assert!(served >= 1.0, "ingress {} carried no write", ingress.grpc);
    }
    let mut durable = Durable::default();
    for db in &dbs {
        durable
            .logs
            .insert(db.clone(), corium::log(&address, db).await.unwrap());
    }
    let history = history.lock().unwrap().clone();
    let report = checker::check(
        &format!("stock clients, seed {seed} on {backend:?}"),
        &history,
        &durable,
        &std::collections::BTreeSet::new(),
    );
    let acked_by = |kind: &str| history.acks.iter().filter(|ack| ack.item.contains(kind)).count();
    eprintln!(
        "{report}\nstock acks {}, raw acks {}, client-visible errors {}",
        acked_by("-stock-"),
        acked_by("-raw-"),
        history.errors.len()
    );
    assert!(
        acked_by("-stock-") > 20 && acked_by("-raw-") > 20,
        "both writers made progress"
    );
    if !report.passed() {
        eprintln!("{}", fleet.logs());
    }
    report
}

fn seed() -> u64 {
    env_count("CORIUM_FLEET_STOCK_SEED", 1) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_clients_commit_exactly_once_across_owner_kills_and_pauses_on_the_filesystem() {
    let report = run(Backend::Filesystem, seed()).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_clients_commit_exactly_once_across_owner_kills_and_pauses_on_postgres() {
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    let report = run(Backend::postgres(&base), seed()).await;
    assert!(report.passed(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_clients_commit_exactly_once_across_owner_kills_and_pauses_on_s3() {
    let report = run(Backend::s3_from_env(), seed()).await;
    assert!(report.passed(), "{report}");
}
