//! An ingress cut off from its storage stays ready and keeps routing to
//! the owners it has seen (the owner fences every call by its lease
//! version), so a storage blip does not take the whole ingress tier out of
//! its Service; the trouble shows in a gauge, and goes when storage comes
//! back.

use std::time::Duration;

use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet, http_get, metric};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_without_storage_stays_ready_and_routes_to_the_owners_it_has_seen() {
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    ingress_without_storage(Backend::postgres(&base)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_without_storage_stays_ready_and_routes_to_the_owners_it_has_seen_on_s3() {
    ingress_without_storage(Backend::s3_from_env()).await;
}

/// One node, one ingress reaching storage through a path the test cuts
/// and heals.
async fn ingress_without_storage(backend: Backend) {
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(Duration::from_millis(1500))
        .nodes(1)
        .start()
        .await;
    // Owner-cache entries live 300 ms: every call after the cut needs storage
    // or the last owner seen.
    let partition = fleet
        .start_ingress_behind_partition(&["--owner-cache-ttl-ms", "300"])
        .await;
    let ingress = &fleet.ingresses[0];
    let address = ingress.endpoint();
    assert!(corium::create(&address, "steady").await.unwrap());
    corium::transact(&address, "steady", "before", &[]).await.unwrap();
    let gauge = async || {
        let (_, text) = http_get(ingress.admin, "/metrics").await.unwrap();
        metric(&text, "corium_fleet_ingress_storage_up")
    };
    assert_eq!(gauge().await, Some(1.0));

    partition.cut();
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "the storage gauge drops",
        async || match gauge().await {
            Some(up) if up < 1.0 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let (code, body) = http_get(ingress.admin, "/readyz").await.unwrap();
    assert_eq!(code, 200, "still ready without storage: {body}");
    // Calls for a database whose owner it has seen go on.
    for i in 0..5 {
        corium::transact(&address, "steady", &format!("during-{i}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {i} during the storage cut: {status:?}"));
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let (_, text) = http_get(ingress.admin, "/metrics").await.unwrap();
    assert!(
        metric(&text, "corium_fleet_ingress_stale_owner_served_total").is_some_and(|served| served >= 1.0),
        "{text}"
    );
    assert!(
        ingress.log().contains("storage unreachable"),
        "a log line says so"
    );

    partition.heal();
    corium_fleet_tests::eventually(
        Duration::from_secs(20),
        "the storage gauge recovers",
        async || match gauge().await {
            Some(up) if up >= 1.0 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    let log = corium::log(&address, "steady").await.unwrap();
    let names: Vec<&String> = log.iter().flat_map(|(_, names)| names).collect();
    for i in 0..5 {
        let name = format!("during-{i}");
        assert_eq!(names.iter().filter(|n| ***n == name).count(), 1, "{names:?}");
    }
}
