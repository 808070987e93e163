//! `many-databases` (issue 48): what a node's databases cost when they do
//! nothing, and whether that grows with how many it holds — this build
//! beside the previous release, in one run.
//!
//! Per store and count: a fleet of three nodes (lease TTL 5 s, each build's
//! own defaults) and one ingress; the databases are created through the
//! ingress (32 at once: rate, p50/p99), written once each (the same), left
//! alone until each build's idle eviction has let them go (or for its
//! window, whichever is shorter), then measured idle for 20 s: CPU per node
//! (`/proc/PID/stat`), root-store operations per second (`/debug/root-ops`),
//! resident memory per node. Last, a write to each of up to 1,000 of them,
//! one at a time: the reactivation latency of a database that went idle.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corium_fleet_tests::{Backend, Fleet, corium, http_get};
use futures::StreamExt as _;
use serde::Serialize;

use crate::stats::{self, Latency};

/// Calls in flight while creating and first-writing.
const CONCURRENCY: usize = 32;
/// The idle window measured.
const IDLE_WINDOW: Duration = Duration::from_secs(20);
/// How long the databases are left alone before the idle window, at most.
const SETTLE_AT_MOST: Duration = Duration::from_secs(90);
/// Databases written again to time a reactivation.
const REACTIVATIONS: usize = 1_000;

/// One build at one count.
#[derive(Debug, Serialize)]
pub(crate) struct Run {
    pub(crate) binaries: &'static str,
    pub(crate) databases: usize,
    pub(crate) create: Latency,
    pub(crate) first_write: Latency,
    /// Databases still open on all nodes when the idle window began.
    pub(crate) open_when_idle: f64,
    /// CPU of each node over the idle window, per cent of one core.
    pub(crate) idle_cpu_percent: Vec<f64>,
    /// Root-store operations per second over the idle window, all nodes:
    /// reads and writes.
    pub(crate) idle_root_reads_per_s: f64,
    pub(crate) idle_root_writes_per_s: f64,
    /// Resident memory of each node at the end of the idle window, MiB.
    pub(crate) rss_mib: Vec<f64>,
    /// A write to a database that went idle (activation included).
    pub(crate) reactivation: Latency,
}

/// Root operations (reads, writes) summed over every node and database.
async fn root_ops(fleet: &Fleet) -> (f64, f64) {
    let (mut reads, mut writes) = (0.0, 0.0);
    for node in &fleet.nodes {
        let Some((_, body)) = http_get(node.admin, "/debug/root-ops").await else {
            continue;
        };
        let Ok(parsed) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&body) else {
            continue;
        };
        for ops in parsed.values() {
            #[allow(clippy::cast_precision_loss)]
            {
                reads += ops["reads"].as_u64().unwrap_or(0) as f64;
                writes += ops["writes"].as_u64().unwrap_or(0) as f64;
            }
        }
    }
    (reads, writes)
}

async fn owned_total(fleet: &Fleet) -> f64 {
    let mut owned = 0.0;
    for node in &fleet.nodes {
        owned += super::counter(&super::metrics(node.admin).await, "corium_fleet_databases_owned");
    }
    owned
}

/// Runs `call` for every name, `CONCURRENCY` at once; the latency of each.
async fn each<F, Fut>(names: &[String], call: F) -> anyhow::Result<Latency>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let started = Instant::now();
    let call = &call;
    let samples: Vec<anyhow::Result<Duration>> = futures::stream::iter(names.iter().cloned())
        .map(|name| async move {
            let sent = Instant::now();
            call(name).await?;
            Ok(sent.elapsed())
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let samples = samples.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    Ok(stats::latency(samples, started.elapsed()))
}

/// One build at one count, on a fresh store.
async fn run_one(backend: Backend, binaries: (&'static str, &Path), databases: usize) -> anyhow::Result<Run> {
    let mut fleet = Fleet::builder(backend)
        .nodes(3)
        .lease_ttl(Duration::from_secs(5))
        .binaries(binaries.1)
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address: Arc<str> = fleet.ingresses[0].endpoint().into();
    let names: Vec<String> = (0..databases).map(|n| format!("many-{n}")).collect();
    let create = each(&names, |name| {
        let address = Arc::clone(&address);
        async move {
            corium::create(&address, &name).await?;
            Ok(())
        }
    })
    .await?;
    let first_write = each(&names, |name| {
        let address = Arc::clone(&address);
        async move {
            corium::transact(&address, &name, "first", &[]).await?;
            Ok(())
        }
    })
    .await?;
    // Left alone until idle eviction let them go, or at most a while.
    let settled = Instant::now() + SETTLE_AT_MOST;
    while owned_total(&fleet).await > 0.0 && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let open_when_idle = owned_total(&fleet).await;
    let pids: Vec<Option<u32>> = fleet.nodes.iter().map(corium_fleet_tests::Node::pid).collect();
    let cpu_before: Vec<Duration> = pids.iter().map(|pid| stats::cpu_time(*pid)).collect();
    let ops_before = root_ops(&fleet).await;
    tokio::time::sleep(IDLE_WINDOW).await;
    let ops_after = root_ops(&fleet).await;
    let idle_cpu_percent = pids
        .iter()
        .zip(cpu_before)
        .map(|(pid, before)| {
            (stats::cpu_time(*pid).saturating_sub(before)).as_secs_f64() / IDLE_WINDOW.as_secs_f64() * 100.0
        })
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let rss_mib = pids
        .iter()
        .map(|pid| pid.map_or(0.0, |pid| stats::rss_kib(pid) as f64 / 1024.0))
        .collect();
    let mut reactivations = Vec::new();
    let started = Instant::now();
    for name in names.iter().take(REACTIVATIONS) {
        let sent = Instant::now();
        corium::transact(&address, name, "again", &[]).await?;
        reactivations.push(sent.elapsed());
    }
    let reactivation = stats::latency(reactivations, started.elapsed());
    drop(fleet);
    Ok(Run {
        binaries: binaries.0,
        databases,
        create,
        first_write,
        open_when_idle,
        idle_cpu_percent,
        idle_root_reads_per_s: (ops_after.0 - ops_before.0) / IDLE_WINDOW.as_secs_f64(),
        idle_root_writes_per_s: (ops_after.1 - ops_before.1) / IDLE_WINDOW.as_secs_f64(),
        rss_mib,
        reactivation,
    })
}

/// Every count in `counts`, the previous release then this build, each on
/// a fresh store from `backend()`.
///
/// # Errors
/// No previous release, or a failed request.
pub(crate) async fn run(backend: impl Fn() -> Backend, counts: &[usize]) -> anyhow::Result<Vec<Run>> {
    let previous = super::moves::previous_release()?;
    let this = corium_fleet_tests::ports::bin_dir();
    let mut runs = Vec::new();
    for &databases in counts {
        runs.push(run_one(backend(), ("previous", &previous), databases).await?);
        runs.push(run_one(backend(), ("this", &this), databases).await?);
    }
    Ok(runs)
}
