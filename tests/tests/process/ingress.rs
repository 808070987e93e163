//! The ingress over real processes: one fleet address for stock Corium
//! clients, one hop to the lease holder, a retry after `NotOwner`, clean
//! refusals of bad input, and fencing intact under stale caches.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use corium_client::Peer as _;
use corium_fleet_tests::corium::{self, frame, raw_call};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric};
use corium_fleet_wire::metadata;
use prost::Message as _;

const TTL: Duration = Duration::from_millis(1500);

/// (what, path, headers, body, expected code)
type BadCase = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    tonic::Code,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_clients_work_through_one_address_across_owner_failover() {
    for backend in Backend::all() {
        // The internal hop is real mTLS here, and the ingress runs the
        // single-threaded runtime a one-CPU pod gets (every other test's
        // ingress has two threads).
        let mut fleet = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .mtls()
            .start()
            .await;
        fleet.start_ingresses(1, &["--worker-threads", "1"]).await;
        let address = fleet.ingresses[0].endpoint();
        // 30 databases created and written through the one address.
        let dbs: Vec<String> = (0..30).map(|i| format!("db{i:02}")).collect();
        let mut admin = corium_peer::Admin::connect(&address, None, None).await.unwrap();
        let schema = corium::schema_forms();
        for db in &dbs {
            assert!(
                admin.create_database(db, &schema).await.unwrap(),
                "{backend:?} create {db}"
            );
        }
        let mut connections = Vec::new();
        for db in &dbs {
            let mut config = corium_peer::ConnectConfig::new(&address, db);
            config.failover_timeout = Duration::from_secs(30);
            config.reconnect_max = Duration::from_millis(500);
            let connection =
                tokio::time::timeout(Duration::from_secs(30), corium_peer::Connection::connect(config))
                    .await
                    .unwrap()
                    .unwrap_or_else(|error| panic!("{backend:?} {db}: {error}\n{}", fleet.logs()));
            connection.transact(corium::item_forms("first")).await.unwrap();
            connections.push(connection);
        }
        // Every node owns some of them (placement spreads databases).
        for node in &fleet.nodes {
            let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
            assert!(
                !metrics.contains("corium_fleet_databases_owned 0\n"),
                "{} owns nothing:\n{metrics}",
                node.id
            );
        }
        // A stock `corium-client` peer on the same database, same address.
        let mut client_config = corium_peer::ConnectConfig::new(&address, &dbs[0]);
        client_config.failover_timeout = Duration::from_secs(30);
        client_config.reconnect_max = Duration::from_millis(500);
        let client = corium_client::LocalPeer::connect(client_config).await.unwrap();
        // Kill the owner of db00; every database keeps working through the
        // same address (the peer rides out the takeover on its own).
        let victim = fleet.candidates(&dbs[0])[0];
        fleet.nodes[victim].kill();
        let killed = Instant::now();
        for (db, connection) in dbs.iter().zip(&connections) {
            let mut reports = connection.tx_reports();
            let result = connection
                .transact(corium::item_forms("after-kill"))
                .await
                .unwrap_or_else(|error| panic!("{backend:?} {db}: {error}\n{}", fleet.logs()));
            // The report stream follows the new owner with no gap.
            let report = tokio::time::timeout(Duration::from_secs(20), async {
                loop {
                    let report = reports.recv().await.unwrap();
                    if report.t >= result.basis_t {
                        return report;
                    }
                }
            })
            .await
            .unwrap_or_else(|_| panic!("{backend:?} {db}: no report for t={}", result.basis_t));
            assert_eq!(report.t, result.basis_t);
            assert_eq!(
                connection.basis_t(),
                result.basis_t,
                "{db}: local value gapless up to the commit"
            );
        }
        eprintln!(
            "{backend:?}: all 30 databases committed again {:?} after the SIGKILL",
            killed.elapsed()
        );
        // The corium-client peer transacts across the failover too, and its
        // database value shows every transaction through the new basis.
        let tx = corium_client::tx::TxBuilder::new()
            .entity(
                corium_client::tx::EntityMap::with_id(corium_client::tx::tempid("c"))
                    .set("item/name", "via-client"),
            )
            .build();
        let report = client
            .transact(tx)
            .await
            .unwrap_or_else(|error| panic!("{backend:?}: {error}"));
        let db = client.db().await.unwrap();
        let query = corium_query::edn::read_one("[:find ?n :where [?e :item/name ?n]]").unwrap();
        let names: Vec<String> = db
            .query_edn(query, Vec::new())
            .await
            .unwrap()
            .rows()
            .iter()
            .map(|row| row.get::<String>(0).unwrap())
            .collect();
        for name in ["first", "after-kill", "via-client"] {
            assert!(
                names.contains(&name.to_owned()),
                "{backend:?}: {name} missing from {names:?} at t={}",
                report.basis_t
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_status_and_changes_nothing() {
    let backend = Backend::Filesystem;
    let mut fleet = Fleet::builder(backend).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &["--max-request-bytes", "4096"]).await;
    let ingress = fleet.ingresses[0].endpoint();
    let db = "guarded";
    assert!(corium::create(&ingress, db).await.unwrap());
    let before = corium::transact(&ingress, db, "ok", &[]).await.unwrap();
    let transact = "/corium.v1.Transactor/Transact";
    let valid = frame(&corium::transact_request(db, "refused").encode_to_vec());
    let cases: Vec<BadCase> = vec![
        (
            "unknown database",
            transact,
            vec![],
            frame(&corium::transact_request("missing", "x").encode_to_vec()),
            tonic::Code::NotFound,
        ),
        (
            "unparsable body, no route",
            transact,
            vec![],
            frame(&[0x0a, 0x40, 1, 2]),
            tonic::Code::InvalidArgument,
        ),
        (
            "not even a gRPC frame",
            transact,
            vec![],
            vec![0, 0, 1],
            tonic::Code::InvalidArgument,
        ),
        (
            "oversized body",
            transact,
            vec![],
            frame(&corium::transact_request(db, &"x".repeat(8000)).encode_to_vec()),
            tonic::Code::ResourceExhausted,
        ),
        (
            "mismatched route header",
            transact,
            vec![(metadata::DATABASE_ROUTE, "other")],
            valid.clone(),
            tonic::Code::InvalidArgument,
        ),
        (
            "forged hop",
            transact,
            vec![(metadata::HOP, "1")],
            valid.clone(),
            tonic::Code::InvalidArgument,
        ),
        (
            "forged principal",
            transact,
            vec![(metadata::PRINCIPAL, "root")],
            valid.clone(),
            tonic::Code::InvalidArgument,
        ),
        (
            "forged lease version",
            transact,
            vec![(metadata::LEASE_VERSION, "1")],
            valid.clone(),
            tonic::Code::InvalidArgument,
        ),
        (
            "unknown method",
            "/corium.v1.PeerServer/Explain",
            vec![],
            valid.clone(),
            tonic::Code::Unimplemented,
        ),
    ];
    for (what, path, headers, body, code) in cases {
        let status = raw_call(&ingress, path, &headers, body).await;
        assert_eq!(status.code(), code, "{what}: {status:?}");
        assert!(!status.message().is_empty(), "{what}: a message says why");
    }
    // A matching route header is accepted, and nothing refused committed.
    let after = corium::transact(&ingress, db, "ok-2", &[(metadata::DATABASE_ROUTE, db)])
        .await
        .unwrap();
    assert_eq!(after.basis_before, before.basis_t, "nothing committed in between");
    let (_, metrics) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
    assert!(
        metrics.contains("corium_fleet_ingress_rejected_requests_total{reason=\"fleet_metadata\"} 3"),
        "{metrics}"
    );
    assert!(
        metrics.contains("corium_fleet_ingress_rejected_requests_total{reason=\"too_large\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_caches_and_random_ingresses_never_break_fencing() {
    for backend in Backend::all() {
        let mut fleet = Fleet::builder(backend.clone()).lease_ttl(TTL).start().await;
        // Caches that stay stale for the whole test.
        fleet
            .start_ingresses(2, &["--owner-cache-ttl-ms", "600000"])
            .await;
        let db = "contended";
        assert!(corium::create(&fleet.ingresses[0].endpoint(), db).await.unwrap());
        let mut acked: BTreeMap<u64, String> = BTreeMap::new();
        let mut failures = 0;
        let mut step = 0u64;
        let commit = |fleet: &Fleet, name: String, step: u64| {
            let endpoint = fleet.ingresses[usize::try_from(step % 2).unwrap()].endpoint();
            async move { (name.clone(), corium::transact(&endpoint, db, &name, &[]).await) }
        };
        // Warm both caches, then move ownership under them: a graceful
        // release (SIGTERM, then the node comes back as a candidate that must
        // not preempt), then a crash (SIGKILL) of the next holder.
        for round in 0..3 {
            let deadline = Instant::now() + TTL * 8;
            let mut committed_this_round = 0;
            while committed_this_round < 10 {
                step += 1;
                let (name, result) = commit(&fleet, format!("r{round}-{step}"), step).await;
                match result {
                    Ok(response) => {
                        assert!(
                            acked.insert(response.basis_t, name).is_none(),
                            "two acknowledgements for one t"
                        );
                        committed_this_round += 1;
                    }
                    Err(status) => {
                        // Clean failures only: retry later / not the owner.
                        assert!(
                            matches!(
                                status.code(),
                                tonic::Code::Unavailable | tonic::Code::FailedPrecondition
                            ),
                            "{backend:?}: {status:?}"
                        );
                        failures += 1;
                        assert!(
                            Instant::now() < deadline,
                            "{backend:?} round {round} stuck: {status:?}\n{}",
                            fleet.logs()
                        );
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
            let owner = fleet.index(&placement_owner(&fleet, db).await);
            match round {
                0 => {
                    fleet.nodes[owner].terminate().await;
                    fleet.nodes[owner].restart().await;
                }
                1 => fleet.nodes[owner].kill(),
                _ => {}
            }
        }
        // Each t in the log has exactly one writer's record, every
        // acknowledged transaction is there, and the log is gapless.
        let endpoint = fleet.ingresses[1].endpoint();
        let log: BTreeMap<u64, Vec<String>> = corium::log(&endpoint, db).await.unwrap().into_iter().collect();
        for (t, name) in &acked {
            assert!(
                log.get(t).is_some_and(|names| names.contains(name)),
                "{backend:?}: t={t} {name} lost: {log:?}"
            );
        }
        let last = *log.keys().last().unwrap();
        assert_eq!(
            log.keys().copied().collect::<Vec<_>>(),
            (1..=last).collect::<Vec<_>>()
        );
        eprintln!(
            "{backend:?}: {} acknowledged, {failures} clean refusals during two ownership moves",
            acked.len()
        );
    }
}

/// The lease holder of `db` as the first ingress reads it.
async fn placement_owner(fleet: &Fleet, db: &str) -> String {
    corium::placement(&fleet.ingresses[0].endpoint(), db)
        .await
        .owner_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_nodes_refuse_plaintext_and_untrusted_principals() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let db = "secured";
    assert!(corium::create(&fleet.ingresses[0].endpoint(), db).await.unwrap());
    let before = corium::transact(&fleet.ingresses[0].endpoint(), db, "a", &[])
        .await
        .unwrap();
    let owner = fleet.candidates(db)[0];
    let port = fleet.nodes[owner].grpc;
    // A plaintext client on the mTLS port gets nowhere.
    let plaintext = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    let attempt = async {
        let channel = plaintext.connect().await.ok()?;
        let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(channel);
        client
            .transact(corium::transact_request(db, "plaintext"))
            .await
            .ok()
    };
    assert!(
        attempt.await.is_none(),
        "a plaintext client was served on the mTLS port"
    );
    // A fleet certificate that does not name an ingress (a node's) may
    // connect, but may not speak for a principal.
    let channel = fleet.tls_channel(port, Some("node-2")).await.unwrap();
    let mut client = corium_protocol::pb::transactor_client::TransactorClient::new(channel);
    let mut request = tonic::Request::new(corium::transact_request(db, "forged"));
    request
        .metadata_mut()
        .insert(metadata::PRINCIPAL, "admin".parse().unwrap());
    let status = client.transact(request).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    // Nothing refused committed.
    let after = corium::transact(&fleet.ingresses[0].endpoint(), db, "b", &[])
        .await
        .unwrap();
    assert_eq!(after.basis_before, before.basis_t);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_sent_to_a_non_candidate_follows_the_candidates_it_names() {
    // Nodes that find each other in the registry, and an ingress whose
    // member list is behind: it knows one node only, which is not a
    // candidate of the database created.
    let backend = Backend::all().remove(0);
    let mut fleet = Fleet::builder(backend).lease_ttl(TTL).registry().start().await;
    let db = (0..1_000)
        .map(|i| format!("behind-{i}"))
        .find(|db| fleet.non_candidate(db) == Some(0))
        .expect("node-1 is a non-candidate of about a third of all names");
    // node-1 sees the whole fleet (its answer lists the real candidates).
    let expected: Vec<String> = fleet
        .candidates(&db)
        .iter()
        .map(|&i| fleet.nodes[i].id.clone())
        .collect();
    let first = fleet.nodes[0].endpoint();
    corium_fleet_tests::eventually(Duration::from_secs(20), "node-1 sees every member", async || {
        let view = corium::placement(&first, &db).await;
        let seen: Vec<String> = view.candidates.iter().map(|c| c.node_id.clone()).collect();
        if seen == expected {
            Ok(())
        } else {
            Err(format!("node-1 ranks {seen:?}"))
        }
    })
    .await;
    let member = &fleet.members[0];
    let stale = format!("{}={},zone={}", member.node_id, member.endpoint, member.zone);
    fleet.start_ingresses(1, &["--member", &stale]).await;
    let address = fleet.ingresses[0].endpoint();
    // The stock catalog client (no route header): one answer, created.
    assert!(
        corium::create(&address, &db)
            .await
            .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs())),
        "{db} created"
    );
    let owner = corium::placement(&first, &db).await.owner_id;
    assert!(
        expected
            .iter()
            .any(|id| owner.starts_with(&format!("{id}/")) || owner == *id),
        "{db} is held by {owner:?}, not one of its candidates {expected:?}"
    );
    let (_, metrics) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
    assert!(
        metrics.contains("corium_fleet_ingress_not_owner_retries_total 1"),
        "{metrics}"
    );
    // And it takes writes through the same stale ingress (owner calls
    // follow the holder from storage).
    corium::transact(&address, &db, "after-create", &[])
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
}

/// `corium_fleet_ingress_connections` (what the chart's autoscaler can scale
/// on) counts the client connections open now: three more while three
/// clients hold theirs, back where it was once they close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ingress_exports_its_open_connections() {
    let (fleet, address) = Fleet::filesystem_with_ingress(1, &[]).await;
    let admin = fleet.ingresses[0].admin;
    let open = async || {
        let (_, text) = http_get(admin, "/metrics").await.unwrap();
        metric(&text, "corium_fleet_ingress_connections").expect("the gauge is exported")
    };
    let before = open().await;
    let mut held = Vec::new();
    for n in 0..3_u8 {
        let channel = corium::channel(&address).await;
        // A call, so the connection is surely accepted and counted.
        corium_protocol::pb::catalog_client::CatalogClient::new(channel.clone())
            .list_databases(corium_protocol::pb::ListDatabasesRequest {})
            .await
            .unwrap_or_else(|status| panic!("call {n}: {status:?}"));
        held.push(channel);
    }
    let during = eventually(Duration::from_secs(10), "three more connections", async || {
        let now = open().await;
        if now >= before + 3.0 {
            Ok(now)
        } else {
            Err(format!("{now} open, {before} before"))
        }
    })
    .await;
    assert!(during >= before + 3.0);
    drop(held);
    eventually(Duration::from_secs(10), "the connections closed", async || {
        let now = open().await;
        if now <= before {
            Ok(())
        } else {
            Err(format!("{now} open, {before} before"))
        }
    })
    .await;
}

/// One request-size limit for both tiers (issue 51): the ingress and the
/// node given the same `--max-request-bytes`. A `Transact` whose message is
/// exactly the limit is committed, through the ingress and sent to the node
/// directly; one byte over is refused by both — at the ingress with
/// `RESOURCE_EXHAUSTED` naming the limit, before anything is forwarded; at
/// the node by its own decoding limit — and nothing over it is committed.
/// (Before, the node took up to 64 MiB whatever the ingress's limit, and
/// the ingress counted the frame header against the limit: a message at
/// the limit was refused at the ingress and taken at the node.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_size_limit_at_the_ingress_and_at_the_node() {
    const LIMIT: usize = 4096;
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .nodes(1)
        .node_flags(&["--max-request-bytes", "4096"])
        .start()
        .await;
    fleet.start_ingresses(1, &["--max-request-bytes", "4096"]).await;
    let ingress = fleet.ingresses[0].endpoint();
    let node = fleet.nodes[0].endpoint();
    let db = "sized";
    assert!(corium::create(&ingress, db).await.unwrap());
    // A transaction whose encoded message is `bytes` long.
    let sized = |name: &str, bytes: usize| {
        (0..bytes)
            .map(|pad| corium::transact_request(db, &format!("{name}-{}", "x".repeat(pad))))
            .find(|request| request.encoded_len() == bytes)
            .expect("a name that makes the message this long")
    };
    for (tier, endpoint) in [("ingress", &ingress), ("node", &node)] {
        let mut client =
            corium_protocol::pb::transactor_client::TransactorClient::new(corium::channel(endpoint).await);
        client
            .transact(sized(&format!("{tier}-at"), LIMIT))
            .await
            .unwrap_or_else(|status| panic!("{tier}: a message at the limit: {status:?}\n{}", fleet.logs()));
        let over = client
            .transact(sized(&format!("{tier}-over"), LIMIT + 1))
            .await
            .expect_err("one byte over the limit");
        assert!(over.message().contains("4096"), "{tier}: {over:?}");
        if tier == "ingress" {
            assert_eq!(over.code(), tonic::Code::ResourceExhausted, "{over:?}");
        }
    }
    let names: Vec<String> = corium::log(&ingress, db)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, names)| names)
        .collect();
    for tier in ["ingress", "node"] {
        assert!(
            names.iter().any(|name| name.starts_with(&format!("{tier}-at-"))),
            "{tier}: {names:?}"
        );
    }
    assert!(
        !names.iter().any(|name| name.contains("-over-")),
        "a request over the limit was committed: {names:?}"
    );
}

/// A stock client that asks for a database before creating it (a write
/// answered `NOT_FOUND`, which the ingress caches for its owner-cache TTL
/// against floods of junk names) and then creates it through the same
/// ingress writes to it at once: the create forgets the cached "unknown".
/// (Before, the write after `created: true` was `NOT_FOUND` for up to 2 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_created_right_after_a_not_found_is_found_at_once() {
    let mut fleet = Fleet::builder(Backend::Filesystem).nodes(1).start().await;
    // A TTL long enough that only the invalidation can explain success.
    fleet
        .start_ingresses(1, &["--owner-cache-ttl-ms", "600000"])
        .await;
    let address = fleet.ingresses[0].endpoint();
    let missing = corium::transact(&address, "late", "before", &[])
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound, "{missing:?}");
    assert!(corium::create(&address, "late").await.unwrap());
    corium::transact(&address, "late", "after", &[])
        .await
        .unwrap_or_else(|status| panic!("the write after the create: {status:?}\n{}", fleet.logs()));
}
