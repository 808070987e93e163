//! A node's drain (SIGTERM) within its `--drain-deadline-ms`, on both
//! stores: with time enough, every owned database is handed to its next
//! candidate; with too little, the rest are released instead. Either way
//! the node exits within its deadline, every database is writable again
//! within a lease TTL of the exit, and nothing acknowledged is lost.

use std::time::{Duration, Instant};

use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet};

const TTL: Duration = Duration::from_secs(3);
/// Databases the draining node owns.
const DATABASES: usize = 40;

/// What one drain came to.
struct Drained {
    exit: Duration,
    handed: usize,
    released: usize,
    slowest_back: Duration,
}

/// `drain finished` in `log`: `(databases, released)`.
fn drain_line(log: &str) -> Option<(usize, usize)> {
    let line = log.lines().rev().find(|line| line.contains("drain finished"))?;
    let field = |name: &str| -> Option<usize> {
        let start = line.find(&format!("{name}="))? + name.len() + 1;
        line[start..]
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    Some((field("databases")?, field("released")?))
}

async fn drain(backend: Backend, deadline_ms: u64) -> Drained {
    let deadline = deadline_ms.to_string();
    let mut fleet = Fleet::builder(backend.clone())
        .lease_ttl(TTL)
        .node_flags(&["--drain-deadline-ms", &deadline])
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    // Databases whose first candidate is node-1, each written once (so
    // node-1 owns it).
    let dbs: Vec<String> = (0..)
        .map(|i| format!("drained-{i}"))
        .filter(|db| fleet.candidates(db)[0] == 0)
        .take(DATABASES)
        .collect();
    for db in &dbs {
        assert!(corium::create(&address, db).await.unwrap());
        corium::transact(&address, db, "before", &[]).await.unwrap();
    }
    let started = Instant::now();
    fleet.nodes[0].terminate().await;
    let exit = started.elapsed();
    let (databases, released) = drain_line(&fleet.nodes[0].log())
        .unwrap_or_else(|| panic!("{backend:?}: no drain line\n{}", fleet.nodes[0].log()));
    assert_eq!(databases, DATABASES, "{backend:?}: node-1 owned them all");
    // Every database is writable again, within a TTL of the exit (a
    // released lease is taken at once, not waited out).
    let back_from = Instant::now();
    let mut slowest_back = Duration::ZERO;
    for db in &dbs {
        let written = corium_fleet_tests::eventually(
            TTL * 3,
            format!("{backend:?}: {db} writable after the drain"),
            async || corium::transact(&address, db, "after", &[]).await,
        )
        .await;
        assert!(written.basis_t > 0);
        slowest_back = slowest_back.max(back_from.elapsed());
    }
    // Nothing acknowledged is lost.
    for db in &dbs {
        let log = corium::log(&address, db).await.unwrap();
        let names: Vec<&String> = log.iter().flat_map(|(_, names)| names).collect();
        for wanted in ["before", "after"] {
            assert_eq!(
                names.iter().filter(|name| name.as_str() == wanted).count(),
                1,
                "{backend:?}: {db}: {names:?}"
            );
        }
    }
    Drained {
        exit,
        handed: databases - released,
        released,
        slowest_back,
    }
}

/// The backends, each time fresh (a new `PostgreSQL` database per fleet).
fn fresh_backends() -> Vec<Backend> {
    Backend::all()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_hands_over_what_it_can_and_releases_the_rest_within_its_deadline() {
    for (backend, other) in fresh_backends().into_iter().zip(fresh_backends()) {
        // Time enough: everything handed over.
        let roomy = drain(backend.clone(), 30_000).await;
        eprintln!(
            "{backend:?} deadline 30 s: exit {:?}, {} handed, {} released, all back within {:?}",
            roomy.exit, roomy.handed, roomy.released, roomy.slowest_back
        );
        assert_eq!(roomy.released, 0, "{backend:?}: every database handed over");
        // No time for handoffs (the reserve is the whole deadline): every
        // database released, the node gone within its deadline.
        let tight = drain(other, 2_000).await;
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
