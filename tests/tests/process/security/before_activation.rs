//! A caller the policy denies neither wakes a cold database nor takes a
//! place on its candidates (issue 35, finding 7): every call the node hands
//! to Corium's own services (`Status`, `SagaCommit`, `RequestIndex`,
//! `SetIndexPolicy`, the key operations, `AlterSchema`) is authorized at the
//! node's front door before the owner is found or activated. The policy is
//! made with stock Corium's `corium authz init` through the fleet address.

use std::process::Stdio;
use std::time::Duration;

use corium_fleet_tests::corium::{self, channel};
use corium_fleet_tests::{Backend, Fleet, eventually, http_get, metric, stock};
use corium_protocol::auth::DEFAULT_DEV_TOKEN;
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use corium_protocol::pb::transactor_client::TransactorClient;
use tonic::Code;

use super::TTL;

/// Activations every node made since it started.
async fn activations(fleet: &Fleet) -> f64 {
    let mut total = 0.0;
    for node in &fleet.nodes {
        let (_, text) = http_get(node.admin, "/metrics").await.expect("node metrics");
        total += metric(&text, "corium_fleet_activations_total").unwrap_or(0.0);
    }
    total
}

/// Whether a node holds a live lease on `db` now.
async fn is_held(address: &str, db: &str) -> bool {
    let view = corium::placement(address, db).await;
    view.lease_expires_unix_ms > corium_fleet_common::owner::now_unix_ms()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario: the policy made, enforced, then every call class denied.
async fn a_denied_caller_wakes_no_cold_database() {
    // Idle cells are released after 1.5 s: a database nobody uses goes cold.
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .lease_ttl(TTL)
        .node_flags(&["--idle-evict-after-ms", "1500"])
        .start_with_ingress()
        .await;
    let (policy_db, cold) = ("policy", "cold");
    // The policy, as an operator makes it for a stock transactor: `corium
    // authz init` (the reserved schema, the default permissions, the
    // development token's principal owning the catalog and every database).
    let output = tokio::time::timeout(
        Duration::from_mins(1),
        tokio::process::Command::new(stock::binary())
            .args(["authz", "init", "--db", policy_db, "--transactor", &address])
            .env("CORIUM_TOKEN", DEFAULT_DEV_TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("corium authz init ends within a minute")
    .expect("the stock corium CLI runs (make test installs it)");
    assert!(
        output.status.success(),
        "corium authz init: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        fleet.logs()
    );

    // Every node restarted with the policy (stock Corium's CORIUM_AUTHZ_DB).
    for node in &mut fleet.nodes {
        node.set_env("CORIUM_AUTHZ_DB", Some(policy_db));
        node.terminate().await;
        node.restart().await;
    }
    // The operator is allowed once the policy has loaded (fail closed
    // until then): a write to the policy database itself, which it owns.
    eventually(Duration::from_secs(30), "the policy has loaded", async || {
        let request = corium::with_bearer(
            tonic::Request::new(pb::ListDatabasesRequest {}),
            DEFAULT_DEV_TOKEN,
        );
        CatalogClient::new(channel(&address).await)
            .list_databases(request)
            .await
    })
    .await;
    // The operator creates a database and leaves it: it goes cold.
    let create = corium::with_bearer(
        tonic::Request::new(pb::CreateDatabaseRequest {
            db: cold.to_owned(),
            schema: corium::schema(),
            storage_key: String::new(),
        }),
        DEFAULT_DEV_TOKEN,
    );
    CatalogClient::new(channel(&address).await)
        .create_database(create)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    eventually(Duration::from_secs(30), "the database goes cold", async || {
        if is_held(&address, cold).await {
            Err("held")
        } else {
            Ok(())
        }
    })
    .await;
    let before = activations(&fleet).await;

    // An anonymous caller, with no relation to the database, on every call
    // the node hands to Corium (the nine forwarded to Corium's own services
    // among them): each denied.
    let mut transactor = TransactorClient::new(channel(&address).await);
    let mut catalog = CatalogClient::new(channel(&address).await);
    let db = cold.to_owned();
    let denials = [
        (
            "Status",
            transactor
                .status(pb::StatusRequest { db: db.clone() })
                .await
                .map(drop),
        ),
        (
            "SagaCommit",
            transactor
                .saga_commit(pb::SagaCommitRequest {
                    db: db.clone(),
                    saga: "00112233445566778899aabbccddeeff".to_owned(),
                    protocol_version: corium_protocol::PROTOCOL_VERSION,
                    ..pb::SagaCommitRequest::default()
                })
                .await
                .map(drop),
        ),
        (
            "SagaFinish",
            transactor
                .saga_finish(pb::SagaFinishRequest {
                    db: db.clone(),
                    saga: "00112233445566778899aabbccddeeff".to_owned(),
                    protocol_version: corium_protocol::PROTOCOL_VERSION,
                    ..pb::SagaFinishRequest::default()
                })
                .await
                .map(drop),
        ),
        (
            "RequestIndex",
            catalog
                .request_index(pb::RequestIndexRequest { db: db.clone() })
                .await
                .map(drop),
        ),
        (
            "SetIndexPolicy",
            catalog
                .set_index_policy(pb::SetIndexPolicyRequest {
                    db: db.clone(),
                    ..pb::SetIndexPolicyRequest::default()
                })
                .await
                .map(drop),
        ),
        (
            "KeyStatus",
            catalog
                .key_status(pb::KeyStatusRequest { db: db.clone() })
                .await
                .map(drop),
        ),
        (
            "RotateStorageKey",
            catalog
                .rotate_storage_key(pb::RotateStorageKeyRequest { db: db.clone() })
                .await
                .map(drop),
        ),
        (
            "RewrapKeys",
            catalog
                .rewrap_keys(pb::RewrapKeysRequest {
                    db: db.clone(),
                    kek: "env:CORIUM_FLEET_NO_SUCH_KEY".to_owned(),
                })
                .await
                .map(drop),
        ),
        (
            "AlterSchema",
            catalog
                .alter_schema(pb::AlterSchemaRequest {
                    db: db.clone(),
                    ..pb::AlterSchemaRequest::default()
                })
                .await
                .map(drop),
        ),
        (
            "GetStorageInfo",
            catalog
                .get_storage_info(pb::GetStorageInfoRequest { db: db.clone() })
                .await
                .map(drop),
        ),
        (
            "Sync",
            transactor
                .sync(pb::SyncRequest { db: db.clone(), t: 0 })
                .await
                .map(drop),
        ),
    ];
    for (call, result) in denials {
        let status = result.expect_err(call);
        assert_eq!(status.code(), Code::PermissionDenied, "{call}: {status:?}");
    }
    // Nothing woke up.
    assert!(!is_held(&address, cold).await, "{}", fleet.logs());
    assert!((activations(&fleet).await - before).abs() < f64::EPSILON);
}
