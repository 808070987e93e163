//! What a database's history costs, fleet against a stock `corium
//! transactor` in the same run: the owner's memory while the database is
//! written, a cold open (a restart, then the first commit), the memory after
//! it, and the fleet's handoff unavailability — at each history length.
//!
//! Both are written by the same load: 16 clients, transactions of one item
//! with a ~200-byte name, the fleet through its ingress (which gives every
//! call a request id, as stock clients get — and, to show what that costs,
//! once with `--assign-request-ids false`), the stock transactor directly.
//! The fleet has two nodes (lease TTL 5 s) so a handoff has a target; its
//! cold open stops both nodes (SIGTERM, the non-owner first, so the owner
//! lets its lease go), starts both, waits until they serve (a small
//! database commits at each), and times the first commit at the database's
//! first candidate (which opens it). The
//! stock transactor is killed (SIGKILL) and started again over the same directory
//! (its lease is its own process's), timed from its start to its first
//! commit (it opens its databases as it starts). The filesystem store only: the stock binary runs on it here.

use std::time::{Duration, Instant};

use corium_fleet_tests::stock::StockTransactor;
use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use serde::Serialize;

use crate::load::{self, Shape};
use crate::scenario::recovery::hand_off;
use crate::stats;

/// Concurrent writers of each history.
const WRITERS: usize = 16;

/// One history length, fleet and stock side by side.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) transactions: usize,
    /// The fleet owner's resident set right after the writes, KiB.
    pub(crate) fleet_written_rss_kib: u64,
    /// The stock transactor's, KiB.
    pub(crate) stock_written_rss_kib: u64,
    /// Restart to first acknowledged commit, per repetition, ms.
    pub(crate) fleet_cold_open_ms: Vec<f64>,
    pub(crate) stock_cold_open_ms: Vec<f64>,
    /// The owner's resident set after the last cold open's first commit, KiB.
    pub(crate) fleet_cold_rss_kib: u64,
    pub(crate) stock_cold_rss_kib: u64,
    /// Handoff unavailability as the old owner measured it, ms.
    pub(crate) fleet_handoff_ms: Vec<f64>,
}

/// A ~200-byte item-name prefix (the load appends the client and number).
fn long_prefix(tag: &str) -> String {
    format!("{tag}-{}", "h".repeat(190))
}

/// Times one commit of a fresh item through `endpoint` (the first call after
/// a restart opens the database), retrying refusals while it opens, for at
/// most a minute.
pub(crate) async fn first_commit_ms(endpoint: &str, db: &str, name: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    let deadline = started + Duration::from_mins(1);
    loop {
        let sent =
            tokio::time::timeout(Duration::from_secs(30), corium::transact(endpoint, db, name, &[])).await;
        match sent.unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("no answer within 30 s"))) {
            Ok(_) => return Ok(started.elapsed().as_secs_f64() * 1000.0),
            Err(status) if Instant::now() < deadline => {
                tracing::debug!(%status, "first commit refused; again");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => anyhow::bail!("no commit within a minute of the restart: {status}"),
        }
    }
}

/// The owner of `db` in `fleet`, by its placement answer at `address`.
async fn owner(fleet: &Fleet, address: &str, db: &str) -> usize {
    fleet.index(&corium::placement(address, db).await.owner_id)
}

/// Stops every node (the non-owners first, SIGTERM), starts them again,
/// waits until they serve, and times one commit at `db`'s first candidate
/// (which opens it there), in milliseconds.
pub(crate) async fn cold_open_fleet(
    fleet: &mut Fleet,
    owner: usize,
    db: &str,
    name: &str,
) -> anyhow::Result<f64> {
    let order: Vec<usize> = (0..fleet.nodes.len())
        .filter(|index| *index != owner)
        .chain([owner])
        .collect();
    for &index in &order {
        fleet.nodes[index].terminate().await;
    }
    for &index in &order {
        fleet.nodes[index].restart().await;
    }
    // A restarted node serves nothing until its earlier incarnation's
    // leases could have lapsed (a lease TTL): a small database's first
    // commit waits that out, so the history database's measures its open.
    let first = fleet.candidates(db)[0];
    first_commit_ms(&fleet.nodes[first].endpoint(), &warmup(fleet, first), name).await?;
    first_commit_ms(&fleet.nodes[first].endpoint(), db, name).await
}

/// A small database whose first candidate is node `index` (the first such
/// of `history-warmup-<n>`), opened after a restart before the history
/// database is timed.
pub(crate) fn warmup(fleet: &Fleet, index: usize) -> String {
    // Bounded: with two nodes, each name is a node's first with odds ½.
    (0..1_000)
        .map(|n| format!("history-warmup-{n}"))
        .find(|name| fleet.candidates(name)[0] == index)
        .unwrap_or_else(|| format!("history-warmup-{index}"))
}

/// Runs every history length in `lengths`; `reps` handoffs and cold opens
/// each; the ingress gives every call a request id when `request_ids`.
///
/// # Errors
/// A failed request, handoff or restart, or no stock binary.
pub(crate) async fn run(lengths: &[usize], reps: usize, request_ids: bool) -> anyhow::Result<Vec<Point>> {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .nodes(2)
        .lease_ttl(Duration::from_secs(5))
        .start()
        .await;
    let assign = if request_ids { "true" } else { "false" };
    fleet.start_ingresses(1, &["--assign-request-ids", assign]).await;
    let address = fleet.ingresses[0].endpoint();
    let mut stock = StockTransactor::start().await?;
    for index in 0..fleet.nodes.len() {
        corium::create(&address, &warmup(&fleet, index)).await?;
    }
    let mut points = Vec::new();
    for (index, &transactions) in lengths.iter().enumerate() {
        let db = format!("history-{index}");
        corium::create(&address, &db).await?;
        corium::create(&stock.endpoint, &db).await?;
        let shape = Shape {
            concurrency: WRITERS,
            requests: transactions,
            request_ids: false,
        };
        load::transact(&address, &db, &long_prefix("f"), shape).await?;
        load::transact(&stock.endpoint, &db, &long_prefix("s"), shape).await?;
        let fleet_owner = owner(&fleet, &address, &db).await;
        let fleet_written_rss_kib = fleet.nodes[fleet_owner].pid().map_or(0, stats::rss_kib);
        let stock_written_rss_kib = stats::rss_kib(stock.process().pid());

        let mut fleet_handoff_ms = Vec::new();
        for _ in 0..reps {
            // Milliseconds of one handoff: far inside f64's exact integers.
            #[allow(clippy::cast_precision_loss)]
            fleet_handoff_ms.push(hand_off(&fleet, &address, &db).await? as f64);
        }

        let (mut fleet_cold_open_ms, mut stock_cold_open_ms) = (Vec::new(), Vec::new());
        let mut fleet_cold_rss_kib = 0;
        for rep in 0..reps {
            let before = owner(&fleet, &address, &db).await;
            fleet_cold_open_ms
                .push(cold_open_fleet(&mut fleet, before, &db, &format!("fleet-cold-{rep}")).await?);
            let after = owner(&fleet, &address, &db).await;
            fleet_cold_rss_kib = fleet.nodes[after].pid().map_or(0, stats::rss_kib);

            // The stock transactor opens its catalog's databases as it
            // starts, so its figure runs from the start too.
            let started = Instant::now();
            stock.restart().await?;
            first_commit_ms(&stock.endpoint, &db, &format!("stock-cold-{rep}")).await?;
            stock_cold_open_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let stock_cold_rss_kib = stats::rss_kib(stock.process().pid());
        points.push(Point {
            transactions,
            fleet_written_rss_kib,
            stock_written_rss_kib,
            fleet_cold_open_ms,
            stock_cold_open_ms,
            fleet_cold_rss_kib,
            stock_cold_rss_kib,
            fleet_handoff_ms,
        });
        // The next length starts from a fleet holding nothing else open.
        for endpoint in [&address, &stock.endpoint] {
            CatalogClient::new(corium::channel(endpoint).await)
                .delete_database(pb::DeleteDatabaseRequest { db: db.clone() })
                .await?;
        }
    }
    Ok(points)
}
