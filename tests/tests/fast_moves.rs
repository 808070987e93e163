//! Fast ownership moves (issue 17, part 2): on `PostgreSQL`, where the log is
//! one root per committed batch, a database's new owner reads its whole log
//! in one query while it activates and serves Corium's two recovery passes
//! from memory. The moved database holds exactly what it held, whether the
//! read-ahead is on or off; with it on, the new owner's recovery read its
//! records from the read-ahead (its `/metrics` say how many), with it off,
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

async fn read_ahead_counts(admin: u16) -> (f64, f64, f64) {
    let (_, text) = http_get(admin, "/metrics").await.expect("metrics");
    let get = |name: &str| metric(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    (
        get("corium_fleet_activation_log_reads_total"),
        get("corium_fleet_activation_log_records_read_total"),
        get("corium_fleet_activation_log_records_served_total"),
    )
}

/// Writes, hands the database to another candidate, and checks the log the
/// new owner serves. Returns the target's read-ahead counts after the move.
async fn move_once(flags: &[&str]) -> (f64, f64, f64) {
    let mut fleet = Fleet::builder(postgres())
        .lease_ttl(Duration::from_millis(1500))
        .node_flags(flags)
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    assert!(corium::create(&address, "moving").await.unwrap());
    for n in 0..WRITES {
        corium::transact(&address, "moving", &format!("w-{n}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {n}: {status:?}"));
    }
    let before = corium::log(&address, "moving").await.unwrap();
    let view = corium::placement(&address, "moving").await;
    let owner = fleet.index(&view.owner_id);
    let target = fleet
        .candidates("moving")
        .into_iter()
        .find(|candidate| *candidate != owner)
        .expect("another candidate");
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
    (
        counts.0 - counts_before.0,
        counts.1 - counts_before.1,
        counts.2 - counts_before.2,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_database_is_recovered_from_one_log_read_with_the_same_contents() {
    let (reads, records, served) = move_once(&[]).await;
    assert!(reads >= 1.0, "the target read the log ahead ({reads} reads)");
    // Each write is one batch record (sequential writes), plus the schema's.
    assert!(records >= f64::from(WRITES), "{records} records read ahead");
    assert!(
        served >= records,
        "recovery read its records from the read-ahead ({served} served of {records})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_read_ahead_off_the_moved_database_reads_record_by_record() {
    let counts = move_once(&["--activation-read-ahead-mib", "0"]).await;
    assert_eq!(counts, (0.0, 0.0, 0.0), "nothing read ahead");
}
