//! Who is a fleet operator (issue 35, finding 5): stock Corium's public
//! development token is a data admin everywhere, as stock, but a fleet
//! operator (handoff, whole-store GC, every node's status) only where a
//! development fleet says so (`--dev-token-operator`, which `corium-fleet
//! dev` passes); a deployment's own `--serve-token` is its operator.

use corium_fleet_proto::fleet::NodeStatusRequest;
use corium_fleet_tests::corium::{self, expect_code};
use corium_fleet_tests::{Backend, Fleet};
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::pb;
use tonic::Code;

use super::{TOKEN, TTL, assert_operator, clients, start_strict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_development_token_is_a_data_admin_but_no_operator_outside_a_development_fleet() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(2)
        .bare_auth()
        .start_with_database("data")
        .await;
    let mut dev = clients(&address, Some(DEFAULT_DEV_TOKEN)).await;
    // Data as stock Corium: it writes, and (a data admin) learns where the
    // data lives, which a backup needs.
    dev.transactor
        .transact(corium::transact_request("data", "by-the-dev-token"))
        .await
        .unwrap();
    dev.catalog
        .get_storage_info(pb::GetStorageInfoRequest {
            db: "data".to_owned(),
        })
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    // The operator surface is not its.
    let status = expect_code(
        dev.admin.node_status(NodeStatusRequest {}).await,
        Code::PermissionDenied,
        "NodeStatus with the development token",
    );
    assert!(status.message().contains("fleet-operator"), "{status:?}");
    // An anonymous caller writes (stock defaults) but is told nothing of
    // the storage.
    let mut anonymous = clients(&address, None).await;
    let status = expect_code(
        anonymous
            .catalog
            .get_storage_info(pb::GetStorageInfoRequest {
                db: "data".to_owned(),
            })
            .await,
        Code::PermissionDenied,
        "GetStorageInfo by an anonymous caller",
    );
    assert!(!status.message().contains('/'), "no path: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_own_token_is_its_operator() {
    let (fleet, address) = start_strict(
        Fleet::builder(Backend::Filesystem)
            .lease_ttl(TTL)
            .nodes(2)
            .bare_auth(),
    )
    .await;
    let mut operator = clients(&address, Some(TOKEN)).await;
    assert_operator(&mut operator, &fleet, "the deployment's token").await;
    expect_code(
        clients(&address, Some(DEFAULT_DEV_TOKEN))
            .await
            .admin
            .node_status(NodeStatusRequest {})
            .await,
        Code::Unauthenticated,
        "the development token in a deployment",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_speak_to_each_other_by_certificate_not_by_token() {
    // Each node accepts a different token: a node that presented its own
    // token to another would be refused UNAUTHENTICATED (a presented token
    // is always checked). Over mTLS with certificates that name them, nodes
    // present none, and each knows the other as `fleet-mtls/<node-id>`.
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .nodes(2)
        .mtls()
        .bare_auth()
        .start()
        .await;
    for (n, node) in fleet.nodes.iter_mut().enumerate() {
        node.set_env("CORIUM_SERVE_TOKEN", Some(&format!("{TOKEN}-{n}")));
        node.terminate().await;
        node.restart().await;
    }
    let ingress_token = format!("{TOKEN}-0");
    fleet.start_ingresses(1, &["--serve-token", &ingress_token]).await;
    let address = fleet.ingresses[0].endpoint();
    let mut operator = clients(&address, Some(&ingress_token)).await;
    // The answering node asks every other member for its status.
    let answer = operator
        .admin
        .fleet_status(corium_fleet_proto::fleet::FleetStatusRequest {})
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()))
        .into_inner();
    assert_eq!(answer.members.len(), 2, "{answer:?}");
    for member in &answer.members {
        assert!(
            member.status.is_some() && member.error.is_empty(),
            "{}: {}\n{}",
            member.node_id,
            member.error,
            fleet.logs()
        );
    }
    // A handoff: the owner asks its peer to activate, node to node.
    let create = corium::with_bearer(
        tonic::Request::new(pb::CreateDatabaseRequest {
            db: "moved".to_owned(),
            schema: corium::schema(),
            storage_key: String::new(),
        }),
        &ingress_token,
    );
    operator.catalog.create_database(create).await.unwrap();
    let target = fleet.nodes[fleet.candidates("moved")[1]].id.clone();
    operator
        .admin
        .handoff(corium_fleet_proto::fleet::HandoffRequest {
            database: "moved".to_owned(),
            target_node_id: target,
        })
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
}
