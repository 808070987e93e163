//! Fast ownership moves (issue 17, parts 2 and 3): on `PostgreSQL` and S3,
//! where the log is one root per committed batch, a handoff's target reads
//! the log in one go, and the index blobs the owner just published, while
//! the old owner still serves (`Prepare`), and its activation serves
//! Corium's two recovery passes from memory. The moved database holds
//! exactly what it held, whether the read-ahead is on or off; with it on,
//! the target prepared the log, started its activation from it and read its
//! records and index blobs from it (its `/metrics` say so), with it off,
//! none.

use std::time::Duration;

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::{Backend, Fleet, corium, http_get, metric};

/// Items written before the move: enough batches that the log has many
/// records, few enough for a debug build.
const WRITES: u32 = 120;

fn postgres() -> Backend {
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    Backend::postgres(&base)
}

/// A fleet on `backend` with `flags` on its nodes, a lease TTL of 1.5 s
/// and one ingress; `db` created and written [`WRITES`] times through it.
/// Returns the fleet and the ingress's address.
async fn written_fleet(backend: Backend, flags: &[&str], db: &str) -> (Fleet, String) {
    let (fleet, address) = Fleet::builder(backend)
        .lease_ttl(Duration::from_millis(1500))
        .node_flags(flags)
        .start_with_database(db)
        .await;
    for n in 0..WRITES {
        corium::transact(&address, db, &format!("w-{n}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {n}: {status:?}"));
    }
    (fleet, address)
}

/// After a crash: `db`'s log begins with the log `before` it, and holds
/// `items` writes in all, each once.
async fn assert_log_kept(address: &str, db: &str, before: &[(u64, Vec<String>)], items: usize) {
    let after = corium::log(address, db).await.unwrap();
    assert_eq!(
        after[..before.len()],
        before[..],
        "the log before the crash is intact"
    );
    let written: Vec<&String> = after.iter().flat_map(|(_, names)| names).collect();
    assert_eq!(written.len(), items, "every write once, then the new ones");
}

/// A node's read-ahead counters.
#[derive(Debug, Default, PartialEq)]
struct Counts {
    prepared: f64,
    prepared_used: f64,
    served: f64,
    index_served: f64,
    listings_served: f64,
    listings_since: f64,
}

async fn read_ahead_counts(admin: u16) -> Counts {
    let (_, text) = http_get(admin, "/metrics").await.expect("metrics");
    let get = |name: &str| metric(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    Counts {
        prepared: get("corium_fleet_activation_logs_prepared_total"),
        prepared_used: get("corium_fleet_activation_logs_prepared_used_total"),
        served: get("corium_fleet_activation_log_records_served_total"),
        index_served: get("corium_fleet_activation_index_blobs_served_total"),
        listings_served: get("corium_fleet_log_listings_served_total"),
        listings_since: get("corium_fleet_log_listings_since_total"),
    }
}

/// Writes, hands the database to another candidate, and checks the log the
/// new owner serves. Returns the target's read-ahead counts after the move.
async fn move_once(backend: Backend, flags: &[&str]) -> Counts {
    let (fleet, address) = written_fleet(backend, flags, "moving").await;
    let before = corium::log(&address, "moving").await.unwrap();
    let view = corium::placement(&address, "moving").await;
    let owner = fleet.index(&view.owner_id);
    let target = fleet.other_candidate("moving", owner).expect("another candidate");
    let counts_before = read_ahead_counts(fleet.nodes[target].admin).await;
    let moved = corium::admin(&fleet.nodes[owner].endpoint())
        .await
        .handoff(HandoffRequest {
            database: "moving".into(),
            target_node_id: fleet.nodes[target].id.clone(),
        })
        .await
        .expect("handoff")
        .into_inner();
    assert_eq!(moved.to_node_id, fleet.nodes[target].id);
    // The new owner serves the same log, and takes writes.
    let after = corium::log(&address, "moving").await.unwrap();
    assert_eq!(after, before, "the log after the move is the log before it");
    corium::transact(&address, "moving", "after-the-move", &[])
        .await
        .expect("write after the move");
    let log = corium::log(&address, "moving").await.unwrap();
    let items: Vec<&String> = log.iter().flat_map(|(_, names)| names).collect();
    assert_eq!(
        items.len(),
        WRITES as usize + 1,
        "every write once, then the new one"
    );
    let counts = read_ahead_counts(fleet.nodes[target].admin).await;
    Counts {
        prepared: counts.prepared - counts_before.prepared,
        prepared_used: counts.prepared_used - counts_before.prepared_used,
        served: counts.served - counts_before.served,
        index_served: counts.index_served - counts_before.index_served,
        listings_served: counts.listings_served - counts_before.listings_served,
        listings_since: counts.listings_since - counts_before.listings_since,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_database_is_recovered_from_a_log_read_ahead_with_the_same_contents() {
    moved_from_read_ahead(postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_database_is_recovered_from_a_log_read_ahead_with_the_same_contents_on_s3() {
    moved_from_read_ahead(Backend::s3_from_env()).await;
}

async fn moved_from_read_ahead(backend: Backend) {
    // A recovery from storage, read ahead: the target is no hot standby (a
    // hot standby opens from the value it follows and reads no index;
    // `hot_standby.rs`).
    let counts = move_once(backend, &["--hot-standbys", "0"]).await;
    assert!(
        counts.prepared >= 1.0,
        "the target read the log ahead: {counts:?}"
    );
    assert!(
        counts.prepared_used >= 1.0,
        "its activation started from it: {counts:?}"
    );
    // Each write is one batch record (sequential writes); both recovery
    // passes read every record.
    assert!(
        counts.served >= 2.0 * f64::from(WRITES),
        "recovery read its records from the read-ahead: {counts:?}"
    );
    // The owner published its index before the move: both passes read at
    // least a manifest and a chunk.
    assert!(
        counts.index_served >= 2.0,
        "recovery read the index blobs from the read-ahead: {counts:?}"
    );
    // Corium lists the log four times in an open (two passes, two listings
    // each): one from storage, three served with it.
    assert!(
        counts.listings_served >= 3.0,
        "recovery listed the log from storage once: {counts:?}"
    );
    // And that listing was the prepared one and the names after it.
    assert!(
        counts.listings_since >= 1.0,
        "the activation listed after the prepared names: {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_read_ahead_off_the_moved_database_reads_record_by_record() {
    let counts = move_once(postgres(), &["--activation-read-ahead-mib", "0"]).await;
    assert_eq!(counts, Counts::default(), "nothing read ahead");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_crash_the_successor_recovers_from_one_log_read_with_the_same_contents() {
    let (mut fleet, address) = written_fleet(postgres(), &[], "crashing").await;
    let before = corium::log(&address, "crashing").await.unwrap();
    let owner = fleet.index(&corium::placement(&address, "crashing").await.owner_id);
    let reads_before: Vec<f64> = {
        let mut reads = Vec::new();
        for node in &fleet.nodes {
            let (_, text) = http_get(node.admin, "/metrics").await.expect("metrics");
            reads.push(metric(&text, "corium_fleet_activation_log_reads_total").unwrap_or(0.0));
        }
        reads
    };
    fleet.nodes[owner].kill();
    // The ingress keeps the write until a successor took over.
    corium::transact(&address, "crashing", "after-the-crash", &[])
        .await
        .expect("write after the crash");
    let successor = fleet.index(&corium::placement(&address, "crashing").await.owner_id);
    assert_ne!(successor, owner);
    let (_, text) = http_get(fleet.nodes[successor].admin, "/metrics")
        .await
        .expect("metrics");
    let reads = metric(&text, "corium_fleet_activation_log_reads_total").unwrap_or(0.0);
    assert!(
        reads > reads_before[successor],
        "the successor read the log in one go ({reads_before:?} → {reads})"
    );
    assert_log_kept(&address, "crashing", &before, WRITES as usize + 1).await;
}

/// A node's metric `name` (0 when absent).
async fn node_metric(admin: u16, name: &str) -> f64 {
    let (_, text) = http_get(admin, "/metrics").await.expect("metrics");
    metric(&text, name).unwrap_or(0.0)
}

/// Warm standbys (issue 17, part 4): the first standby of an active
/// database keeps its records warm, and after the owner's SIGKILL its
/// takeover starts from them and reads only the tail; the log is intact.
async fn a_crash_is_taken_over_from_a_warm_standby(backend: Backend) {
    let (mut fleet, address) = written_fleet(backend, &["--warm-standby-interval-ms", "200"], "warm").await;
    let owner = fleet.index(&corium::placement(&address, "warm").await.owner_id);
    let standby = fleet.other_candidate("warm", owner).expect("a standby");
    let admin = fleet.nodes[standby].admin;
    // Bounded (30 s): the owner lists the database in its registry record
    // at its next renewal, then the standby reads every record within a
    // refresh or two.
    let mut warm_records = 0.0;
    for _ in 0..300 {
        warm_records = node_metric(admin, "corium_fleet_warm_standby_records_read_total").await;
        if warm_records >= f64::from(WRITES) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        warm_records >= f64::from(WRITES),
        "the first standby kept the log warm: {warm_records} records read"
    );
    assert!(node_metric(admin, "corium_fleet_warm_standby_databases").await >= 1.0);
    assert!(node_metric(admin, "corium_fleet_warm_standby_bytes").await > 0.0);
    // A tail the standby may not have read yet.
    for n in 0..3 {
        corium::transact(&address, "warm", &format!("tail-{n}"), &[])
            .await
            .expect("tail write");
    }
    let before = corium::log(&address, "warm").await.unwrap();
    let served_before = node_metric(admin, "corium_fleet_activation_log_records_served_total").await;
    fleet.nodes[owner].kill();
    corium::transact(&address, "warm", "after-the-crash", &[])
        .await
        .expect("write after the crash");
    let successor = fleet.index(&corium::placement(&address, "warm").await.owner_id);
    assert_eq!(successor, standby, "the first standby took over");
    assert!(
        node_metric(admin, "corium_fleet_warm_standby_takeovers_total").await >= 1.0,
        "its activation started from the warm records"
    );
    let served = node_metric(admin, "corium_fleet_activation_log_records_served_total").await - served_before;
    assert!(
        served >= 2.0 * f64::from(WRITES),
        "recovery read the records from memory: {served}"
    );
    assert_log_kept(&address, "warm", &before, WRITES as usize + 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_taken_over_from_a_warm_standby_on_postgres() {
    a_crash_is_taken_over_from_a_warm_standby(postgres()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_taken_over_from_a_warm_standby_on_s3() {
    a_crash_is_taken_over_from_a_warm_standby(Backend::s3_from_env()).await;
}
