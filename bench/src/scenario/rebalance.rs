//! Load-aware placement's time to even out a fleet: three nodes (default
//! `--load-balance-interval-ms`), six equally busy databases whose first
//! candidates are node-1 and node-2 (three each) and whose second is
//! node-3 — an idle node among their candidates, as a node that just
//! joined is. Measured: the time from the load's start until node-3 owns
//! its share (two), and each node's calls per second before and after
//! (the spread, max over min). Bounded: three minutes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use corium_fleet_tests::corium;
use serde::Serialize;

/// Writers per database.
const WRITERS: usize = 2;
/// How long the fleet may take.
const BOUND: Duration = Duration::from_mins(3);

/// What one run measured.
#[derive(Debug, Serialize)]
pub(crate) struct Rebalanced {
    /// Load start to node-3 owning two databases, ms (`None`: not within
    /// the bound).
    pub(crate) evened_ms: Option<u128>,
    /// Databases owned by node-1, node-2, node-3 at the start and at the end.
    pub(crate) owned_before: [usize; 3],
    pub(crate) owned_after: [usize; 3],
    /// Calls per second of each node (their `NodeStatus`) once the load
    /// ran 15 s, and at the end.
    pub(crate) calls_before: [f64; 3],
    pub(crate) calls_after: [f64; 3],
}

/// Each node's owned count and calls per second, from the fleet status.
async fn spread(address: &str) -> anyhow::Result<([usize; 3], [f64; 3])> {
    use corium_fleet_proto::fleet::FleetStatusRequest;
    let status = corium::admin(address)
        .await
        .fleet_status(FleetStatusRequest {})
        .await?
        .into_inner();
    let (mut owned, mut calls) = ([0; 3], [0.0; 3]);
    for member in &status.members {
        let Some(index) = member
            .node_id
            .strip_prefix("node-")
            .and_then(|n| n.parse::<usize>().ok())
            .and_then(|n| n.checked_sub(1))
            .filter(|index| *index < 3)
        else {
            continue;
        };
        if let Some(node) = &member.status {
            owned[index] = usize::try_from(node.owned).unwrap_or(usize::MAX);
            calls[index] = node.load.as_ref().map_or(0.0, |load| load.calls_per_second);
        }
    }
    Ok((owned, calls))
}

/// Runs the scenario once.
///
/// # Errors
/// The fleet could not be asked for its status, or a database not created.
pub(crate) async fn run() -> anyhow::Result<Rebalanced> {
    let (fleet, address) = super::filesystem_fleet(3).await;
    let dbs: Vec<String> = [0, 1]
        .into_iter()
        .flat_map(|first| {
            (0..10_000)
                .map(|n| format!("even-{n}"))
                .filter(|db| fleet.candidates(db) == [first, 2])
                .take(3)
                .collect::<Vec<_>>()
        })
        .collect();
    for db in &dbs {
        corium::create(&address, db).await?;
    }
    let running = Arc::new(AtomicBool::new(true));
    let mut writers = Vec::new();
    for db in &dbs {
        for writer in 0..WRITERS {
            let (running, address, db) = (Arc::clone(&running), address.clone(), db.clone());
            writers.push(tokio::spawn(async move {
                // Bounded by the scenario's bound: it clears `running`.
                let mut n = 0u64;
                while running.load(Ordering::Relaxed) {
                    let _ = corium::transact(&address, &db, &format!("w{writer}-{n}"), &[]).await;
                    n += 1;
                }
            }));
        }
    }
    let started = Instant::now();
    let (owned_before, _) = spread(&address).await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (_, calls_before) = spread(&address).await?;
    let mut evened_ms = None;
    while started.elapsed() < BOUND {
        let (owned, _) = spread(&address).await?;
        if owned[2] >= 2 {
            evened_ms = Some(started.elapsed().as_millis());
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Two more intervals for the rates to show the new placement.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let (owned_after, calls_after) = spread(&address).await?;
    running.store(false, Ordering::Relaxed);
    for writer in writers {
        writer.await?;
    }
    Ok(Rebalanced {
        evened_ms,
        owned_before,
        owned_after,
        calls_before,
        calls_after,
    })
}
