//! `Transact` straight to the owner against the same call through the
//! ingress, each with and without a request id, on one storage backend:
//! added latency as a ratio, the cost of request ids, and the share of
//! forwards that took exactly one hop.

use serde::Serialize;

use crate::load::{self, Shape};
use crate::stats::{self, Spread};
use corium_fleet_tests::{Backend, Fleet, corium};

/// One path at one concurrency, over the rounds.
#[derive(Debug, Serialize)]
pub struct Row {
    pub backend: String,
    pub concurrency: usize,
    pub path: &'static str,
    pub p50_us: Spread,
    pub p99_us: Spread,
    pub per_second: Spread,
}

/// The scenario's result.
#[derive(Debug, Serialize)]
pub struct Result {
    pub rows: Vec<Row>,
    /// Forwards that needed no retry (no `NotOwner`, no connect retry).
    pub one_hop_share: f64,
    pub owner_cache_hit_rate: f64,
    pub load: String,
}

const PATHS: [(&str, bool, bool); 4] = [
    ("direct", false, false),
    ("direct+id", false, true),
    ("ingress", true, false),
    ("ingress+id", true, true),
];

/// Runs it: `rounds` rounds of `requests` per path and concurrency.
///
/// # Errors
/// A failed request.
pub async fn run(backend: Backend, rounds: usize, requests: usize) -> anyhow::Result<Result> {
    let name = match &backend {
        Backend::Filesystem => "filesystem",
        Backend::Postgres { .. } => "postgres",
    };
    let mut fleet = Fleet::start(backend, 3, std::time::Duration::from_secs(5)).await;
    fleet.start_ingresses(1, &[]).await;
    let ingress = fleet.ingresses[0].endpoint();
    let db = "bench-real";
    corium::create(&ingress, db).await?;
    let owner = fleet.nodes[fleet.candidates(db)[0]].endpoint();
    // Warm up every path (connections, caches, the owner's cell).
    for (path, via_ingress, ids) in PATHS {
        let endpoint = if via_ingress { &ingress } else { &owner };
        load::transact(
            endpoint,
            db,
            &format!("warm-{path}"),
            Shape {
                concurrency: 2,
                requests: 100,
                request_ids: ids,
            },
        )
        .await?;
    }
    let before = crate::scenario::metrics(fleet.ingresses[0].admin).await;
    let mut rows = Vec::new();
    for concurrency in [1, 16] {
        let mut samples: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); PATHS.len()];
        for round in 0..rounds {
            // Paths interleaved within a round, so drift hits all alike.
            for (index, (path, via_ingress, ids)) in PATHS.iter().enumerate() {
                let endpoint = if *via_ingress { &ingress } else { &owner };
                let shape = Shape {
                    concurrency,
                    requests,
                    request_ids: *ids,
                };
                let (latencies, elapsed) =
                    load::transact(endpoint, db, &format!("{path}-c{concurrency}-r{round}"), shape).await?;
                let summary = stats::latency(latencies, elapsed);
                samples[index].0.push(summary.p50_us);
                samples[index].1.push(summary.p99_us);
                samples[index].2.push(summary.per_second);
            }
        }
        for ((path, _, _), (p50, p99, rps)) in PATHS.iter().zip(samples) {
            rows.push(Row {
                backend: name.to_owned(),
                concurrency,
                path,
                p50_us: stats::spread(&p50),
                p99_us: stats::spread(&p99),
                per_second: stats::spread(&rps),
            });
        }
    }
    let after = crate::scenario::metrics(fleet.ingresses[0].admin).await;
    let delta = |name: &str| crate::scenario::counter(&after, name) - crate::scenario::counter(&before, name);
    let forwarded = delta("corium_fleet_ingress_forwarded_total");
    let retried = delta("corium_fleet_ingress_not_owner_retries_total")
        + delta("corium_fleet_ingress_connect_retries_total");
    let hits = delta("corium_fleet_ingress_owner_cache_hits_total");
    let misses = delta("corium_fleet_ingress_owner_cache_misses_total");
    Ok(Result {
        rows,
        one_hop_share: if forwarded > 0.0 {
            1.0 - retried / forwarded
        } else {
            0.0
        },
        owner_cache_hit_rate: if hits + misses > 0.0 {
            hits / (hits + misses)
        } else {
            0.0
        },
        load: stats::load(),
    })
}
