//! The ingress's owner cache under ownership churn and under a burst:
//!
//! - hit rate with ownership steady against the same load while the owners
//!   of the databases move (an admin handoff every 250 ms, round robin),
//!   with the stale entries found, the forwards that needed a second hop and
//!   the client-visible errors;
//! - storage reads under a burst of concurrent requests for one database
//!   the ingress has never seen (coalescing: one read however many wait).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use corium_fleet_proto::fleet::HandoffRequest;
use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::pb::transactor_client::TransactorClient;
use serde::Serialize;

use crate::scenario::{counter, metrics};
use crate::stats::{self, Spread};

/// The scenario's result (spreads over rounds).
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) backend: String,
    pub(crate) databases: usize,
    pub(crate) steady_hit_rate: Spread,
    pub(crate) churn_hit_rate: Spread,
    pub(crate) churn_handoffs: Spread,
    /// Cached owners found stale (the hinted node answered `NotOwner`).
    pub(crate) churn_stale: Spread,
    /// Forwards that took exactly one hop, under churn.
    pub(crate) churn_one_hop_share: Spread,
    /// Client-visible errors under churn (the ingress retries `NotOwner`).
    pub(crate) churn_errors: Spread,
    pub(crate) churn_requests: Spread,
    pub(crate) burst_requests: usize,
    /// Owner-cache misses (storage reads) the burst caused at the ingress.
    pub(crate) burst_storage_reads: Spread,
    pub(crate) load: String,
}

/// Per-database writers through `ingress` for `duration`; returns
/// (acknowledged, errors).
async fn load(ingress: &str, dbs: &[String], duration: Duration, tag: &str) -> (usize, usize) {
    let done = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for db in dbs {
        let channel = corium::channel(ingress).await;
        let (db, tag) = (db.clone(), tag.to_owned());
        let (done, errors) = (Arc::clone(&done), Arc::clone(&errors));
        tasks.push(tokio::spawn(async move {
            let mut client = TransactorClient::new(channel);
            let until = Instant::now() + duration;
            let mut n = 0;
            while Instant::now() < until {
                let mut request = tonic::Request::new(corium::transact_request(&db, &format!("{tag}-{n}")));
                request.set_timeout(Duration::from_secs(10));
                if client.transact(request).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed))
}

fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// Moves the owners of `dbs` round robin, an admin handoff every 250 ms,
/// for 3 s; the task answers how many handoffs succeeded.
fn spawn_mover(fleet: &Fleet, dbs: &[String]) -> tokio::task::JoinHandle<usize> {
    let dbs = dbs.to_vec();
    let nodes: Vec<(String, String)> = fleet.nodes.iter().map(|n| (n.id.clone(), n.endpoint())).collect();
    let candidates: Vec<Vec<usize>> = dbs.iter().map(|db| fleet.candidates(db)).collect();
    tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(3);
        let mut moved = 0usize;
        let mut i = 0;
        while Instant::now() < until {
            let db = &dbs[i % dbs.len()];
            let pair = &candidates[i % dbs.len()];
            let view = corium::placement(&nodes[pair[0]].1, db).await;
            let (from, to) = if view.owner_id == nodes[pair[0]].0 {
                (pair[0], pair[1])
            } else {
                (pair[1], pair[0])
            };
            let handed = corium::admin(&nodes[from].1)
                .await
                .handoff(HandoffRequest {
                    database: db.clone(),
                    target_node_id: nodes[to].0.clone(),
                })
                .await;
            if handed.is_ok() {
                moved += 1;
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        moved
    })
}

/// Runs it.
///
/// # Errors
/// Setup failures.
pub(crate) async fn run(backend: Backend, rounds: usize) -> anyhow::Result<Result> {
    let name = match &backend {
        Backend::Filesystem => "filesystem",
        Backend::Postgres { .. } => "postgres",
        Backend::S3 { .. } => "s3",
    };
    let (fleet, ingress) = Fleet::builder(backend)
        .lease_ttl(Duration::from_secs(5))
        .start_with_ingress()
        .await;
    let admin = fleet.ingresses[0].admin;
    let dbs: Vec<String> = (0..8).map(|i| format!("cache-{i}")).collect();
    for db in &dbs {
        corium::create(&ingress, db).await?;
    }
    load(&ingress, &dbs, Duration::from_secs(1), "warm").await;
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let burst_requests = 64;
    for round in 0..rounds {
        // Steady ownership.
        let before = metrics(admin).await;
        load(&ingress, &dbs, Duration::from_secs(3), &format!("steady-{round}")).await;
        let after = metrics(admin).await;
        let delta = |name: &str| counter(&after, name) - counter(&before, name);
        let hits = delta("corium_fleet_ingress_owner_cache_hits_total");
        let misses = delta("corium_fleet_ingress_owner_cache_misses_total");
        samples
            .entry("steady_hit")
            .or_default()
            .push(share(hits, hits + misses));

        // The same load while owners move every 250 ms.
        let before = metrics(admin).await;
        let churn = spawn_mover(&fleet, &dbs);
        let (acked, errors) = load(&ingress, &dbs, Duration::from_secs(3), &format!("churn-{round}")).await;
        let moved = churn.await.unwrap_or(0);
        let after = metrics(admin).await;
        let delta = |name: &str| counter(&after, name) - counter(&before, name);
        let hits = delta("corium_fleet_ingress_owner_cache_hits_total");
        let misses = delta("corium_fleet_ingress_owner_cache_misses_total");
        let forwarded = delta("corium_fleet_ingress_forwarded_total");
        let retried = delta("corium_fleet_ingress_not_owner_retries_total")
            + delta("corium_fleet_ingress_connect_retries_total");
        #[allow(clippy::cast_precision_loss)]
        {
            samples
                .entry("churn_hit")
                .or_default()
                .push(share(hits, hits + misses));
            samples.entry("handoffs").or_default().push(moved as f64);
            samples
                .entry("stale")
                .or_default()
                .push(delta("corium_fleet_ingress_owner_cache_stale_total"));
            samples
                .entry("one_hop")
                .or_default()
                .push(1.0 - share(retried, forwarded));
            samples.entry("errors").or_default().push(errors as f64);
            samples
                .entry("requests")
                .or_default()
                .push((acked + errors) as f64);
        }

        // A burst for a database this ingress has never seen.
        let cold = format!("cold-{round}");
        corium::create(&fleet.nodes[fleet.candidates(&cold)[0]].endpoint(), &cold).await?;
        let before = metrics(admin).await;
        let mut burst = Vec::new();
        for n in 0..burst_requests {
            let (ingress, cold) = (ingress.clone(), cold.clone());
            burst.push(tokio::spawn(async move {
                corium::transact(&ingress, &cold, &format!("burst-{n}"), &[])
                    .await
                    .is_ok()
            }));
        }
        for request in burst {
            let _ = request.await;
        }
        let after = metrics(admin).await;
        samples.entry("burst_reads").or_default().push(
            counter(&after, "corium_fleet_ingress_owner_cache_misses_total")
                - counter(&before, "corium_fleet_ingress_owner_cache_misses_total"),
        );
    }
    let spread = |key: &str| stats::spread(samples.get(key).map_or(&[][..], Vec::as_slice));
    Ok(Result {
        backend: name.to_owned(),
        databases: dbs.len(),
        steady_hit_rate: spread("steady_hit"),
        churn_hit_rate: spread("churn_hit"),
        churn_handoffs: spread("handoffs"),
        churn_stale: spread("stale"),
        churn_one_hop_share: spread("one_hop"),
        churn_errors: spread("errors"),
        churn_requests: spread("requests"),
        burst_requests,
        burst_storage_reads: spread("burst_reads"),
        load: stats::load(),
    })
}
