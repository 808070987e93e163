//! Storage set up by the fleet at start (issue 17, part 1): on `PostgreSQL`,
//! the index that lets a root listing (`name LIKE 'prefix%'`) read only the
//! rows it lists is created when the first process opens the store, and a
//! listing can use it; the pool size is a flag that refuses nonsense.

use std::process::Command;
use std::time::Duration;

use corium_fleet_tests::backend::psql;
use corium_fleet_tests::{Backend, Fleet, bin_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_index_is_created_at_start_and_serves_prefix_listings() {
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    let backend = Backend::postgres(&base);
    let Backend::Postgres { url } = &backend else {
        unreachable!()
    };
    let url = url.clone();
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(Duration::from_millis(1500))
        .node_flags(&["--storage-pool-size", "8"])
        .start()
        .await;
    fleet.start_ingresses(1, &["--storage-pool-size", "4"]).await;
    // Three nodes and an ingress opened the store at once: one index, valid.
    let indexes = psql(
        &url,
        "SELECT indexname FROM pg_indexes WHERE tablename = 'corium_roots' ORDER BY indexname",
    );
    assert!(
        indexes
            .lines()
            .any(|name| name == corium_fleet_store::postgres::LISTING_INDEX),
        "{indexes}"
    );
    let valid = psql(
        &url,
        "SELECT indisvalid FROM pg_index JOIN pg_class ON pg_class.oid = indexrelid \
         WHERE relname = 'corium_roots_name_prefix'",
    );
    assert_eq!(valid, "t");
    // A prefix listing can be served by an index, whatever the collation.
    let plan = psql(
        &url,
        "SET enable_seqscan = off; EXPLAIN SELECT name FROM corium_roots WHERE name LIKE 'meta:abc%'",
    );
    assert!(plan.contains("Index"), "{plan}");
    // Each node's pool is at most its flag's size.
    let connections: usize = psql(
        &url,
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .parse()
    .unwrap();
    assert!(connections <= 3 * 8 + 4, "{connections} connections");
    drop(fleet);
}

#[test]
fn a_pool_of_no_connections_is_refused() {
    for (binary, args) in [
        (
            "corium-fleet-transactor",
            &["--storage-pool-size", "0", "--node-id", "n1"][..],
        ),
        ("corium-fleet-ingress", &["--storage-pool-size", "0"][..]),
    ] {
        let output = Command::new(bin_dir().join(binary))
            .args(args)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{binary}: {stderr}");
        assert!(stderr.contains("--storage-pool-size"), "{binary}: {stderr}");
    }
}
