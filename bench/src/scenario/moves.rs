//! Moves against history (issue 49): what a SIGKILL takeover, an admin
//! handoff and a SIGTERM drain cost a client writing steadily through the
//! ingress, and what a cold open costs, at each history length — this
//! build (hot standbys promoted in place by Corium's warm start, a log open
//! that does not decode) beside the previous release, in one run, over the
//! same database.
//!
//! Per store and history length: a fleet of the previous release's
//! binaries (two nodes, both candidates, lease TTL 5 s) writes the history
//! through its ingress (16 clients, ~200-byte items, request ids as stock
//! clients get them); its events are measured ([`failover::measure`]); then
//! every process is rolled to this build's binaries (SIGTERM, a restart)
//! and the same events are measured again, each waiting first until the
//! successor follows the database. A cold open (every node restarted: no
//! standby holds anything) is timed for both builds: after a small
//! database's first commit at the first candidate (which waits out the
//! restart), the database's first commit there. On the filesystem store
//! a stock `corium transactor` is then started over the same store and
//! timed from its start to its first commit at the database.
//!
//! [`failover::measure`]: super::failover::measure

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use corium_fleet_tests::{Backend, Fleet, corium};
use serde::Serialize;

use super::failover;
use crate::load::{self, Shape};
use crate::stats::{self, Spread};

/// The database every length writes.
const DB: &str = "moves";
/// The lease TTL (the fleet's default).
const TTL: Duration = Duration::from_secs(5);

/// One build's figures at one history length.
#[derive(Debug, Serialize)]
pub(crate) struct Build {
    /// `previous` or `this`.
    pub(crate) binaries: &'static str,
    pub(crate) events: failover::Result,
    /// Every node restarted → first commit, ms.
    pub(crate) cold_open_ms: Spread,
    /// Opens on this build that took a hot standby's value (0 on the
    /// previous release, which has none).
    pub(crate) promotions: f64,
    /// Opens that refused one (recovered from storage).
    pub(crate) promotions_refused: f64,
}

/// One history length: the previous release, then this build.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) transactions: usize,
    pub(crate) builds: Vec<Build>,
    /// A stock `corium transactor` started over the same store once the
    /// fleet stopped (filesystem only): its start to its first commit at the
    /// database, ms (it opens every database as it starts).
    pub(crate) stock_cold_open_ms: Option<f64>,
}

/// Stops every node (SIGTERM: leases released), starts a stock transactor
/// over the fleet's filesystem store and times its start to a first commit
/// at the database.
async fn stock_cold_open(fleet: &mut Fleet) -> anyhow::Result<f64> {
    for node in &mut fleet.nodes {
        node.terminate().await;
    }
    // The last node to drain has no candidate left to hand the database to:
    // its lease stays until the TTL runs out, and a stock transactor would
    // wait that out before its open (seen: 4.9-7.0 s here, the TTL plus the
    // open). Its own open is what is compared, so the lease expires first.
    tokio::time::sleep(TTL + Duration::from_millis(500)).await;
    let started = Instant::now();
    let stock =
        corium_fleet_tests::stock::StockTransactor::start_over(&fleet.path("data"), Duration::from_mins(5))
            .await?;
    super::history::first_commit_ms(&stock.endpoint, DB, "stock-cold").await?;
    Ok(started.elapsed().as_secs_f64() * 1e3)
}

/// The previous release's release-built binaries (`scripts/previous-release.sh
/// --release`, which `make bench` runs): `CORIUM_FLEET_PREVIOUS_BIN`, else
/// `target/previous-release/release-bin`.
///
/// # Errors
/// When they are not there.
pub(crate) fn previous_release() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("CORIUM_FLEET_PREVIOUS_BIN").map_or_else(
        || {
            corium_fleet_tests::ports::bin_dir()
                .parent()
                .map_or_else(|| PathBuf::from("target"), Path::to_path_buf)
                .join("previous-release/release-bin")
        },
        PathBuf::from,
    );
    anyhow::ensure!(
        dir.join("corium-fleet-transactor").exists(),
        "{} has no previous release: run `scripts/previous-release.sh --release` (make bench does)",
        dir.display()
    );
    Ok(dir)
}

/// Sums of a counter over every node.
async fn summed(fleet: &Fleet, name: &str) -> f64 {
    let mut total = 0.0;
    for node in &fleet.nodes {
        total += super::counter(&super::metrics(node.admin).await, name);
    }
    total
}

/// Restarts every node (the owner last, SIGTERM first so leases are let
/// go), then times one commit through the ingress: the database opens at
/// its first candidate, from storage (`history`'s cold open).
async fn cold_open(fleet: &mut Fleet, address: &str, name: &str) -> anyhow::Result<f64> {
    let owner = fleet.index(&corium::placement(address, DB).await.owner_id);
    super::history::cold_open_fleet(fleet, owner, DB, name).await
}

/// Rolls every node, then the ingress, to the binaries in `dir` (SIGTERM:
/// each node hands its databases on).
async fn roll(fleet: &mut Fleet, dir: &Path) {
    fleet.run_binaries_from(dir);
    for index in 0..fleet.nodes.len() {
        fleet.nodes[index].terminate().await;
        fleet.nodes[index].run_binaries_from(dir);
        fleet.nodes[index].restart().await;
    }
    for index in 0..fleet.ingresses.len() {
        fleet.ingresses[index].terminate().await;
        fleet.ingresses[index].run_binaries_from(dir);
        fleet.ingresses[index].restart().await;
    }
}

/// One build's figures on `fleet`, already running it.
async fn measure(
    fleet: &mut Fleet,
    address: &str,
    build: &'static str,
    reps: usize,
    transactions: usize,
) -> anyhow::Result<Build> {
    let (promoted, refused) = (
        summed(
            fleet,
            "corium_fleet_hot_standby_promotions_total{outcome=\"taken\"}",
        )
        .await,
        summed(
            fleet,
            "corium_fleet_hot_standby_promotions_total{outcome=\"refused\"}",
        )
        .await,
    );
    let events = failover::measure(fleet, DB, reps, TTL, transactions, build == "this").await?;
    // Counters restart with each process: read what the events added on
    // the processes that ran them (each event restarts at most the node it
    // stopped, whose counts it made were a moment's).
    let promotions = summed(
        fleet,
        "corium_fleet_hot_standby_promotions_total{outcome=\"taken\"}",
    )
    .await
        - promoted;
    let promotions_refused = summed(
        fleet,
        "corium_fleet_hot_standby_promotions_total{outcome=\"refused\"}",
    )
    .await
        - refused;
    let mut cold = Vec::new();
    for rep in 0..reps {
        cold.push(cold_open(fleet, address, &format!("{build}-cold-{rep}")).await?);
    }
    Ok(Build {
        binaries: build,
        events,
        cold_open_ms: stats::spread(&cold),
        promotions: promotions.max(0.0),
        promotions_refused: promotions_refused.max(0.0),
    })
}

/// Runs every history length in `lengths` on `backend()` (a fresh store per
/// length), `reps` repetitions of each event.
///
/// # Errors
/// No previous release, or a failed request, move or restart.
pub(crate) async fn run(
    backend: impl Fn() -> Backend,
    lengths: &[usize],
    reps: usize,
) -> anyhow::Result<Vec<Point>> {
    let previous = previous_release()?;
    let this = corium_fleet_tests::ports::bin_dir();
    let mut points = Vec::new();
    for &transactions in lengths {
        let mut fleet = Fleet::builder(backend())
            .nodes(2)
            .lease_ttl(TTL)
            .binaries(&previous)
            .start()
            .await;
        fleet.start_ingresses(1, &[]).await;
        let address = fleet.ingresses[0].endpoint();
        corium::create(&address, DB).await?;
        for index in 0..fleet.nodes.len() {
            corium::create(&address, &super::history::warmup(&fleet, index)).await?;
        }
        let shape = Shape {
            concurrency: 16,
            requests: transactions,
            request_ids: false,
        };
        load::transact(&address, DB, &format!("moves-{}", "h".repeat(190)), shape).await?;
        let mut builds = vec![measure(&mut fleet, &address, "previous", reps, transactions).await?];
        roll(&mut fleet, &this).await;
        builds.push(measure(&mut fleet, &address, "this", reps, transactions).await?);
        let stock_cold_open_ms = if matches!(fleet.backend, Backend::Filesystem) {
            Some(stock_cold_open(&mut fleet).await?)
        } else {
            None
        };
        points.push(Point {
            transactions,
            builds,
            stock_cold_open_ms,
        });
    }
    Ok(points)
}
