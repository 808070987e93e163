//! The foundation's multi-process tests: real `corium-fleet-transactor`
//! processes, random loopback ports, temporary data directories, against the
//! filesystem store, `PostgreSQL` and S3, driven by Corium's own clients.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::time::{Duration, Instant};

use corium_fleet_tests::corium::{self, channel, expect_code, placement};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric};
use corium_fleet_wire::metadata;
use corium_fleet_wire::not_owner;

const TTL: Duration = Duration::from_millis(1500);

/// Creates `db` on its top candidate and returns that node's index.
async fn create_on_top_candidate(fleet: &Fleet, db: &str) -> usize {
    let top = fleet.candidates(db)[0];
    assert!(
        corium::create(&fleet.nodes[top].endpoint(), db).await.unwrap(),
        "created {db}"
    );
    top
}

/// A fleet on `backend` with one ingress, and `db` created on its top
/// candidate: the fleet, the ingress's endpoint, and the indexes of the
/// owner and of the next candidate (its successor).
async fn owned_behind_an_ingress(backend: &Backend, db: &str) -> (Fleet, String, usize, usize) {
    let (fleet, address) = Fleet::builder(backend.clone())
        .lease_ttl(TTL)
        .start_with_ingress()
        .await;
    let owner = create_on_top_candidate(&fleet, db).await;
    let successor = fleet.candidates(db)[1];
    (fleet, address, owner, successor)
}

/// Commits item `name` to `db` at `endpoint` (each call with `metadata`),
/// asked again until a call is acknowledged within `within`.
async fn commit_eventually(
    fleet: &Fleet,
    endpoint: &str,
    db: &str,
    name: &str,
    metadata: &[(&'static str, &str)],
    within: Duration,
    what: impl Display,
) -> corium_protocol::pb::TransactResponse {
    eventually(within, what, async || {
        corium::transact(endpoint, db, name, metadata)
            .await
            .map_err(|status| fleet.with_logs(format!("{status:?}")))
    })
    .await
}

/// Every committed transaction of `db` read back at `endpoint`: t → item
/// names.
async fn log_by_t(endpoint: &str, db: &str) -> BTreeMap<u64, Vec<String>> {
    corium::log(endpoint, db).await.unwrap().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn created_database_is_served_by_its_lease_holder() {
    for backend in Backend::all() {
        let fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "orders";
        let owner = create_on_top_candidate(&fleet, db).await;
        let first = corium::transact(&fleet.nodes[owner].endpoint(), db, "widget", &[])
            .await
            .unwrap();
        let second = corium::transact(&fleet.nodes[owner].endpoint(), db, "gadget", &[])
            .await
            .unwrap();
        assert_eq!(second.basis_before, first.basis_t, "{backend:?}");
        // Every node, candidate or not, reads the same holder from storage.
        for node in &fleet.nodes {
            let view = placement(&node.endpoint(), db).await;
            assert_eq!(
                view.owner_id, fleet.nodes[owner].id,
                "{backend:?} seen from {}",
                node.id
            );
            assert!(view.lease_version >= 1);
        }
        let (status, metrics) = http_get(fleet.nodes[owner].admin, "/metrics").await.unwrap();
        assert_eq!(status, 200);
        assert!(metrics.contains("corium_fleet_databases_owned 1"), "{metrics}");
        // Creating it again is ALREADY_EXISTS, not a second database.
        let again = corium::create(&fleet.nodes[owner].endpoint(), db)
            .await
            .unwrap_err();
        assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_holder_answers_typed_not_owner_naming_the_holder() {
    for backend in Backend::all() {
        let fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "ledger";
        let owner = create_on_top_candidate(&fleet, db).await;
        let committed = corium::transact(&fleet.nodes[owner].endpoint(), db, "a", &[])
            .await
            .unwrap();
        let version = placement(&fleet.nodes[owner].endpoint(), db).await.lease_version;
        let standby = fleet.candidates(db)[1];
        let outsider = fleet.non_candidate(db).unwrap();
        for other in [standby, outsider] {
            let status = expect_code(
                corium::transact(&fleet.nodes[other].endpoint(), db, "b", &[]).await,
                tonic::Code::FailedPrecondition,
                format!("{backend:?} at {}", fleet.nodes[other].id),
            );
            assert!(
                status.message().contains("standby"),
                "stock peers match on this word: {}",
                status.message()
            );
            let detail = not_owner::from_status(&status).expect("typed NotOwner detail");
            assert_eq!(detail.database, db);
            if other == standby {
                // A candidate reads the root and names the holder.
                assert_eq!(detail.owner_id, fleet.nodes[owner].id);
                assert_eq!(detail.lease_version, version);
                assert_eq!(detail.route_endpoint, fleet.nodes[owner].endpoint());
            } else {
                // A non-candidate never reads the database's roots: it
                // names no owner and sends the caller to the candidates.
                assert_eq!(detail.owner_id, "", "{backend:?}: {detail:?}");
                assert_eq!(detail.route_endpoint, "");
            }
            assert!(detail.retryable);
            let ranked: Vec<_> = detail.candidates.iter().map(|c| c.node_id.clone()).collect();
            let expected: Vec<_> = fleet
                .candidates(db)
                .iter()
                .map(|i| fleet.nodes[*i].id.clone())
                .collect();
            assert_eq!(ranked, expected);
        }
        // The holder itself refuses a request routed on another lease version.
        let stale = (version + 1).to_string();
        let status = corium::transact(
            &fleet.nodes[owner].endpoint(),
            db,
            "c",
            &[(metadata::LEASE_VERSION, &stale)],
        )
        .await
        .unwrap_err();
        assert_eq!(not_owner::from_status(&status).unwrap().lease_version, version);
        // None of the refused transactions committed.
        let log = corium::log(&fleet.nodes[owner].endpoint(), db).await.unwrap();
        assert_eq!(log.last().unwrap().0, committed.basis_t, "{backend:?}: {log:?}");
        // An unknown database is NOT_FOUND at its candidates, never a NotOwner.
        let top = fleet.candidates("nope")[0];
        expect_code(
            corium::transact(&fleet.nodes[top].endpoint(), "nope", "x", &[]).await,
            tonic::Code::NotFound,
            format!("{backend:?}: an unknown database"),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_mismatch_and_forged_hops_are_rejected_and_change_nothing() {
    for backend in Backend::all() {
        let fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "routing";
        let owner = create_on_top_candidate(&fleet, db).await;
        let endpoint = fleet.nodes[owner].endpoint();
        let before = corium::transact(&endpoint, db, "first", &[]).await.unwrap();
        for metadata in [
            vec![(metadata::DATABASE_ROUTE, "some-other-db")],
            vec![(metadata::HOP, "2")],
            vec![(metadata::LEASE_VERSION, "not-a-number")],
        ] {
            expect_code(
                corium::transact(&endpoint, db, "rejected", &metadata).await,
                tonic::Code::InvalidArgument,
                format!("{backend:?} {metadata:?}"),
            );
        }
        // A matching route header and one hop are accepted.
        let after = corium::transact(
            &endpoint,
            db,
            "second",
            &[(metadata::DATABASE_ROUTE, db), (metadata::HOP, "1")],
        )
        .await
        .unwrap();
        assert_eq!(after.basis_before, before.basis_t, "nothing committed in between");
        let names: Vec<String> = corium::log(&endpoint, db)
            .await
            .unwrap()
            .into_iter()
            .flat_map(|(_, n)| n)
            .collect();
        assert!(!names.contains(&"rejected".to_owned()), "{names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_holder_hands_over_without_losing_acknowledged_transactions() {
    for backend in Backend::all() {
        let mut fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "payments";
        let owner = create_on_top_candidate(&fleet, db).await;
        let successor = fleet.candidates(db)[1];
        let old_version = placement(&fleet.nodes[owner].endpoint(), db).await.lease_version;
        // Acknowledged transactions: t → item name.
        let mut acked = corium::transact_items(&fleet.nodes[owner].endpoint(), db, "before", 20).await;
        fleet.nodes[owner].kill();
        let killed = Instant::now();
        // The successor refuses (NotOwner) until the lease lapses, then takes over.
        let response = eventually(
            TTL * 10,
            format!("{backend:?}: takeover by the successor"),
            async || match corium::transact(&fleet.nodes[successor].endpoint(), db, "after", &[]).await {
                Ok(response) => Ok(response),
                Err(status) => {
                    assert!(
                        status.code() == tonic::Code::FailedPrecondition
                            || status.code() == tonic::Code::Unavailable,
                        "{backend:?}: unexpected {status:?}"
                    );
                    Err(fleet.with_logs(format!("{status:?}")))
                }
            },
        )
        .await;
        let takeover = killed.elapsed();
        acked.insert(response.basis_t, "after".to_owned());
        let view = placement(&fleet.nodes[successor].endpoint(), db).await;
        assert_eq!(view.owner_id, fleet.nodes[successor].id);
        assert!(
            view.lease_version > old_version,
            "the successor fenced the old owner"
        );
        // Every acknowledged transaction is in the durable log, once, at its t.
        let log = log_by_t(&fleet.nodes[successor].endpoint(), db).await;
        for (t, name) in &acked {
            assert_eq!(
                log.get(t).map(|names| names.contains(name)),
                Some(true),
                "{backend:?}: t={t} {name} missing: {log:?}"
            );
        }
        let ts: Vec<u64> = log.keys().copied().collect();
        assert_eq!(ts, (1..=response.basis_t).collect::<Vec<_>>(), "gapless log");
        eprintln!("{backend:?}: takeover after SIGKILL took {takeover:?} (lease TTL {TTL:?})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_each_database_to_its_next_candidate() {
    for backend in Backend::all() {
        // A TTL far longer than the test's patience: only a handoff explains a fast takeover.
        let ttl = Duration::from_mins(1);
        let mut fleet = Fleet::builder(backend.clone()).lease_ttl(ttl).start().await;
        let db = "drained";
        let owner = create_on_top_candidate(&fleet, db).await;
        let before = corium::transact(&fleet.nodes[owner].endpoint(), db, "x", &[])
            .await
            .unwrap();
        let old_version = placement(&fleet.nodes[owner].endpoint(), db).await.lease_version;
        fleet.nodes[owner].terminate().await;
        let successor = fleet.candidates(db)[1];
        // The drain handed the database over before the process exited: the
        // successor already holds a live lease at a higher version.
        let view = placement(&fleet.nodes[successor].endpoint(), db).await;
        assert_eq!(
            view.owner_id,
            fleet.nodes[successor].id,
            "{backend:?}: {view:?}\n{}",
            fleet.logs()
        );
        assert!(view.lease_version > old_version, "{backend:?}: {view:?}");
        assert!(
            view.lease_expires_unix_ms > corium_fleet_common::owner::now_unix_ms(),
            "{backend:?}: a live lease, not a released one: {view:?}"
        );
        let after = corium::transact(&fleet.nodes[successor].endpoint(), db, "y", &[])
            .await
            .unwrap();
        assert_eq!(after.basis_before, before.basis_t);
        let (_, metrics) = http_get(fleet.nodes[successor].admin, "/metrics").await.unwrap();
        assert!(metrics.contains("corium_fleet_activations_total 1"), "{metrics}");
        assert!(
            fleet.nodes[owner].log().contains("database handed off"),
            "{}",
            fleet.nodes[owner].log()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_peer_connection_transacts_and_receives_reports() {
    for backend in Backend::all() {
        let fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "peers";
        create_on_top_candidate(&fleet, db).await;
        // A stock peer given every node, in node order: it must find the
        // holder by itself (non-holders answer `standby`).
        let endpoints: Vec<String> = fleet
            .nodes
            .iter()
            .map(corium_fleet_tests::Node::endpoint)
            .collect();
        let mut config = corium_peer::ConnectConfig::with_failover(endpoints, db);
        config.failover_timeout = Duration::from_secs(20);
        let connection =
            tokio::time::timeout(Duration::from_secs(30), corium_peer::Connection::connect(config))
                .await
                .expect("connect in time")
                .unwrap_or_else(|error| panic!("{backend:?}: {error}\n{}", fleet.logs()));
        let mut reports = connection.tx_reports();
        let result = connection
            .transact(corium::item_forms("from-peer"))
            .await
            .unwrap();
        let report = tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(report.t, result.basis_t, "{backend:?}");
        assert_eq!(connection.basis_t(), result.basis_t);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_storage_answers_unavailable_and_is_fenced() {
    // PostgreSQL and S3 run over a network path this test can cut.
    let backend = Backend::all()
        .into_iter()
        .find(|b| matches!(b, Backend::Postgres { .. }))
        .unwrap();
    cut_off_from_storage(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_storage_answers_unavailable_and_is_fenced_on_s3() {
    cut_off_from_storage(Backend::s3_from_env()).await;
}

/// The owner and a non-candidate of a database lose their path to the
/// storage server (`fleet.partitions`): the outsider names no owner and is
/// not ready, the owner refuses with UNAVAILABLE once its lease lapsed,
/// the successor takes over, and the healed old owner is fenced.
async fn cut_off_from_storage(backend: Backend) {
    let fleet = Fleet::builder(backend).lease_ttl(TTL).start().await;
    let db = "partitioned";
    let owner = create_on_top_candidate(&fleet, db).await;
    let successor = fleet.candidates(db)[1];
    let outsider = fleet.non_candidate(db).unwrap();
    let mut acked = BTreeMap::new();
    let first = corium::transact(&fleet.nodes[owner].endpoint(), db, "before-cut", &[])
        .await
        .unwrap();
    acked.insert(first.basis_t, "before-cut".to_owned());

    fleet.partitions[owner].as_ref().unwrap().cut();
    fleet.partitions[outsider].as_ref().unwrap().cut();
    let cut_at = Instant::now();
    // The outsider is not a candidate: it never reads the root, so it names
    // no owner (never a guessed one) and sends the caller to the candidates.
    let status = corium::transact(&fleet.nodes[outsider].endpoint(), db, "x", &[])
        .await
        .unwrap_err();
    let detail = not_owner::from_status(&status).expect("typed NotOwner");
    assert_eq!(detail.owner_id, "", "{status:?}");
    assert_eq!(detail.candidates.len(), 2, "{detail:?}");
    let (ready, _) = http_get(fleet.nodes[outsider].admin, "/readyz").await.unwrap();
    assert_eq!(ready, 503, "a node without storage is not ready");
    // The owner keeps its cell but cannot renew: once its lease expires it
    // refuses with UNAVAILABLE; it never acknowledges after that.
    eventually(
        (cut_at + TTL * 6).saturating_duration_since(Instant::now()),
        "the cut-off owner refuses with UNAVAILABLE",
        async || match corium::transact(&fleet.nodes[owner].endpoint(), db, "during-cut", &[]).await {
            Ok(response) => {
                assert!(
                    cut_at.elapsed() < TTL,
                    "acknowledged {:?} after the cut, past the lease TTL",
                    cut_at.elapsed()
                );
                acked.insert(response.basis_t, "during-cut".to_owned());
                Err(fleet.with_logs(format!("acknowledged t={}", response.basis_t)))
            }
            Err(status) if status.code() == tonic::Code::Unavailable => Ok(()),
            Err(status) => {
                assert!(
                    matches!(
                        status.code(),
                        tonic::Code::Internal | tonic::Code::FailedPrecondition
                    ),
                    "{status:?}"
                );
                Err(fleet.with_logs(format!("{status:?}")))
            }
        },
    )
    .await;
    // The successor, which still reaches storage, takes over after the lapse.
    let after = commit_eventually(
        &fleet,
        &fleet.nodes[successor].endpoint(),
        db,
        "after-takeover",
        &[],
        TTL * 10,
        "takeover by the successor",
    )
    .await;
    acked.insert(after.basis_t, "after-takeover".to_owned());
    // Healed, the old owner has been fenced: it points at the successor.
    fleet.partitions[owner].as_ref().unwrap().heal();
    eventually(TTL * 10, "the old owner fenced", async || {
        let status = corium::transact(&fleet.nodes[owner].endpoint(), db, "stale", &[])
            .await
            .unwrap_err();
        match not_owner::from_status(&status) {
            Some(detail) => {
                assert_eq!(detail.owner_id, fleet.nodes[successor].id);
                Ok(())
            }
            None => Err(fleet.with_logs(format!("{status:?}"))),
        }
    })
    .await;
    let log = log_by_t(&fleet.nodes[successor].endpoint(), db).await;
    for (t, name) in &acked {
        assert!(
            log.get(t).is_some_and(|names| names.contains(name)),
            "t={t} {name} lost: {log:?}"
        );
    }
    assert!(!log.values().flatten().any(|name| name == "stale"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_and_unknown_storage_fail_with_a_clear_message() {
    let binary = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("corium-fleet-transactor");
    for (args, expected) in [
        (
            vec!["--node-id", "n1", "--storage", "mysql://db"],
            "unknown storage",
        ),
        (vec!["--storage", "filesystem"], "--node-id is required"),
        (vec!["--node-id", "n1", "--member", "broken"], "--member"),
        (vec!["--node-id", "n1", "--lease-ttl-ms", "1"], "--lease-ttl-ms"),
    ] {
        let output = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(&binary).args(&args).output(),
        )
        .await
        .unwrap()
        .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_databases_release_their_lease_and_reactivate_on_demand() {
    for backend in Backend::all() {
        let fleet = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .node_flags(&["--idle-evict-after-ms", "600"])
            .start()
            .await;
        let db = "sleepy";
        let owner = create_on_top_candidate(&fleet, db).await;
        let first = corium::transact(&fleet.nodes[owner].endpoint(), db, "a", &[])
            .await
            .unwrap();
        // Idle past the interval: the owner releases the lease (expiry 0) and
        // holds nothing.
        eventually(
            Duration::from_secs(10),
            format!("{backend:?}: {db} evicted"),
            async || {
                let view = placement(&fleet.nodes[owner].endpoint(), db).await;
                if view.lease_expires_unix_ms == 0 {
                    assert_eq!(view.state, "cold", "{backend:?}");
                    Ok(())
                } else {
                    Err(fleet.with_logs(format!("{view:?}")))
                }
            },
        )
        .await;
        let (_, metrics) = http_get(fleet.nodes[owner].admin, "/metrics").await.unwrap();
        assert!(metrics.contains("corium_fleet_databases_owned 0\n"), "{metrics}");
        assert!(
            metrics.contains("corium_fleet_idle_evictions_total 1\n"),
            "{metrics}"
        );
        // The next request activates it again, with every transaction kept.
        let second = corium::transact(&fleet.nodes[owner].endpoint(), db, "b", &[])
            .await
            .unwrap();
        assert_eq!(second.basis_before, first.basis_t, "{backend:?}");
        let view = placement(&fleet.nodes[owner].endpoint(), db).await;
        assert_eq!(view.state, "owned");
        // A live subscription keeps a database from being evicted.
        let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(
            channel(&fleet.nodes[owner].endpoint()).await,
        );
        let mut stream = client
            .subscribe(corium_fleet_tests::corium::subscribe_request(db, second.basis_t))
            .await
            .unwrap()
            .into_inner();
        assert!(stream.message().await.unwrap().is_some(), "handshake");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            placement(&fleet.nodes[owner].endpoint(), db).await.state,
            "owned",
            "{backend:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_find_each_other_through_the_registry_and_node_ids_are_unique() {
    for backend in Backend::all() {
        let registry = ["--registry-ttl-ms", "2000", "--registry-renew-ms", "300"];
        let (mut fleet, ingress) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .registry()
            .node_flags(&registry)
            .start_with_ingress()
            .await;
        // Until every node has read the registry, a node may not yet see the
        // others; placement converges within a renewal period or two.
        let db = "registered";
        let expected: Vec<String> = fleet
            .candidates(db)
            .iter()
            .map(|i| fleet.nodes[*i].id.clone())
            .collect();
        eventually(
            Duration::from_secs(15),
            format!("{backend:?}: every node ranks {expected:?} for {db}"),
            async || {
                let views: Vec<Vec<String>> = futures_views(&fleet, db).await;
                if views.iter().all(|view| *view == expected) {
                    Ok(())
                } else {
                    Err(fleet.with_logs(format!("{views:?}")))
                }
            },
        )
        .await;
        assert!(corium::create(&ingress, db).await.unwrap());
        let owner = placement(&ingress, db).await.owner_id;
        assert_eq!(
            owner,
            fleet.nodes[fleet.candidates(db)[0]].id,
            "{backend:?}: created on the top candidate"
        );
        // A second process with a live node id refuses to serve.
        let (status, stderr) = fleet.nodes[0].run_duplicate().await;
        assert!(!status.success(), "{backend:?}: duplicate node id served");
        assert!(stderr.contains("already live"), "{backend:?}: {stderr}");
        // A node that stops gracefully leaves everyone's view at once.
        fleet.nodes[2].terminate().await;
        eventually(
            Duration::from_secs(5),
            format!("{backend:?}: node-3 no longer a member"),
            async || {
                let candidates = placement(&fleet.nodes[0].endpoint(), db).await.candidates;
                if candidates.iter().all(|c| c.node_id != fleet.nodes[2].id) {
                    Ok(())
                } else {
                    Err(format!("{candidates:?}"))
                }
            },
        )
        .await;
    }
}

/// Each live node's candidate list for `db` (node ids, ranked). An unknown
/// database is fine: placement needs no database.
async fn futures_views(fleet: &Fleet, db: &str) -> Vec<Vec<String>> {
    let mut views = Vec::new();
    for node in &fleet.nodes {
        let mut client = corium_fleet_tests::corium::admin(&node.endpoint()).await;
        let candidates = match client
            .database_placement(corium_fleet_proto::fleet::DatabasePlacementRequest {
                database: db.to_owned(),
            })
            .await
        {
            Ok(response) => response.into_inner().view.unwrap().candidates,
            Err(_) => Vec::new(),
        };
        views.push(candidates.into_iter().map(|c| c.node_id).collect());
    }
    views
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_paused_past_its_lease_wakes_fenced_and_never_acknowledges() {
    for backend in Backend::all() {
        let db = "zombie";
        let (fleet, address, owner, successor) = owned_behind_an_ingress(&backend, db).await;
        let before = corium::transact(&address, db, "before", &[]).await.unwrap();
        // Its candidates learn from the registry that it owns the database.
        fleet
            .await_node_metric(
                successor,
                "corium_fleet_databases_standby 1",
                Duration::from_secs(10),
                format!("{backend:?}: the successor watches {db}"),
            )
            .await;
        // Freeze the owner past its lease: it cannot renew, and cannot know.
        // (Outside a filesystem root CAS: see `Node::freeze`.)
        fleet.nodes[owner].freeze().await;
        // With a deadline, as real callers have: a call caught by the
        // frozen owner ends at its deadline, and the next one moves on.
        let during = commit_eventually(
            &fleet,
            &address,
            db,
            "during",
            &[("grpc-timeout", "2000m")],
            TTL * 10,
            format!("{backend:?}: takeover from the frozen owner"),
        )
        .await;
        assert_eq!(
            placement(&fleet.nodes[successor].endpoint(), db).await.owner_id,
            fleet.nodes[successor].id
        );
        // The zombie wakes up still holding its cell: it must refuse, never
        // acknowledge, whatever it is asked.
        fleet.nodes[owner].signal(nix::sys::signal::Signal::SIGCONT);
        for attempt in 0..5 {
            let status = corium::transact(
                &fleet.nodes[owner].endpoint(),
                db,
                &format!("zombie-{attempt}"),
                &[],
            )
            .await
            .unwrap_err();
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::FailedPrecondition | tonic::Code::Unavailable | tonic::Code::Internal
                ),
                "{backend:?}: the woken owner answered {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = log_by_t(&address, db).await;
        assert!(
            log.get(&before.basis_t)
                .is_some_and(|names| names.contains(&"before".to_owned()))
        );
        assert!(
            log.get(&during.basis_t)
                .is_some_and(|names| names.contains(&"during".to_owned()))
        );
        assert!(
            !log.values().flatten().any(|name| name.starts_with("zombie-")),
            "{backend:?}: a fenced owner's write reached the log: {log:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_top_candidate_is_routed_around_once_its_lease_lapses() {
    for backend in Backend::all() {
        let db = "frozen";
        let (fleet, address, owner, successor) = owned_behind_an_ingress(&backend, db).await;
        // Frozen at once, before its registry record lists the database, so
        // no candidate watches it: only routing can move it. A frozen process
        // still completes TCP handshakes, so its calls hang instead of being
        // refused. (Outside a filesystem root CAS, whose lock would block
        // every successor until it resumes: see `Node::freeze`.)
        fleet.nodes[owner].freeze().await;
        let started = Instant::now();
        let response = commit_eventually(
            &fleet,
            &address,
            db,
            "after",
            &[("grpc-timeout", "2000m")],
            TTL * 12,
            format!("{backend:?}: routed around the frozen node"),
        )
        .await;
        eprintln!(
            "{backend:?}: first commit {:?} after freezing the owner (TTL {TTL:?})",
            started.elapsed()
        );
        assert_eq!(
            placement(&fleet.nodes[successor].endpoint(), db).await.owner_id,
            fleet.nodes[successor].id
        );
        let (_, metrics) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
        assert!(
            metric(&metrics, "corium_fleet_ingress_suspect_marks_total").is_some_and(|marks| marks >= 1.0),
            "{backend:?}: the frozen node was marked suspect: {metrics}"
        );
        fleet.nodes[owner].signal(nix::sys::signal::Signal::SIGCONT);
        let log = corium::log(&address, db).await.unwrap();
        assert!(
            log.iter()
                .any(|(t, names)| *t == response.basis_t && names.contains(&"after".to_owned()))
        );
    }
}
