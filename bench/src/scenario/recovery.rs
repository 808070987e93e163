//! Handoff unavailability against the length of a database's history: the
//! new owner recovers the database, so this is activation cost as a function
//! of how many transactions the database has.
//!
//! Variants (node flags) run side by side, one fleet each over its own
//! store, and their handoffs alternate, so storage-server background work
//! (a checkpoint after a write burst) falls on every variant alike rather
//! than on whichever runs second. On `PostgreSQL` the server is asked for a
//! `CHECKPOINT` after each history is written, before its handoffs.

use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium};
use serde::Serialize;

use crate::load::{self, Shape};

/// One history length.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) transactions: usize,
    /// Handoff unavailability, as the old owner measured it, per repetition.
    pub(crate) handoff_ms: Vec<u64>,
}

/// One variant's fleet and figures.
struct Variant {
    fleet: Fleet,
    address: String,
    points: Vec<Point>,
}

/// Hands `db` from its owner to another candidate; the old owner's
/// measured unavailability.
pub(crate) async fn hand_off(fleet: &Fleet, address: &str, db: &str) -> anyhow::Result<u64> {
    let view = corium::placement(address, db).await;
    super::hand_off_from(fleet, fleet.index(&view.owner_id), db).await
}

/// `CHECKPOINT` on the `PostgreSQL` server behind `backend` (the bench's own
/// server; its role is a superuser). Nothing on the filesystem store.
fn checkpoint(backend: &Backend) {
    if let Backend::Postgres { url } = backend {
        let ran = std::process::Command::new("psql")
            .args([url.as_str(), "-qtAc", "CHECKPOINT"])
            .status();
        if !ran.is_ok_and(|status| status.success()) {
            eprintln!("CHECKPOINT on the bench's PostgreSQL failed; figures may include its background work");
        }
    }
}

/// Runs handoffs of databases with each history length in `lengths`, for
/// every variant in `variants` (node flags), alternating between them.
/// Returns each variant's points, in the order given.
///
/// # Errors
/// A failed request or handoff.
pub(crate) async fn run(
    backend: impl Fn() -> Backend,
    lengths: &[usize],
    reps: usize,
    variants: &[&[&str]],
) -> anyhow::Result<Vec<Vec<Point>>> {
    let mut running = Vec::new();
    for flags in variants {
        let (fleet, address) = Fleet::builder(backend())
            .lease_ttl(Duration::from_secs(5))
            .node_flags(flags)
            .start_with_ingress()
            .await;
        running.push(Variant {
            fleet,
            address,
            points: Vec::new(),
        });
    }
    for (index, &transactions) in lengths.iter().enumerate() {
        let db = format!("history-{index}");
        for variant in &running {
            corium::create(&variant.address, &db).await?;
            if transactions > 0 {
                let shape = Shape {
                    concurrency: 16,
                    requests: transactions,
                    request_ids: false,
                };
                load::transact(&variant.address, &db, "h", shape).await?;
            }
        }
        for variant in &running {
            checkpoint(&variant.fleet.backend);
        }
        let mut measured = vec![Vec::new(); running.len()];
        for _ in 0..reps {
            for (variant, handoff_ms) in running.iter().zip(&mut measured) {
                handoff_ms.push(hand_off(&variant.fleet, &variant.address, &db).await?);
            }
        }
        for (variant, handoff_ms) in running.iter_mut().zip(measured) {
            variant.points.push(Point {
                transactions,
                handoff_ms,
            });
        }
    }
    Ok(running.into_iter().map(|variant| variant.points).collect())
}
