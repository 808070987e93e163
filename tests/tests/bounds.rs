//! Resource bounds over real processes: what a client chooses cannot make
//! the fleet do unbounded work. Database names are checked by Corium's rule
//! on every request type, at the ingress and at the node, before anything
//! touches storage.

use std::time::Duration;

use corium_fleet_proto::fleet::requests_client::RequestsClient;
use corium_fleet_proto::fleet::{DatabasePlacementRequest, HandoffRequest, RequestStatusRequest};
use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, http_get};
use corium_protocol::pb;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

const TTL: Duration = Duration::from_millis(1500);

/// Every request type that names a database, answered for `db` at
/// `endpoint`: `(request type, code)`.
async fn every_type(endpoint: &str, db: &str) -> Vec<(&'static str, Code)> {
    let code = |result: Result<(), tonic::Status>| result.err().map_or(Code::Ok, |status| status.code());
    let mut transactor = TransactorClient::new(channel(endpoint).await);
    let mut admin = corium::admin(endpoint).await;
    vec![
        (
            "transact",
            code(
                transactor
                    .transact(corium::transact_request(db, "x"))
                    .await
                    .map(drop),
            ),
        ),
        (
            "subscribe",
            code(
                transactor
                    .subscribe(pb::SubscribeRequest {
                        db: db.to_owned(),
                        from_basis_t: 0,
                        protocol_version: corium_protocol::PROTOCOL_VERSION,
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "sync",
            code(
                transactor
                    .sync(pb::SyncRequest {
                        db: db.to_owned(),
                        t: 0,
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "request-status",
            code(
                RequestsClient::new(channel(endpoint).await)
                    .status(RequestStatusRequest {
                        database: db.to_owned(),
                        request_id: uuid::Uuid::new_v4().to_string(),
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "placement",
            code(
                admin
                    .database_placement(DatabasePlacementRequest {
                        database: db.to_owned(),
                    })
                    .await
                    .map(drop),
            ),
        ),
        (
            "handoff",
            code(
                admin
                    .handoff(HandoffRequest {
                        database: db.to_owned(),
                        target_node_id: "node-2".to_owned(),
                    })
                    .await
                    .map(drop),
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junk_database_names_are_refused_before_any_storage_read() {
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &[]).await;
    let junk = ["bad name", "../etc", "a.b", "x".repeat(129).as_str(), "naïve"].map(str::to_owned);
    for name in &junk {
        // Through the ingress, and directly at a node: INVALID_ARGUMENT,
        // which no client retries.
        for endpoint in [fleet.ingresses[0].endpoint(), fleet.nodes[0].endpoint()] {
            for (kind, code) in every_type(&endpoint, name).await {
                assert_eq!(code, Code::InvalidArgument, "{kind} {name:?} at {endpoint}");
            }
        }
    }
    // Not one storage operation was made for them.
    for node in &fleet.nodes {
        let (_, root_ops) = http_get(node.admin, "/debug/root-ops").await.unwrap();
        for name in &junk {
            assert!(
                !root_ops.contains(name.as_str()),
                "{} read storage for {name:?}:\n{root_ops}",
                node.id
            );
        }
    }
    // The negative control: a valid name of no database is looked up, and
    // is NOT_FOUND at its candidates.
    let absent = "valid-but-absent";
    let codes = every_type(&fleet.ingresses[0].endpoint(), absent).await;
    let transact = codes.iter().find(|(kind, _)| *kind == "transact").unwrap().1;
    assert_eq!(transact, Code::NotFound, "{codes:?}");
    let candidate = &fleet.nodes[fleet.candidates(absent)[0]];
    let (_, root_ops) = http_get(candidate.admin, "/debug/root-ops").await.unwrap();
    assert!(root_ops.contains(absent), "{root_ops}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_beyond_the_limits_are_refused_and_places_come_back() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .node_flags(&["--max-subscriptions-per-database", "2"])
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let (db, other) = ("watched", "other");
    assert!(corium::create(&address, db).await.unwrap());
    assert!(corium::create(&address, other).await.unwrap());
    let subscribe = async |db: &str| {
        TransactorClient::new(channel(&address).await)
            .subscribe(pb::SubscribeRequest {
                db: db.to_owned(),
                from_basis_t: 0,
                protocol_version: corium_protocol::PROTOCOL_VERSION,
            })
            .await
    };
    let first = subscribe(db).await.unwrap();
    let second = subscribe(db).await.unwrap();
    let refused = subscribe(db).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    // Another database is not affected by this one's subscribers.
    let _elsewhere = subscribe(other).await.unwrap();
    let owner = &fleet.nodes[fleet.candidates(db)[0]];
    let (_, metrics) = http_get(owner.admin, "/metrics").await.unwrap();
    assert_eq!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_subscriptions_refused_total"),
        Some(1.0),
        "{metrics}"
    );
    // A place comes back when a subscriber leaves.
    drop(first);
    corium_fleet_tests::eventually(Duration::from_secs(10), "a place comes back", async || {
        subscribe(db).await.map(drop)
    })
    .await;
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_client_cap_are_closed_and_places_come_back() {
    use tokio::io::AsyncReadExt as _;
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet
        .start_ingresses(1, &["--max-connections-per-client", "3"])
        .await;
    let ingress = &fleet.ingresses[0];
    let port = ingress.grpc;
    // Three idle sockets (not even an HTTP/2 preface) take the client's places.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    // The fourth is closed as soon as it is accepted.
    let mut fourth = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(5), fourth.read(&mut buffer))
        .await
        .expect("closed at once, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_ingress_rejected_connections_total")
            .is_some_and(|count| count >= 1.0),
        "{metrics}"
    );
    // Closing one gives its place back: a real call is served again.
    held.pop();
    let address = ingress.endpoint();
    corium_fleet_tests::eventually(
        Duration::from_secs(10),
        "a call after a place came back",
        async || corium::create(&address, "after-the-cap").await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_nothing_is_closed_after_the_preface_timeout() {
    use tokio::io::AsyncReadExt as _;
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &["--preface-timeout-ms", "1000"]).await;
    let ingress = &fleet.ingresses[0];
    let mut silent = tokio::net::TcpStream::connect(("127.0.0.1", ingress.grpc))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buffer))
        .await
        .expect("closed by the ingress, not left open");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let closed_after = started.elapsed();
    eprintln!("silent socket closed after {closed_after:?}");
    let (_, metrics) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        corium_fleet_tests::metric(&metrics, "corium_fleet_ingress_preface_timeouts_total")
            .is_some_and(|count| count >= 1.0),
        "{metrics}"
    );
    assert!(
        closed_after >= Duration::from_millis(900),
        "closed before the timeout: {closed_after:?}"
    );
    // A client that speaks is served as before (retried: on a loaded
    // machine a client may itself be slow to send its preface).
    let address = ingress.endpoint();
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "a call from a client that speaks",
        async || corium::create(&address, "spoken").await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_that_never_read_do_not_stall_other_calls_to_their_node() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(1)
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let (bulk, calm) = ("bulk", "calm");
    assert!(corium::create(&address, bulk).await.unwrap());
    assert!(corium::create(&address, calm).await.unwrap());
    // A backlog of ~6 MiB, more than a client's and the hop's windows hold
    // for one stream together.
    let filler = "x".repeat(32 * 1024);
    for i in 0..200 {
        corium::transact(&address, bulk, &format!("{i}-{filler}"), &[])
            .await
            .unwrap();
    }
    // Six subscribers from the start that never read, each on its own
    // client connection (so only the ingress's hop to the node is shared).
    let mut stalled = Vec::new();
    for _ in 0..6 {
        let stream = TransactorClient::new(channel(&address).await)
            .subscribe(pb::SubscribeRequest {
                db: bulk.to_owned(),
                from_basis_t: 0,
                protocol_version: corium_protocol::PROTOCOL_VERSION,
            })
            .await
            .unwrap();
        stalled.push(stream);
    }
    // Let the backlogs flow until every window on the way is full.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Writes to another database on the same node still go through.
    for i in 0..10 {
        let started = std::time::Instant::now();
        tokio::time::timeout(
            Duration::from_secs(5),
            corium::transact(&address, calm, &format!("calm-{i}"), &[]),
        )
        .await
        .unwrap_or_else(|_| panic!("write {i} to {calm:?} stalled behind subscribers that never read"))
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    drop(stalled);
}
