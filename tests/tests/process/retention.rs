//! Request-id retention over real nodes (`--request-id-retention-secs`):
//! records older than the window are retracted while the database is in
//! use, the next owner opens it without them (its memory estimate falls),
//! and a time-ordered id older than the window is refused — for a resend
//! and for a status query — instead of being committed again or fenced on
//! a guess.

use std::time::Duration;

use corium_fleet_tests::{Fleet, corium, eventually, http_get, metric};
use serde_json::Value;
use tonic::Code;

/// The window: short, so the test sees records expire.
const WINDOW_SECS: &str = "2";
/// Transactions written before the window passes.
const WRITTEN: usize = 200;

/// `db`'s memory estimate on its owner, from `corium-fleet status --json`.
async fn memory_bytes(address: &str, db: &str) -> Result<u64, String> {
    let run = corium_fleet_tests::cli::run(&["status", "--json"], address).await;
    let status: Value =
        serde_json::from_str(&run.stdout).map_err(|error| format!("{error}: {}", run.stderr))?;
    status["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|node| node["databases"].as_array().into_iter().flatten())
        .find(|view| view["database"] == db && view["state"] == "owned")
        .and_then(|view| view["memory_bytes"].as_u64())
        .ok_or_else(|| format!("{db} not owned yet: {status}"))
}

/// A version-7 request id made now.
fn time_ordered_id() -> String {
    let millis = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let random = uuid::Uuid::new_v4().into_bytes();
    let mut bits = [0u8; 10];
    bits.copy_from_slice(&random[..10]);
    uuid::Builder::from_unix_timestamp_millis(millis, &bits)
        .into_uuid()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_request_records_leave_and_old_ids_are_refused() {
    let (fleet, address) = Fleet::filesystem_with_ingress(
        2,
        &[
            "--request-id-retention-secs",
            WINDOW_SECS,
            // A reopen from the published indexes, which leave the
            // retracted records out: a promoted hot standby keeps what its
            // fold recorded until the database's next cold open. And the
            // estimate from datoms, so the two nodes' figures compare.
            "--hot-standbys",
            "0",
            "--memory-measure",
            "datoms",
        ],
    )
    .await;
    let db = (0..1_000)
        .map(|n| format!("kept-{n}"))
        .find(|db| fleet.candidates(db)[0] == 0)
        .unwrap();
    corium::create(&address, &db).await.unwrap();
    let own_id = time_ordered_id();
    corium::transact(&address, &db, "own", &[("corium-request-id", own_id.as_str())])
        .await
        .unwrap();
    for n in 0..WRITTEN {
        corium::transact(&address, &db, &format!("item-{n}"), &[])
            .await
            .unwrap();
    }

    // Past the window, with the database in use, node-1 retracts them all.
    eventually(
        Duration::from_secs(30),
        fleet.with_logs("the expired records retracted"),
        async || {
            corium::transact(&address, &db, "keep-busy", &[])
                .await
                .map_err(|status| format!("{status:?}"))?;
            let metrics = http_get(fleet.nodes[0].admin, "/metrics").await.unwrap().1;
            let expired = metric(&metrics, "corium_fleet_request_ids_expired_total").unwrap_or(0.0);
            #[allow(clippy::cast_precision_loss)]
            let all = (WRITTEN + 1) as f64;
            if expired >= all {
                Ok(())
            } else {
                Err(format!("{expired} expired"))
            }
        },
    )
    .await;
    let before = memory_bytes(&address, &db).await.unwrap();

    // The next owner opens it from the published indexes, without them.
    let handoff = corium_fleet_tests::cli::run(&["handoff", &db, "--to", "node-2"], &address).await;
    assert!(handoff.success, "{}{}", handoff.stdout, handoff.stderr);
    let after = eventually(Duration::from_secs(30), "node-2 owns it", async || {
        if corium::placement(&address, &db).await.owner_id == "node-2" {
            memory_bytes(&address, &db).await
        } else {
            Err("not moved yet".to_owned())
        }
    })
    .await;
    eprintln!("memory estimate: {before} bytes before the reopen, {after} after");
    // Each transaction recorded three datoms (its item, its instant, its
    // key) and its key's retraction: two stay.
    assert!(
        after * 10 <= before * 6,
        "{after} bytes after the reopen, {before} before"
    );

    // The own id is older than the window: a resend is refused, not
    // committed again; a status query is refused, not fenced.
    let resent = corium::transact(&address, &db, "own", &[("corium-request-id", own_id.as_str())])
        .await
        .expect_err("an expired id is not committed again");
    assert_eq!(resent.code(), Code::FailedPrecondition, "{resent:?}");
    assert!(resent.message().contains("retention window"), "{resent:?}");
    let asked = corium_fleet_tests::cli::run(&["request-status", &db, &own_id], &address).await;
    assert!(
        !asked.success && asked.stderr.contains("retention window"),
        "{asked:?}"
    );
    let items = corium::log(&address, &db)
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, names)| names)
        .filter(|name| name == "own")
        .count();
    assert_eq!(items, 1, "the own transaction committed once");
}
