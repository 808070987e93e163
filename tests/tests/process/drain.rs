//! A node's drain (SIGTERM) within its `--drain-deadline-ms`, on both
//! stores: with time enough, every owned database is handed to its next
//! candidate; with too little, the rest are released instead. Either way
//! the node exits within its deadline, every database is writable again
//! within a lease TTL of the exit, and nothing acknowledged is lost. At
//! scale: `corium-fleet-bench drain` (500 databases on `PostgreSQL`).

use std::time::Duration;

use corium_fleet_tests::Backend;
use corium_fleet_tests::drain::{TTL, drain};

/// Databases the draining node owns.
const DATABASES: usize = 40;

/// The backends, each time fresh (a new `PostgreSQL` database per fleet).
fn fresh_backends() -> Vec<Backend> {
    Backend::all()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_hands_over_what_it_can_and_releases_the_rest_within_its_deadline() {
    for (backend, other) in fresh_backends().into_iter().zip(fresh_backends()) {
        // Time enough: everything handed over.
        let roomy = drain(backend.clone(), 30_000, DATABASES).await;
        eprintln!(
            "{backend:?} deadline 30 s: exit {:?}, {} handed, {} released, all back within {:?}",
            roomy.exit, roomy.handed, roomy.released, roomy.slowest_back
        );
        assert_eq!(roomy.released, 0, "{backend:?}: every database handed over");
        // No time for handoffs (the reserve is the whole deadline): every
        // database released, the node gone within its deadline.
        let tight = drain(other, 2_000, DATABASES).await;
        eprintln!(
            "{backend:?} deadline 2 s: exit {:?}, {} handed, {} released, all back within {:?}",
            tight.exit, tight.handed, tight.released, tight.slowest_back
        );
        assert_eq!(tight.released, DATABASES, "{backend:?}: every database released");
        assert!(
            tight.exit < Duration::from_secs(2) + Duration::from_secs(3),
            "{backend:?}: exit {:?} after a 2 s deadline",
            tight.exit
        );
        for drained in [&roomy, &tight] {
            assert!(
                drained.slowest_back <= TTL + Duration::from_secs(3),
                "{backend:?}: a database took {:?} to come back",
                drained.slowest_back
            );
        }
    }
}
