//! Who may do what at the owner: the operator surface by default, stock
//! Corium's policy authorizer (`--authz-db`), and which certificates speak
//! for a node.

use std::time::Duration;

use corium_fleet_proto::fleet::fleet_admin_client::FleetAdminClient;
use corium_fleet_proto::fleet::{ActivateRequest, HandoffRequest, NodeStatusRequest};
use corium_fleet_tests::corium::{self, channel, expect_code, frame};
use corium_fleet_tests::{Backend, Fleet, eventually};
use corium_fleet_wire::metadata;
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::authz::Principal;
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use prost::Message as _;
use tonic::Code;

use super::{TTL, assert_operator, clients, hand_off_then_write, log_as};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario per hop kind: each step starts from the state the previous one left.
async fn by_default_data_is_open_as_in_stock_corium_but_the_operator_surface_is_not() {
    for mtls in [false, true] {
        let mut builder = Fleet::builder(Backend::Filesystem).lease_ttl(TTL);
        if mtls {
            builder = builder.mtls();
        }
        let (fleet, address) = builder.start_with_ingress().await;
        let db = "open";
        // Stock defaults: an anonymous client creates and writes.
        assert!(corium::create(&address, db).await.unwrap(), "mtls={mtls}");
        corium::transact(&address, db, "anonymous", &[]).await.unwrap();

        // The operator surface: anonymous and unknown-token callers are
        // refused; the development token (role admin) is an operator.
        for token in [None, Some("wrong")] {
            let mut stranger = clients(&address, token).await;
            let answers = [
                (
                    "NodeStatus",
                    stranger.admin.node_status(NodeStatusRequest {}).await.map(drop),
                ),
                (
                    "Handoff",
                    stranger
                        .admin
                        .handoff(HandoffRequest {
                            database: db.to_owned(),
                            target_node_id: fleet.nodes[fleet.candidates(db)[1]].id.clone(),
                        })
                        .await
                        .map(drop),
                ),
                (
                    "GcDeletedDatabases",
                    stranger
                        .catalog
                        .gc_deleted_databases(pb::GcDeletedDatabasesRequest {
                            retention_millis: Some(0),
                        })
                        .await
                        .map(drop),
                ),
            ];
            for (call, answer) in answers {
                expect_code(
                    answer,
                    Code::PermissionDenied,
                    format!("mtls={mtls} {token:?} {call}"),
                );
            }
        }
        let mut operator = clients(&address, Some(DEFAULT_DEV_TOKEN)).await;
        assert_operator(&mut operator, &fleet, format!("mtls={mtls}")).await;
        // GC has a retention floor: a sweep of young unreachable blobs (which
        // a live database's index may be about to reference) is refused, the
        // default retention runs, and the database keeps working.
        let status = operator
            .catalog
            .gc_deleted_databases(pb::GcDeletedDatabasesRequest {
                retention_millis: Some(0),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "mtls={mtls}: {status:?}");
        operator
            .catalog
            .gc_deleted_databases(pb::GcDeletedDatabasesRequest {
                retention_millis: None,
            })
            .await
            .unwrap_or_else(|status| panic!("mtls={mtls}: {status:?}\n{}", fleet.logs()));
        corium::transact(&address, db, "after-gc", &[]).await.unwrap();

        // A principal forged in the trailers (claiming the operator) is
        // never read: the anonymous caller stays anonymous.
        let forged =
            corium_fleet_common::auth::encode(&Principal::new("static-token", "operator").with_role("admin"));
        let status = corium::raw_call_with_trailers(
            &address,
            "/corium.fleet.v1.FleetAdmin/NodeStatus",
            &[],
            frame(&NodeStatusRequest {}.encode_to_vec()),
            &[(metadata::PRINCIPAL, forged.as_str())],
        )
        .await;
        assert_eq!(
            status.code(),
            Code::PermissionDenied,
            "mtls={mtls} via the ingress: {status:?}"
        );
        // ... and in the headers it is refused outright by the ingress.
        let status = corium::raw_call(
            &address,
            "/corium.fleet.v1.FleetAdmin/NodeStatus",
            &[(metadata::PRINCIPAL, forged.as_str())],
            frame(&NodeStatusRequest {}.encode_to_vec()),
        )
        .await;
        assert_eq!(status.code(), Code::InvalidArgument, "mtls={mtls}: {status:?}");

        if !mtls {
            // Directly at a node on a cleartext fleet: anonymous callers
            // may not ask it to activate, forged principals in headers are
            // refused, and in trailers ignored.
            let node = &fleet.nodes[fleet.candidates(db)[1]];
            let status = FleetAdminClient::new(channel(&node.endpoint()).await)
                .activate(ActivateRequest {
                    database: db.to_owned(),
                })
                .await
                .unwrap_err();
            assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
            let status = corium::raw_call(
                &node.endpoint(),
                "/corium.fleet.v1.FleetAdmin/NodeStatus",
                &[(metadata::PRINCIPAL, forged.as_str())],
                frame(&NodeStatusRequest {}.encode_to_vec()),
            )
            .await;
            assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
            let status = corium::raw_call_with_trailers(
                &node.endpoint(),
                "/corium.fleet.v1.FleetAdmin/NodeStatus",
                &[],
                frame(&NodeStatusRequest {}.encode_to_vec()),
                &[(metadata::PRINCIPAL, forged.as_str())],
            )
            .await;
            assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
            // The negative control: the operator's token is accepted there.
            let status = corium::admin(&node.endpoint())
                .await
                .node_status(NodeStatusRequest {})
                .await;
            assert!(status.is_ok(), "{status:?}");
        }

        // A handoff by the operator still works: the owner asks the target
        // to activate over the node-to-node path (certificate or token).
        hand_off_then_write(
            &fleet,
            &address,
            &address,
            db,
            "after-handoff",
            format!("mtls={mtls}"),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_certificate_speaks_for_a_node_only_if_it_names_a_member() {
    let fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .start()
        .await;
    // A certificate from the fleet CA for a name that is no member's.
    fleet.issue_certs(&["intruder"]);
    let port = fleet.nodes[0].grpc;
    let as_holder = async |name: &str| {
        let channel = fleet.tls_channel(port, Some(name)).await.unwrap();
        FleetAdminClient::new(channel)
            .node_status(NodeStatusRequest {})
            .await
    };
    // The intruder connects (its certificate chains to the fleet CA) but is
    // no one in particular: anonymous, not an operator.
    let status = as_holder("intruder").await.unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    // The negative control: node-2's own certificate speaks for node-2.
    let answer = as_holder("node-2")
        .await
        .unwrap_or_else(|status| panic!("{status:?}"));
    assert_eq!(answer.into_inner().node_id, fleet.nodes[0].id);
}

/// A stock corium-peer connection to `db` through `address`, as the
/// operator (the development token).
async fn connect_as_operator(fleet: &Fleet, address: &str, db: &str) -> corium_peer::Connection {
    let mut config = corium_peer::ConnectConfig::new(address, db);
    config.token = Some(DEFAULT_DEV_TOKEN.to_owned());
    config.failover_timeout = Duration::from_secs(30);
    tokio::time::timeout(Duration::from_secs(30), corium_peer::Connection::connect(config))
        .await
        .unwrap_or_else(|_| panic!("connect to {db} in time"))
        .unwrap_or_else(|error| panic!("connect to {db}: {error}\n{}", fleet.logs()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario: policy made, enforced (writes and reads), then granted.
async fn a_write_the_policy_denies_is_allowed_once_the_relation_is_granted() {
    use corium_authz::{bootstrap, schema};
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .mtls()
        .start_with_ingress()
        .await;
    let policy_db = "policy";
    let db = "music";
    // Before enforcement, the operator creates the policy database exactly
    // as `corium authz init` does (Corium's reserved schema, its default
    // permissions, the operator owning the catalog and every database),
    // through the fleet address with stock corium-peer.
    let mut admin = corium_peer::Admin::connect(&address, Some(DEFAULT_DEV_TOKEN.to_owned()), None)
        .await
        .unwrap();
    assert!(
        admin
            .create_database(policy_db, &schema::schema_forms())
            .await
            .unwrap()
    );
    assert!(admin.create_database(db, &corium::schema_forms()).await.unwrap());
    let policy = connect_as_operator(&fleet, &address, policy_db).await;
    let mut forms = schema::default_permission_forms();
    forms.push(bootstrap::principal_form("operator", Some("static-token"), &[]));
    forms.push(bootstrap::tuple_form("operator", "owner", "catalog:*"));
    forms.push(bootstrap::tuple_form("operator", "owner", "database:*"));
    policy.transact(forms).await.unwrap();
    drop(policy);

    // Every node restarted with the policy (stock Corium's CORIUM_AUTHZ_DB).
    for node in &mut fleet.nodes {
        node.set_env("CORIUM_AUTHZ_DB", Some(policy_db));
        node.terminate().await;
        node.restart().await;
    }
    // The operator owns everything: its writes go through once the policy
    // has loaded (until then every decision is a denial: fail closed).
    let operator = async |name: &str| {
        let request = corium::with_bearer(
            tonic::Request::new(corium::transact_request(db, name)),
            DEFAULT_DEV_TOKEN,
        );
        TransactorClient::new(channel(&address).await)
            .transact(request)
            .await
    };
    eventually(
        Duration::from_secs(30),
        "the operator writes under the policy",
        async || operator("by-the-operator").await,
    )
    .await;
    // An anonymous caller holds no relation on the database: denied, and
    // nothing is written.
    let denied = corium::transact(&address, db, "anonymous-before", &[])
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied, "{denied:?}");
    // Nor may it read: its subscription (served by the owner) and its
    // thin-client read (served by a read replica) are denied too.
    let subscription = corium::log(&address, db).await.unwrap_err();
    assert_eq!(subscription.code(), Code::PermissionDenied, "{subscription:?}");
    let read = async || {
        pb::peer_server_client::PeerServerClient::new(channel(&address).await)
            .tx_range(pb::TxRangeRequest {
                db: db.to_owned(),
                start: 0,
                end: 0,
            })
            .await
            .map(|_| ())
    };
    let replica_read = read().await.unwrap_err();
    assert_eq!(replica_read.code(), Code::PermissionDenied, "{replica_read:?}");

    // Grant `user:anonymous writer database:music`, as `corium authz grant`.
    let policy = connect_as_operator(&fleet, &address, policy_db).await;
    policy
        .transact(vec![bootstrap::tuple_form(
            "anonymous",
            "writer",
            &format!("database:{db}"),
        )])
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the anonymous write is allowed once granted",
        async || corium::transact(&address, db, "anonymous-after", &[]).await,
    )
    .await;
    // A writer reads as well.
    eventually(
        Duration::from_secs(30),
        "the anonymous replica read is allowed once granted",
        read,
    )
    .await;
    // Still no more than the relation gives: deleting the database is an
    // owner's action.
    let delete = CatalogClient::new(channel(&address).await)
        .delete_database(pb::DeleteDatabaseRequest { db: db.to_owned() })
        .await
        .unwrap_err();
    assert_eq!(delete.code(), Code::PermissionDenied, "{delete:?}");
    // Exactly the operator's and the granted write are in the log.
    let log = log_as(&address, db, DEFAULT_DEV_TOKEN).await;
    assert_eq!(
        corium::names(&log),
        vec!["by-the-operator", "anonymous-after"],
        "{log:?}"
    );
}
