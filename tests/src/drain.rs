//! One drain measured: a fleet whose first node owns `databases`
//! databases (each written once) is sent SIGTERM with a drain deadline; how
//! long the node took to exit, how many databases it handed over and how
//! many it released, and how soon every one was writable again. Used by
//! `tests/tests/process/drain.rs` and the `drain` benchmark.

use std::time::{Duration, Instant};

use crate::{Backend, Fleet, corium};

/// The lease TTL of a drained fleet.
pub const TTL: Duration = Duration::from_secs(3);

/// What one drain came to.
pub struct Drained {
    /// From SIGTERM to the node's exit.
    pub exit: Duration,
    /// Databases handed to a successor.
    pub handed: usize,
    /// Databases only released (their lease let go).
    pub released: usize,
    /// Until the last database was written again (writes one after another).
    pub slowest_back: Duration,
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

/// Drains node-1 of a fresh fleet on `backend` owning `databases`
/// databases, with `--drain-deadline-ms deadline_ms`.
///
/// # Panics
/// When the fleet misbehaves: a database not writable again within three
/// TTLs, an acknowledged write missing or duplicated.
pub async fn drain(backend: Backend, deadline_ms: u64, databases: usize) -> Drained {
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
        .take(databases)
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
    let owned = databases;
    assert_eq!(owned, dbs.len(), "{backend:?}: node-1 owned them all");
    // Every database is writable again, within a TTL of the exit (a
    // released lease is taken at once, not waited out).
    let back_from = Instant::now();
    let mut slowest_back = Duration::ZERO;
    for db in &dbs {
        let written = crate::eventually(
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
        handed: owned - released,
        released,
        slowest_back,
    }
}
