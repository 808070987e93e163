//! A database whose open outlasts its lease TTL: Corium acquires the lease,
//! recovers, and only then starts renewing, so the open returns holding a
//! lease that already expired. The node waits for Corium's first renewal
//! before it answers, instead of refusing its first caller `UNAVAILABLE`
//! ("write lease could not be renewed"), which a long history on a slow
//! store used to hit (`corium-fleet-bench backup` at 50,000 transactions:
//! the restored copy's first read).

use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_longer_than_the_lease_ttl_serves_its_first_call() {
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(1)
        .lease_ttl(Duration::from_secs(1))
        .start_with_database("slow-open")
        .await;
    corium::transact_items(&address, "slow-open", "item", 20).await;
    let written = corium::log(&address, "slow-open").await.unwrap();
    // The next incarnation's operations on the database's root (the lease
    // acquire's, the open's read of the root after the fence, renewals)
    // take 1.2 s more in its first 6 s, so the open ends more than a lease
    // TTL after the acquire returned: with the lease it acquired expired.
    // The window is long so that a slow start on a busy machine still opens
    // the database inside it; renewals inside it land late, the first one
    // after it in time (well within the node's 5 s storage timeout, which
    // bounds the wait).
    let node = &mut fleet.nodes[0];
    node.set_env(
        corium_fleet_faults::env::SCHEDULE,
        Some("@0ms delay 1200ms for 6000ms op=lease"),
    );
    node.terminate().await;
    node.restart().await;
    let slow_until = tokio::time::Instant::now() + Duration::from_millis(6_500);
    node.set_env(corium_fleet_faults::env::SCHEDULE, None);
    // Straight to the node: no ingress retry hides a refusal.
    let read = corium::log(&fleet.nodes[0].endpoint(), "slow-open").await;
    let logs = fleet.nodes[0].log();
    assert_eq!(
        read.unwrap_or_else(|status| panic!("{status:?}\n{logs}")),
        written
    );
    assert!(
        logs.contains("the open outlasted the lease ttl"),
        "the open was not longer than the lease, so this test shows nothing:\n{logs}"
    );
    // Past the slow window, the database takes writes as ever.
    tokio::time::sleep_until(slow_until).await;
    corium::transact(&address, "slow-open", "after the slow open", &[])
        .await
        .unwrap();
}
