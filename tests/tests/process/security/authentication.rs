//! Tokens checked at the ingress for every method class, stock clients with
//! tokens across a failover, principals forged in headers and trailers, and
//! client certificates on the TLS listener.

use std::time::Duration;

use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::{HandoffRequest, NodeStatusRequest, RequestStatusRequest};
use corium_fleet_tests::corium::{self};
use corium_fleet_tests::{Backend, Fleet, http_get, metric};
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

use super::{Bearer, Clients, TOKEN, TTL, clients, code, log_as, start_strict};

/// A thin client's read of `db` (`PeerServer/DbStats`, served by a read
/// replica).
fn stats_request(db: &str) -> pb::DbStatsRequest {
    pb::DbStatsRequest {
        db: Some(pb::DbViewSpec {
            db: db.to_owned(),
            view: None,
        }),
    }
}

/// One call of every method class the fleet serves, each answered with its
/// status code: `(class, code)`.
#[allow(clippy::too_many_lines)] // One call per class, each spelled out.
async fn every_class(clients: &mut Clients, db: &str) -> Vec<(&'static str, Code)> {
    vec![
        (
            "replica-read",
            code(clients.peer.db_stats(stats_request(db)).await),
        ),
        (
            "thin-client-transact",
            code(
                clients
                    .peer
                    .transact(corium::transact_request(db, "intruder"))
                    .await,
            ),
        ),
        (
            "create",
            code(
                clients
                    .catalog
                    .create_database(pb::CreateDatabaseRequest {
                        db: "intruder".to_owned(),
                        schema: corium::schema(),
                        storage_key: String::new(),
                    })
                    .await,
            ),
        ),
        (
            "transact",
            code(
                clients
                    .transactor
                    .transact(corium::transact_request(db, "intruder"))
                    .await,
            ),
        ),
        (
            "subscribe",
            code(
                clients
                    .transactor
                    .subscribe(corium_fleet_tests::corium::subscribe_request(db, 0))
                    .await,
            ),
        ),
        (
            "sync",
            code(
                clients
                    .transactor
                    .sync(pb::SyncRequest {
                        db: db.to_owned(),
                        t: 0,
                    })
                    .await,
            ),
        ),
        (
            "list",
            code(clients.catalog.list_databases(pb::ListDatabasesRequest {}).await),
        ),
        (
            "fork",
            code(
                clients
                    .catalog
                    .fork_database(pb::ForkDatabaseRequest {
                        db: db.to_owned(),
                        target: "intruder-fork".to_owned(),
                        ..Default::default()
                    })
                    .await,
            ),
        ),
        (
            "gc",
            code(
                clients
                    .catalog
                    .gc_deleted_databases(pb::GcDeletedDatabasesRequest {
                        retention_millis: Some(0),
                    })
                    .await,
            ),
        ),
        (
            "node-status",
            code(clients.admin.node_status(NodeStatusRequest {}).await),
        ),
        (
            "handoff",
            code(
                clients
                    .admin
                    .handoff(HandoffRequest {
                        database: db.to_owned(),
                        target_node_id: "node-2".to_owned(),
                    })
                    .await,
            ),
        ),
        (
            "request-status",
            code(
                clients
                    .requests
                    .status(RequestStatusRequest {
                        database: db.to_owned(),
                        request_id: uuid::Uuid::new_v4().to_string(),
                    })
                    .await,
            ),
        ),
        // Last: the one that would destroy the database.
        (
            "delete",
            code(
                clients
                    .catalog
                    .delete_database(pb::DeleteDatabaseRequest { db: db.to_owned() })
                    .await,
            ),
        ),
    ]
}

/// Asserts that a TLS client without a certificate gets no answer at
/// `port`: the handshake, or else its call, fails.
async fn assert_not_served_without_certificate(fleet: &Fleet, port: u16) {
    let anonymous = async {
        let channel = fleet.tls_channel(port, None).await.ok()?;
        CatalogClient::new(channel)
            .list_databases(pb::ListDatabasesRequest {})
            .await
            .ok()
    };
    assert!(
        anonymous.await.is_none(),
        "a TLS client without a certificate was served at port {port}"
    );
}

async fn ingress_metric(fleet: &Fleet, series: &str) -> f64 {
    let (_, text) = http_get(fleet.ingresses[0].admin, "/metrics").await.unwrap();
    metric(&text, series).unwrap_or_else(|| panic!("{series} not exported:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strict_fleet_refuses_missing_and_wrong_credentials_for_every_method_class_and_changes_nothing() {
    let (fleet, address) = start_strict(Fleet::builder(Backend::Filesystem).lease_ttl(TTL).mtls()).await;
    let db = "guarded";
    let mut operator = clients(&address, Some(TOKEN)).await;
    operator
        .catalog
        .create_database(pb::CreateDatabaseRequest {
            db: db.to_owned(),
            schema: corium::schema(),
            storage_key: String::new(),
        })
        .await
        .unwrap();
    let written = operator
        .transactor
        .transact(corium::transact_request(db, "first"))
        .await
        .unwrap()
        .into_inner();

    // No token, a wrong one, and stock Corium's development token (which a
    // --serve-token fleet no longer accepts): every class refused
    // UNAUTHENTICATED, at the ingress.
    for token in [None, Some("wrong"), Some(DEFAULT_DEV_TOKEN)] {
        let mut stranger = clients(&address, token).await;
        for (class, code) in every_class(&mut stranger, db).await {
            assert_eq!(code, Code::Unauthenticated, "{class} with {token:?}");
        }
    }
    assert!(
        ingress_metric(
            &fleet,
            "corium_fleet_ingress_rejected_requests_total{reason=\"unauthenticated\"}"
        )
        .await
            >= 33.0
    );

    // Nothing changed: the catalog holds only the database the operator
    // made, and its log only the operator's write.
    let listed = operator
        .catalog
        .list_databases(pb::ListDatabasesRequest {})
        .await
        .unwrap()
        .into_inner()
        .dbs;
    assert_eq!(listed, vec![db.to_owned()]);
    // The operator reads through a read replica, which follows the owner
    // with the node's own credential: the write, and nothing else.
    let stats = operator
        .peer
        .db_stats(stats_request(db))
        .await
        .expect("the operator reads through a replica")
        .into_inner();
    assert_eq!(stats.basis_t, written.basis_t);
    let log = log_as(&address, db, TOKEN).await;
    assert_eq!(corium::names(&log), vec!["first"], "{log:?}");
    assert_eq!(log.last().map(|(t, _)| *t), Some(written.basis_t));

    // The negative control: the same classes with the token all pass the
    // checks (some then fail for their own reasons, never for credentials).
    for (class, code) in every_class(&mut operator, db).await {
        assert!(
            !matches!(code, Code::Unauthenticated | Code::PermissionDenied),
            "{class} with the token: {code:?}\n{}",
            fleet.logs()
        );
    }

    // Directly at a node: a TLS client without a certificate does not get
    // past the handshake; a node certificate with a wrong token is refused.
    let owner = fleet.candidates("other")[0];
    let port = fleet.nodes[owner].grpc;
    assert_not_served_without_certificate(&fleet, port).await;
    let channel = fleet.tls_channel(port, Some("node-2")).await.unwrap();
    let wrong = CatalogClient::with_interceptor(channel, Bearer(Some("wrong".to_owned())))
        .list_databases(pb::ListDatabasesRequest {})
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated, "{wrong:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stock_connection_with_a_token_works_through_the_ingress_across_a_failover() {
    let (mut fleet, address) = start_strict(Fleet::builder(Backend::Filesystem).lease_ttl(TTL).mtls()).await;
    let db = "tokened";
    // Stock corium-peer, configured as for a stock transactor with a token.
    let mut admin = corium_peer::Admin::connect(&address, Some(TOKEN.to_owned()), None)
        .await
        .unwrap();
    assert!(admin.create_database(db, &corium::schema_forms()).await.unwrap());
    let mut config = corium_peer::ConnectConfig::new(&address, db);
    config.token = Some(TOKEN.to_owned());
    config.failover_timeout = Duration::from_secs(30);
    config.reconnect_max = Duration::from_millis(500);
    let connection = tokio::time::timeout(Duration::from_secs(30), corium_peer::Connection::connect(config))
        .await
        .unwrap()
        .unwrap();
    let before = connection.transact(corium::item_forms("before")).await.unwrap();
    let owner = fleet.candidates(db)[0];
    fleet.nodes[owner].kill();
    let after = connection
        .transact(corium::item_forms("after"))
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", fleet.logs()));
    assert!(after.basis_t > before.basis_t);
    // The same stock client without the token gets nowhere.
    let mut anonymous = corium_peer::ConnectConfig::new(&address, db);
    anonymous.failover_timeout = Duration::from_secs(2);
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        corium_peer::Connection::connect(anonymous),
    )
    .await
    .unwrap();
    assert!(
        refused.is_err(),
        "an anonymous stock client connected to a strict fleet"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario: the listener started with client certificates, then each kind of caller.
async fn a_client_certificate_on_the_tls_listener_authenticates_its_holder() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .node_flags(&["--serve-token", TOKEN])
        .start()
        .await;
    // A client certificate for "alice" from the same CA.
    fleet.issue_certs(&["alice"]);
    let certs = fleet.certs().unwrap();
    let tls_port = corium_fleet_tests::free_port();
    let path = |name: &str| certs.join(name).display().to_string();
    let listen = format!("127.0.0.1:{tls_port}");
    let (cert, key, ca) = (
        path("corium-fleet-ingress.pem"),
        path("corium-fleet-ingress.key"),
        path("ca.pem"),
    );
    fleet
        .start_ingresses(
            1,
            &[
                "--serve-token",
                TOKEN,
                "--tls-listen",
                &listen,
                "--tls-cert",
                &cert,
                "--tls-key",
                &key,
                "--tls-client-ca",
                &ca,
                "--tls-require-client-cert",
                "true",
            ],
        )
        .await;
    let connect = async |identity: Option<&str>| fleet.tls_channel(tls_port, identity).await;
    // Alice, with her certificate and no token, is authenticated by it.
    let alice = connect(Some("alice")).await.unwrap();
    CatalogClient::new(alice.clone())
        .create_database(pb::CreateDatabaseRequest {
            db: "alices".to_owned(),
            schema: corium::schema(),
            storage_key: String::new(),
        })
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    TransactorClient::new(alice.clone())
        .transact(corium::transact_request("alices", "by-alice"))
        .await
        .unwrap();
    // ... as herself, not as an operator.
    let status = FleetAdminClient::new(alice)
        .node_status(NodeStatusRequest {})
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // Without a certificate the TLS listener refuses the handshake, and on
    // the cleartext port the same call without the token is refused.
    assert_not_served_without_certificate(&fleet, tls_port).await;
    let status = corium::transact(&fleet.ingresses[0].endpoint(), "alices", "no-token", &[])
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
}

/// Debian's curl, the client an operator reaches for first, sees the refusal
/// of an unauthenticated call whose body is still on its way. Answered at
/// once, the stream ends with `RST_STREAM(NO_ERROR)` after the answer (RFC
/// 9113 §8.1), and curl 7.88 then drops the answer (no `grpc-status` at all,
/// every time, with the ingress before this test). The ingress now lets a
/// refused call's body finish first (bounded). Here curl streams the body
/// from a pipe written 30 ms after it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_sees_the_refusal_of_an_unauthenticated_call_whose_body_comes_late() {
    use tokio::io::AsyncWriteExt as _;
    const CALLS: usize = 5;
    let (_fleet, address) = start_strict(Fleet::builder(Backend::Filesystem).lease_ttl(TTL)).await;
    let url = format!("{address}/corium.v1.Transactor/Status");
    // One gRPC frame: StatusRequest { db: "bench" }.
    let message = b"\x0a\x05bench";
    let mut frame = vec![0u8];
    frame.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    frame.extend_from_slice(message);
    let mut statuses = Vec::new();
    for _ in 0..CALLS {
        let mut curl = tokio::process::Command::new("curl")
            .args([
                "-s",
                "--http2-prior-knowledge",
                "--max-time",
                "5",
                "-o",
                "/dev/null",
                "-D",
                "-",
            ])
            .args(["-X", "POST", "-T", "-"])
            .args(["-H", "content-type: application/grpc", "-H", "te: trailers"])
            .arg(&url)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("curl runs (Debian curl; make tools installs it)");
        let mut stdin = curl.stdin.take().unwrap();
        // Well inside the ingress's 250 ms wait for a refused call's body,
        // so a loaded machine's scheduling delays cannot push it past.
        tokio::time::sleep(Duration::from_millis(30)).await;
        // The ingress may have answered already (then the pipe is closed).
        let _ = stdin.write_all(&frame).await;
        drop(stdin);
        let output = tokio::time::timeout(Duration::from_secs(10), curl.wait_with_output())
            .await
            .expect("curl ends within its own --max-time")
            .unwrap();
        let headers = String::from_utf8_lossy(&output.stdout).to_ascii_lowercase();
        statuses.push(
            headers
                .lines()
                .filter_map(|line| line.strip_prefix("grpc-status:"))
                .map(|value| value.trim().to_owned())
                .next_back()
                .unwrap_or_else(|| "none".to_owned()),
        );
    }
    assert!(
        statuses.iter().all(|status| status == "16"),
        "every unauthenticated curl call is refused UNAUTHENTICATED and sees it; grpc-status seen: {statuses:?}"
    );
}
