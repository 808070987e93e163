//! Activation and eviction over many databases: cold-activation latency
//! against a hot request, memory per hot and per cold database, and
//! root-store operations per second with few databases active among many
//! (renewals must follow the active count, not the total).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use corium_fleet_tests::{Backend, Fleet, corium, http_get};
use serde::Serialize;

use crate::stats::{self, Latency};

/// The scenario's result.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) backend: String,
    pub(crate) databases: usize,
    pub(crate) active: usize,
    /// First request to a cold database (activation + the transaction).
    pub(crate) cold_request: Latency,
    /// The next request to the same, now hot, database.
    pub(crate) hot_request: Latency,
    /// Node RSS (all nodes) per activated database, KiB.
    pub(crate) rss_per_hot_db_kib: f64,
    /// Node RSS left per database after they were evicted again, KiB.
    pub(crate) rss_per_cold_db_kib: f64,
    /// Root-store operations per second, all nodes, nothing active.
    pub(crate) root_ops_per_s_idle: f64,
    /// … with `active` databases under a light write load.
    pub(crate) root_ops_per_s_active: f64,
    /// … of which on the active databases (renewals, commits).
    pub(crate) root_ops_per_s_on_active: f64,
    pub(crate) load: String,
}

/// Root operations (reads + writes) per database, summed over nodes.
async fn root_ops(fleet: &Fleet) -> BTreeMap<String, f64> {
    let mut total = BTreeMap::new();
    for node in &fleet.nodes {
        let Some((_, body)) = http_get(node.admin, "/debug/root-ops").await else {
            continue;
        };
        let Ok(parsed) = serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&body) else {
            continue;
        };
        for (db, ops) in parsed {
            #[allow(clippy::cast_precision_loss)]
            let count =
                ops["reads"].as_u64().unwrap_or(0) as f64 + ops["writes"].as_u64().unwrap_or(0) as f64;
            *total.entry(db).or_insert(0.0) += count;
        }
    }
    total
}

fn rss_total(fleet: &Fleet) -> u64 {
    fleet
        .nodes
        .iter()
        .filter_map(corium_fleet_tests::Node::pid)
        .map(stats::rss_kib)
        .sum()
}

async fn owned_total(fleet: &Fleet) -> f64 {
    let mut owned = 0.0;
    for node in &fleet.nodes {
        owned += crate::scenario::counter(
            &crate::scenario::metrics(node.admin).await,
            "corium_fleet_databases_owned",
        );
    }
    owned
}

async fn wait_all_cold(fleet: &Fleet, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while owned_total(fleet).await > 0.0 {
        anyhow::ensure!(Instant::now() < deadline, "databases still owned after {limit:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

/// Runs it with `databases` databases, `active` of them kept busy.
///
/// # Errors
/// A failed request or a fleet that does not settle.
#[allow(clippy::cast_precision_loss)]
pub(crate) async fn run(backend: Backend, databases: usize, active: usize) -> anyhow::Result<Result> {
    let name = match &backend {
        Backend::Filesystem => "filesystem",
        Backend::Postgres { .. } => "postgres",
        Backend::S3 { .. } => "s3",
    };
    let fleet_args = ["--idle-evict-after-ms", "3000"];
    let (fleet, address) = Fleet::builder(backend)
        .lease_ttl(Duration::from_secs(5))
        .node_flags(&fleet_args)
        .start_with_ingress()
        .await;
    let dbs: Vec<String> = (0..databases).map(|i| format!("many-{i}")).collect();
    for db in &dbs {
        corium::create(&address, db).await?;
    }
    wait_all_cold(&fleet, Duration::from_mins(2)).await?;
    let rss_cold = rss_total(&fleet);
    let window = Duration::from_secs(10);
    let before = root_ops(&fleet).await;
    tokio::time::sleep(window).await;
    let after = root_ops(&fleet).await;
    let idle: f64 = after.values().sum::<f64>() - before.values().sum::<f64>();

    // Keep `active` databases busy; measure root operations again.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let busy: Vec<String> = dbs.iter().take(active).cloned().collect();
    let mut writers = Vec::new();
    for db in busy.clone() {
        let (address, stopped) = (address.clone(), stopped.clone());
        writers.push(tokio::spawn(async move {
            for n in 0u64.. {
                if *stopped.borrow() {
                    break;
                }
                let _ = corium::transact(&address, &db, &format!("busy-{n}"), &[]).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = root_ops(&fleet).await;
    tokio::time::sleep(window).await;
    let after = root_ops(&fleet).await;
    let busy_total = after.values().sum::<f64>() - before.values().sum::<f64>();
    let on_active: f64 = busy
        .iter()
        .map(|db| after.get(db).copied().unwrap_or(0.0) - before.get(db).copied().unwrap_or(0.0))
        .sum();

    // Cold activations against hot requests, on databases not kept busy.
    let probe: Vec<&String> = dbs.iter().skip(active).take(100).collect();
    let (mut cold, mut hot) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for db in &probe {
        let sent = Instant::now();
        corium::transact(&address, db, "wake", &[]).await?;
        cold.push(sent.elapsed());
        let sent = Instant::now();
        corium::transact(&address, db, "again", &[]).await?;
        hot.push(sent.elapsed());
    }
    let elapsed = started.elapsed();
    let activated = (probe.len() + busy.len()) as f64;
    let rss_hot = rss_total(&fleet);
    let _ = stop.send(true);
    for writer in writers {
        let _ = writer.await;
    }
    wait_all_cold(&fleet, Duration::from_mins(1)).await?;
    let rss_after = rss_total(&fleet);
    Ok(Result {
        backend: name.to_owned(),
        databases,
        active,
        cold_request: stats::latency(cold, elapsed),
        hot_request: stats::latency(hot, elapsed),
        rss_per_hot_db_kib: (rss_hot as f64 - rss_cold as f64) / activated,
        rss_per_cold_db_kib: (rss_after as f64 - rss_cold as f64) / activated,
        root_ops_per_s_idle: idle / window.as_secs_f64(),
        root_ops_per_s_active: busy_total / window.as_secs_f64(),
        root_ops_per_s_on_active: on_active / window.as_secs_f64(),
        load: stats::load(),
    })
}
