//! Placement and membership over real processes: spread across zones,
//! candidates-only storage access, SIGKILL under mixed load, rolling
//! restarts, admin handoff, the placement map, and a node joining.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::corium::{self, channel, expect_code, placement as view_of};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, load};
use corium_fleet_wire::not_owner;

const TTL: Duration = Duration::from_millis(1500);

/// Creates every database through the ingress and writes one item to each.
async fn create_all(fleet: &Fleet, dbs: &[String]) {
    let address = fleet.ingresses[0].endpoint();
    for db in dbs {
        assert!(corium::create(&address, db).await.unwrap(), "create {db}");
        corium::transact(&address, db, &format!("{db}-first"), &[])
            .await
            .unwrap_or_else(|status| panic!("{db}: {status:?}\n{}", fleet.logs()));
    }
}

/// A fleet on `backend` with one ingress, and `count` databases named
/// `{prefix}-{i}` created through it with one item each.
async fn start_with_databases(backend: &Backend, prefix: &str, count: usize) -> (Fleet, Vec<String>) {
    let mut fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &[]).await;
    let dbs: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    create_all(&fleet, &dbs).await;
    (fleet, dbs)
}

/// The node id holding `db`'s lease, read at its candidate of `rank`.
async fn owner_at(fleet: &Fleet, db: &str, rank: usize) -> String {
    let candidate = fleet.candidates(db)[rank];
    view_of(&fleet.nodes[candidate].endpoint(), db).await.owner_id
}

/// The node id holding `db`'s lease, read at its top candidate.
async fn owner_of(fleet: &Fleet, db: &str) -> String {
    owner_at(fleet, db, 0).await
}

fn names(fleet: &Fleet, indexes: &[usize]) -> Vec<String> {
    indexes.iter().map(|i| fleet.nodes[*i].id.clone()).collect()
}

/// Root operations per database made by one node (`/debug/root-ops`).
async fn root_ops(port: u16) -> BTreeMap<String, serde_json::Value> {
    let (status, body) = http_get(port, "/debug/root-ops").await.unwrap();
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_databases_spread_over_three_zones_and_non_candidates_never_touch_their_roots() {
    for backend in Backend::all() {
        let (fleet, dbs) = start_with_databases(&backend, "spread", 60).await;
        // Requests sent straight to non-candidates are refused without a read.
        for db in dbs.iter().take(10) {
            let outsider = fleet.non_candidate(db).unwrap();
            let status = corium::transact(&fleet.nodes[outsider].endpoint(), db, "stray", &[])
                .await
                .unwrap_err();
            let hint = not_owner::from_status(&status).expect("typed NotOwner");
            let listed: Vec<String> = hint.candidates.iter().map(|c| c.node_id.clone()).collect();
            assert_eq!(listed, names(&fleet, &fleet.candidates(db)));
        }
        let mut owned: BTreeMap<String, usize> = BTreeMap::new();
        for db in &dbs {
            let holder = owner_of(&fleet, db).await;
            let top = &fleet.nodes[fleet.candidates(db)[0]].id;
            assert_eq!(
                &holder, top,
                "{backend:?}: {db} is owned by its top live candidate"
            );
            *owned.entry(holder).or_default() += 1;
        }
        eprintln!("{backend:?}: databases owned per node: {owned:?}");
        assert_eq!(owned.len(), 3, "{backend:?}: every node owns some: {owned:?}");
        assert!(
            owned.values().all(|count| *count <= 30),
            "{backend:?}: none owns more than half: {owned:?}"
        );
        for (index, node) in fleet.nodes.iter().enumerate() {
            let ops = root_ops(node.admin).await;
            let touched: BTreeSet<&String> = ops.keys().filter(|db| db.starts_with("spread-")).collect();
            let candidate_of: BTreeSet<&String> = dbs
                .iter()
                .filter(|db| fleet.candidates(db).contains(&index))
                .collect();
            assert!(
                touched.is_subset(&candidate_of),
                "{backend:?}: {} touched roots of non-candidate databases: {:?}",
                node.id,
                touched.difference(&candidate_of).collect::<Vec<_>>()
            );
            // Not vacuous: it did touch the ones it owns.
            let own = owned[&node.id];
            assert!(
                touched.len() >= own,
                "{backend:?}: {} touched {} roots, owns {own}",
                node.id,
                touched.len()
            );
            let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
            assert!(
                metrics.contains(&format!(
                    "corium_fleet_databases_owned_by_rank{{rank=\"0\"}} {own}"
                )),
                "{metrics}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_mixed_load_moves_only_the_dead_nodes_databases() {
    for backend in Backend::all() {
        let (mut fleet, dbs) = start_with_databases(&backend, "mixed", 9).await;
        let victim = fleet.candidates(&dbs[0])[0];
        let victims: BTreeSet<&String> = dbs
            .iter()
            .filter(|db| fleet.candidates(db)[0] == victim)
            .collect();
        let load = load::start(fleet.ingresses[0].endpoint(), dbs.clone(), 2_000);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        fleet.nodes[victim].kill();
        tokio::time::sleep(TTL * 5).await;
        let outcomes = load.stop().await;
        let address = fleet.ingresses[0].endpoint();
        for (db, outcome) in &outcomes {
            if victims.contains(db) {
                let last_error = outcome.errors.last().map(|(at, _, _)| *at);
                assert!(!outcome.acked.is_empty(), "{backend:?}: {db} never acknowledged");
                eprintln!(
                    "{backend:?}: {db} (on the killed node): {}, last error at {last_error:?}",
                    outcome.summary()
                );
                // Only retryable failures while the lease lapses: no other kind.
                outcome.assert_only_retryable_errors(format_args!("{backend:?}: {db}"));
                // It moved: the last attempts succeeded at the next candidate.
                assert_eq!(
                    owner_at(&fleet, db, 1).await,
                    fleet.nodes[fleet.candidates(db)[1]].id,
                    "{backend:?}: {db}"
                );
            } else {
                assert!(
                    outcome.errors.is_empty(),
                    "{backend:?}: {db} is unrelated to the killed node but saw errors: {:?}",
                    outcome.errors
                );
            }
            let log = corium::log(&address, db).await.unwrap();
            load::check(db, outcome, &log).unwrap_or_else(|error| panic!("{backend:?}: {error}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_under_load_loses_nothing() {
    for backend in Backend::all() {
        let (mut fleet, dbs) = start_with_databases(&backend, "rolling", 6).await;
        let load = load::start(fleet.ingresses[0].endpoint(), dbs.clone(), 5_000);
        let started = Instant::now();
        for index in 0..fleet.nodes.len() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            fleet.nodes[index].terminate().await;
            fleet.nodes[index].restart().await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let outcomes = load.stop().await;
        let address = fleet.ingresses[0].endpoint();
        let mut report = Vec::new();
        for (db, outcome) in &outcomes {
            assert!(!outcome.acked.is_empty(), "{backend:?}: {db}");
            let log = corium::log(&address, db).await.unwrap();
            load::check(db, outcome, &log)
                .unwrap_or_else(|error| panic!("{backend:?}: {error}\n{}", fleet.logs()));
            report.push(format!("{db}: {}", outcome.summary()));
            // A drain hands over: nothing waits out a lease TTL or worse.
            outcome.assert_only_retryable_errors(format_args!("{backend:?}: {db}"));
        }
        eprintln!(
            "{backend:?}: rolling restart of 3 nodes in {:?}:\n  {}",
            started.elapsed(),
            report.join("\n  ")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_handoff_moves_one_database_and_refuses_what_it_cannot_do() {
    admin_handoff(Backend::all().remove(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_handoff_moves_one_database_and_refuses_what_it_cannot_do_on_s3() {
    admin_handoff(Backend::s3_from_env()).await;
}

#[allow(clippy::too_many_lines)] // One scenario: each step starts from the state the previous one left.
async fn admin_handoff(backend: Backend) {
    let fleet = Fleet::builder(backend).lease_ttl(TTL).start().await;
    let db = "handed";
    let [owner, standby] = fleet.candidates(db)[..] else {
        panic!()
    };
    let outsider = fleet.non_candidate(db).unwrap();
    assert!(corium::create(&fleet.nodes[owner].endpoint(), db).await.unwrap());
    let mut acked = corium::transact_items(&fleet.nodes[owner].endpoint(), db, "before", 5).await;
    let before = view_of(&fleet.nodes[owner].endpoint(), db).await;
    let mut admin = corium_fleet_tests::corium::admin(&fleet.nodes[owner].endpoint()).await;
    let refuse = |target: &str| HandoffRequest {
        database: db.to_owned(),
        target_node_id: target.to_owned(),
    };
    expect_code(
        admin.handoff(refuse(&fleet.nodes[owner].id)).await,
        tonic::Code::InvalidArgument,
        "a handoff to the owner itself",
    );
    let to_outsider = expect_code(
        admin.handoff(refuse(&fleet.nodes[outsider].id)).await,
        tonic::Code::FailedPrecondition,
        "a handoff to a non-candidate",
    );
    assert!(
        to_outsider.message().contains("not a live candidate"),
        "{to_outsider:?}"
    );
    expect_code(
        admin.handoff(refuse("node-99")).await,
        tonic::Code::FailedPrecondition,
        "a handoff to an unknown node",
    );
    // A node that does not own it answers with a NotOwner naming the owner.
    let mut at_standby = corium_fleet_tests::corium::admin(&fleet.nodes[standby].endpoint()).await;
    let not_held = at_standby
        .handoff(refuse(&fleet.nodes[owner].id))
        .await
        .unwrap_err();
    let hint = not_owner::from_status(&not_held).expect("typed NotOwner");
    assert_eq!(hint.owner_id, fleet.nodes[owner].id, "{not_held:?}");
    // Nothing changed.
    let unchanged = view_of(&fleet.nodes[owner].endpoint(), db).await;
    assert_eq!(
        (unchanged.owner_id.as_str(), unchanged.lease_version),
        (before.owner_id.as_str(), before.lease_version)
    );

    // The operator command, asked at a node that does not own the database,
    // follows the NotOwner to the owner and hands it to the standby.
    let output = std::process::Command::new(corium_fleet_tests::bin_dir().join("corium-fleet"))
        .args(["handoff", db, "--to", &fleet.nodes[standby].id, "--endpoint"])
        .arg(fleet.nodes[standby].endpoint())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        fleet.logs()
    );
    assert!(
        stdout.contains(&format!("to {}", fleet.nodes[standby].id)),
        "{stdout}"
    );
    eprintln!("handoff: {stdout}");
    let after = view_of(&fleet.nodes[standby].endpoint(), db).await;
    assert_eq!(after.owner_id, fleet.nodes[standby].id);
    assert!(after.lease_version > before.lease_version);
    let response = corium::transact(&fleet.nodes[standby].endpoint(), db, "after", &[])
        .await
        .unwrap();
    acked.insert(response.basis_t, "after".to_owned());
    let log: BTreeMap<u64, Vec<String>> = corium::log(&fleet.nodes[standby].endpoint(), db)
        .await
        .unwrap()
        .into_iter()
        .collect();
    for (t, name) in &acked {
        assert!(
            log.get(t).is_some_and(|names| names.contains(name)),
            "t={t} {name}: {log:?}"
        );
    }
    // The preferred node does not take it back: the new owner is healthy.
    tokio::time::sleep(TTL * 2).await;
    assert_eq!(
        view_of(&fleet.nodes[owner].endpoint(), db).await.owner_id,
        fleet.nodes[standby].id
    );

    // Delete: unknown is `deleted: false` (stock Corium's answer); a deleted
    // database is NOT_FOUND at every candidate (no one activates it), and
    // the name can be created again.
    let mut catalog = corium_protocol::pb::catalog_client::CatalogClient::new(
        channel(&fleet.nodes[standby].endpoint()).await,
    );
    let request = |name: &str| corium_protocol::pb::DeleteDatabaseRequest { db: name.to_owned() };
    let top_of_missing = fleet.candidates("missing")[0];
    let mut missing_catalog = corium_protocol::pb::catalog_client::CatalogClient::new(
        channel(&fleet.nodes[top_of_missing].endpoint()).await,
    );
    let missing = missing_catalog
        .delete_database(request("missing"))
        .await
        .unwrap()
        .into_inner();
    assert!(!missing.deleted, "{missing:?}");
    assert!(
        catalog
            .delete_database(request(db))
            .await
            .unwrap()
            .into_inner()
            .deleted
    );
    for index in fleet.candidates(db) {
        expect_code(
            corium::transact(&fleet.nodes[index].endpoint(), db, "ghost", &[]).await,
            tonic::Code::NotFound,
            &fleet.nodes[index].id,
        );
    }
    assert!(corium::create(&fleet.nodes[owner].endpoint(), db).await.unwrap());
    let fresh = corium::log(&fleet.nodes[owner].endpoint(), db).await.unwrap();
    assert!(
        fresh.iter().all(|(_, names)| names.is_empty()),
        "recreated empty: {fresh:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placement_map_pins_databases_and_bad_maps_are_refused_with_the_line() {
    let backend = Backend::all().remove(0);
    // Pick a database whose rendezvous top candidate is node-1, and pin it to
    // node-3 then node-2.
    let probe = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
    let db = (0..1_000)
        .map(|i| format!("pinned-{i}"))
        .find(|db| probe.candidates(db)[0] == 0)
        .expect("node-1 ranks first for about a third of all names");
    let map = probe.path("probe-map");
    std::fs::write(
        &map,
        format!("# comment\n{db} = node-3, node-2\nother = node-1, node-7\n"),
    )
    .unwrap();
    let (status, stderr) = probe.nodes[0]
        .run_variant(&[
            ("--node-id", "node-9"),
            ("--advertise", "http://127.0.0.1:1"),
            ("--placement-map", map.to_str().unwrap()),
        ])
        .await;
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("line 3") && stderr.contains("node-7"), "{stderr}");
    drop(probe);

    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("placement-map");
    std::fs::write(&map, format!("{db} = node-3, node-2\n")).unwrap();
    let map_flag = map.to_str().unwrap().to_owned();
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(TTL)
        .node_flags(&["--placement-map", &map_flag])
        .start()
        .await;
    fleet.start_ingresses(1, &["--placement-map", &map_flag]).await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, &db).await.unwrap());
    let first = corium::transact(&address, &db, "first", &[]).await.unwrap();
    let at = |i: usize| fleet.nodes[i].endpoint();
    assert_eq!(
        view_of(&at(2), &db).await.owner_id,
        "node-3",
        "the map, not rendezvous, placed it"
    );

    // A bad edit is refused; the map in force stays.
    std::fs::write(&map, format!("{db} = node-3, node-2\n{db} = node-1, node-2\n")).unwrap();
    eventually(
        Duration::from_secs(20),
        "every node refuses the bad map",
        async || {
            for node in &fleet.nodes {
                let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
                if !metrics.contains("corium_fleet_placement_map_refused_total 1") {
                    return Err(fleet.with_logs(format!("{} has not refused it", node.id)));
                }
            }
            Ok(())
        },
    )
    .await;
    for node in &fleet.nodes {
        assert!(node.log().contains("line=2"), "{}", node.log());
    }
    let view = view_of(&at(2), &db).await;
    assert_eq!(view.owner_id, "node-3");
    let listed: Vec<&str> = view.candidates.iter().map(|c| c.node_id.as_str()).collect();
    assert_eq!(listed, ["node-3", "node-2"]);

    // A good edit moves it: node-3 is no longer a candidate and hands it to
    // the new first choice.
    std::fs::write(&map, format!("{db} = node-2, node-1\n")).unwrap();
    eventually(
        Duration::from_secs(30),
        format!("{db} moved to node-2"),
        async || {
            let owner = view_of(&at(1), &db).await.owner_id;
            if owner == "node-2" {
                Ok(())
            } else {
                Err(fleet.with_logs(format!("owned by {owner:?}")))
            }
        },
    )
    .await;
    let next = corium::transact(&address, &db, "after-move", &[]).await.unwrap();
    assert_eq!(
        next.basis_before, first.basis_t,
        "nothing lost, nothing in between"
    );
    let (_, metrics) = http_get(fleet.nodes[2].admin, "/metrics").await.unwrap();
    assert!(metrics.contains("corium_fleet_rebalances_total 1"), "{metrics}");
}

/// Rebalances and takeovers every node of `fleet` counted.
async fn moves_counted(fleet: &Fleet) -> (f64, f64) {
    let (mut rebalances, mut takeovers) = (0.0, 0.0);
    for node in &fleet.nodes {
        let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
        let count = |series| corium_fleet_tests::metric(&metrics, series).expect(series);
        rebalances += count("corium_fleet_rebalances_total");
        takeovers += count("corium_fleet_takeovers_total");
    }
    (rebalances, takeovers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_moves_only_databases_whose_candidates_changed() {
    for backend in Backend::all() {
        let registry = ["--registry-ttl-ms", "3000", "--registry-renew-ms", "300"];
        let mut fleet = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .registry()
            .node_flags(&registry)
            .start()
            .await;
        fleet.start_ingresses(1, &[]).await;
        let dbs: Vec<String> = (0..24).map(|i| format!("join-{i}")).collect();
        create_all(&fleet, &dbs).await;
        let before_candidates: BTreeMap<&String, Vec<String>> = dbs
            .iter()
            .map(|db| (db, names(&fleet, &fleet.candidates(db))))
            .collect();
        let mut before_owner = BTreeMap::new();
        for db in &dbs {
            before_owner.insert(db, owner_of(&fleet, db).await);
        }
        let joined = fleet.add_node().await;
        let new_id = fleet.nodes[joined].id.clone();
        let changed: BTreeSet<String> = dbs
            .iter()
            .filter(|db| names(&fleet, &fleet.candidates(db)) != before_candidates[db])
            .cloned()
            .collect();
        // The new node stands by for exactly the databases whose candidate
        // set now includes it, once every node has seen it in the registry.
        eventually(
            Duration::from_secs(30),
            format!("{backend:?}: {new_id} stands by for {changed:?}"),
            async || {
                let status = corium_fleet_tests::corium::admin(&fleet.nodes[joined].endpoint())
                    .await
                    .node_status(corium_fleet_proto::fleet::NodeStatusRequest {})
                    .await
                    .unwrap()
                    .into_inner();
                let mine: BTreeSet<String> = status
                    .databases
                    .iter()
                    .filter(|view| view.database.starts_with("join-"))
                    .map(|view| view.database.clone())
                    .collect();
                if mine == changed {
                    Ok(())
                } else {
                    Err(fleet.with_logs(format!("{new_id} sees {mine:?}")))
                }
            },
        )
        .await;
        // Give rebalancing a few renewal periods to act, then compare owners.
        tokio::time::sleep(TTL * 2).await;
        let mut owners = BTreeMap::new();
        for db in &dbs {
            owners.insert(db, owner_of(&fleet, db).await);
        }
        let moved: BTreeSet<String> = dbs
            .iter()
            .filter(|db| owners[db] != before_owner[db])
            .cloned()
            .collect();
        eprintln!(
            "{backend:?}: {new_id} joined: {} of {} databases changed candidates, {} changed owner",
            changed.len(),
            dbs.len(),
            moved.len()
        );
        // A healthy owner that is still a candidate is never preempted: no
        // node rebalanced anything, so nothing moved. An owner starved of
        // CPU past its lease (a loaded machine) is taken over by a candidate,
        // which is no preemption: each such move is a counted takeover.
        let (rebalances, takeovers) = moves_counted(&fleet).await;
        assert!(
            rebalances < 0.5,
            "{backend:?}: preempted {moved:?} ({rebalances} rebalances)"
        );
        if takeovers < 0.5 {
            assert!(moved.is_empty(), "{backend:?}: moved {moved:?}");
        } else {
            eprintln!("{backend:?}: {takeovers} takeovers (an owner missed its lease)");
            assert!(
                f64::from(u32::try_from(moved.len()).unwrap()) <= takeovers,
                "{backend:?}: moved {moved:?} with {takeovers} takeovers"
            );
        }
        for db in &dbs {
            assert!(
                names(&fleet, &fleet.candidates(db)).contains(&owners[db]),
                "{backend:?}: {db}"
            );
        }
        assert!(
            !changed.is_empty() && changed.len() < dbs.len(),
            "{backend:?}: {changed:?}"
        );
        // Everything still writes through the one address.
        for db in &dbs {
            corium::transact(&fleet.ingresses[0].endpoint(), db, &format!("{db}-after"), &[])
                .await
                .unwrap_or_else(|status| panic!("{backend:?}: {db}: {status:?}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_reserves_the_target_and_places_it_on_its_own_candidates() {
    for backend in Backend::all() {
        let (fleet, address) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .start_with_ingress()
            .await;
        let source = "fork-src";
        assert!(corium::create(&address, source).await.unwrap());
        let mut last = 0;
        for i in 0..3 {
            last = corium::transact(&address, source, &format!("item-{i}"), &[])
                .await
                .unwrap()
                .basis_t;
        }
        let mut catalog = corium_protocol::pb::catalog_client::CatalogClient::new(channel(&address).await);
        let fork = |target: &str| corium_protocol::pb::ForkDatabaseRequest {
            db: source.to_owned(),
            target: target.to_owned(),
            as_of_t: 0,
        };
        // A target name that cannot exist is refused before anything runs.
        expect_code(
            catalog.fork_database(fork("bad name!")).await,
            tonic::Code::InvalidArgument,
            format!("{backend:?}: a fork to a bad name"),
        );
        let forked = catalog
            .fork_database(fork("fork-dst"))
            .await
            .unwrap()
            .into_inner();
        assert!(forked.created);
        assert_eq!(forked.basis_t, last, "{backend:?}: forked at the source's basis");
        // The target is a database of its own, on its own candidates.
        let after = corium::transact(&address, "fork-dst", "only-in-target", &[])
            .await
            .unwrap();
        assert_eq!(after.basis_before, last);
        assert_eq!(
            owner_of(&fleet, "fork-dst").await,
            fleet.nodes[fleet.candidates("fork-dst")[0]].id
        );
        let target_log = corium::log(&address, "fork-dst").await.unwrap();
        for i in 0..3 {
            let name = format!("item-{i}");
            assert!(
                target_log.iter().any(|(_, names)| names.contains(&name)),
                "{backend:?}: {name}"
            );
        }
        // The source is untouched and still writable.
        let source_next = corium::transact(&address, source, "only-in-source", &[])
            .await
            .unwrap();
        assert_eq!(source_next.basis_before, last);
        let source_log = corium::log(&address, source).await.unwrap();
        assert!(
            !source_log
                .iter()
                .any(|(_, names)| names.iter().any(|n| n == "only-in-target"))
        );
        // Forking into an existing name is ALREADY_EXISTS and changes nothing.
        expect_code(
            catalog.fork_database(fork("fork-dst")).await,
            tonic::Code::AlreadyExists,
            format!("{backend:?}: a fork into an existing name"),
        );
        assert_eq!(
            corium::log(&address, "fork-dst").await.unwrap().len(),
            target_log.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_take_over_a_dead_owners_databases_without_any_request() {
    for backend in Backend::all() {
        let mut fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        let db = "unattended";
        let [owner, successor] = fleet.candidates(db)[..] else {
            panic!()
        };
        assert!(corium::create(&fleet.nodes[owner].endpoint(), db).await.unwrap());
        corium::transact(&fleet.nodes[owner].endpoint(), db, "a", &[])
            .await
            .unwrap();
        // The owner publishes what it owns in its registry record; that is
        // what its databases' candidates watch.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let before = view_of(&fleet.nodes[successor].endpoint(), db)
            .await
            .lease_version;
        fleet.nodes[owner].kill();
        eventually(
            TTL * 6,
            format!("{backend:?}: takeover without traffic"),
            async || {
                let view = view_of(&fleet.nodes[successor].endpoint(), db).await;
                if view.owner_id == fleet.nodes[successor].id {
                    assert!(view.lease_version > before, "{backend:?}: {view:?}");
                    Ok(())
                } else {
                    Err(fleet.with_logs(format!("{view:?}")))
                }
            },
        )
        .await;
        // The lease in storage moves when the takeover's CAS lands; the
        // takeover is counted once the cell has recovered and serves, which
        // on a busy machine can be a moment later.
        fleet
            .await_node_metric(
                successor,
                "corium_fleet_takeovers_total 1",
                Duration::from_secs(20),
                format!("{backend:?}: the takeover is counted"),
            )
            .await;
    }
}
