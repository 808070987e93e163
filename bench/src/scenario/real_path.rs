//! `Transact` straight to the owner against the same call through the
//! ingress, each with and without a request id, on one storage backend:
//! added latency as a ratio, the cost of request ids, and the share of
//! forwards that took exactly one hop. Through the ingress, "without" is an
//! ingress started with `--assign-request-ids false`, "with" the default
//! ingress, which gives the client's id-less call one of its own (what every
//! stock client's write costs).

use serde::Serialize;

use crate::load::{self, Shape};
use crate::stats::{self, Spread};
use corium_fleet_tests::{Backend, Fleet, corium};

/// One path at one concurrency, over the rounds.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) backend: String,
    pub(crate) concurrency: usize,
    pub(crate) path: &'static str,
    pub(crate) p50_us: Spread,
    pub(crate) p99_us: Spread,
    pub(crate) per_second: Spread,
}

/// The scenario's result.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) rows: Vec<Row>,
    /// Forwards that needed no retry (no `NotOwner`, no connect retry).
    pub(crate) one_hop_share: f64,
    pub(crate) owner_cache_hit_rate: f64,
    pub(crate) load: String,
}

/// Path name, through which ingress (none: straight to the owner; 0: the
/// one without request ids; 1: the one assigning them), and whether the
/// client sends its own id.
const PATHS: [(&str, Option<usize>, bool); 4] = [
    ("direct", None, false),
    ("direct+id", None, true),
    ("ingress", Some(0), false),
    ("ingress+id", Some(1), false),
];

/// Runs it: `rounds` rounds of `requests` per path and concurrency.
///
/// # Errors
/// A failed request.
pub(crate) async fn run(backend: Backend, rounds: usize, requests: usize) -> anyhow::Result<Result> {
    let name = match &backend {
        Backend::Filesystem => "filesystem",
        Backend::Postgres { .. } => "postgres",
        Backend::S3 { .. } => "s3",
    };
    let mut fleet = Fleet::builder(backend)
        .lease_ttl(std::time::Duration::from_secs(5))
        .start()
        .await;
    fleet.start_ingresses(1, &["--assign-request-ids", "false"]).await;
    fleet.start_ingresses(1, &[]).await;
    let ingresses = [fleet.ingresses[0].endpoint(), fleet.ingresses[1].endpoint()];
    let ingress = ingresses[0].clone();
    let db = "bench-real";
    corium::create(&ingress, db).await?;
    let owner = fleet.nodes[fleet.candidates(db)[0]].endpoint();
    // Warm up every path (connections, caches, the owner's cell).
    for (path, via, ids) in PATHS {
        let endpoint = via.map_or(&owner, |index| &ingresses[index]);
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
    let before = [
        crate::scenario::metrics(fleet.ingresses[0].admin).await,
        crate::scenario::metrics(fleet.ingresses[1].admin).await,
    ];
    let mut rows = Vec::new();
    for concurrency in [1, 16] {
        let mut samples: Vec<(Vec<f64>, Vec<f64>, Vec<f64>)> = vec![Default::default(); PATHS.len()];
        for round in 0..rounds {
            // Paths interleaved within a round, so drift hits all alike.
            for (index, (path, via, ids)) in PATHS.iter().enumerate() {
                let endpoint = via.map_or(&owner, |via| &ingresses[via]);
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
    let after = [
        crate::scenario::metrics(fleet.ingresses[0].admin).await,
        crate::scenario::metrics(fleet.ingresses[1].admin).await,
    ];
    let delta = |name: &str| {
        (0..2)
            .map(|i| crate::scenario::counter(&after[i], name) - crate::scenario::counter(&before[i], name))
            .sum::<f64>()
    };
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
