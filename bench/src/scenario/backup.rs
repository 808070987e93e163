//! Backups and restores of a long history, through the fleet, on each
//! store, beside stock Corium's on the filesystem in the same run.
//!
//! A fleet of one node (given the stock read-only discovery flags on
//! `PostgreSQL` and S3) and one ingress; a database written with
//! `transactions` one-item transactions by 16 clients through the ingress;
//! its indexes published (`RequestIndex`, as the node does every few
//! seconds anyway). Then, each with the real `corium-fleet` binary:
//! a full `backup` through the fleet's address, 1 % more transactions and
//! an incremental `backup` into the same directory, and a `restore` into the
//! fleet's own storage under a new name while it runs — whose log is read
//! back through the fleet and compared with the source's, transaction by
//! transaction. The stock run writes the same load to a stock `corium
//! transactor` and times stock `corium backup` and `corium restore` (into a
//! scratch directory: what `corium-fleet restore` does first before it moves
//! the result into the fleet's storage).

use std::path::Path;
use std::time::{Duration, Instant};

use corium_fleet_tests::stock::StockTransactor;
use corium_fleet_tests::{Backend, Fleet, corium};
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;
use serde::Serialize;

use crate::load::{self, Shape};

/// Concurrent writers.
const WRITERS: usize = 16;

/// The longest one backup or restore may take.
const COMMAND_LIMIT: Duration = Duration::from_mins(30);

/// One store's figures.
#[derive(Debug, Serialize)]
pub(crate) struct Point {
    pub(crate) store: &'static str,
    pub(crate) transactions: usize,
    /// Transactions a second the load committed while writing the history.
    pub(crate) written_per_s: f64,
    /// The full backup through the fleet, seconds.
    pub(crate) backup_s: f64,
    /// The archive's size after it, MiB.
    pub(crate) archive_mib: f64,
    /// The incremental backup after 1 % more transactions, seconds.
    pub(crate) incremental_s: f64,
    /// `corium-fleet restore` into the running fleet's storage, seconds.
    pub(crate) restore_s: f64,
    /// Transactions read back from the copy, all equal to the source's.
    pub(crate) restored_transactions: usize,
    /// Stock Corium on the filesystem: backup and restore, seconds, and the
    /// archive's size, MiB.
    pub(crate) stock: Option<(f64, f64, f64)>,
}

/// Runs one store.
///
/// # Errors
/// A failed write, backup or restore, or a copy that differs.
pub(crate) async fn run(store: &'static str, backend: Backend, transactions: usize) -> anyhow::Result<Point> {
    let scratch = tempfile::tempdir()?;
    let read_only = backend.read_only_flags().unwrap_or_default();
    let flags: Vec<&str> = read_only.iter().map(String::as_str).collect();
    let storage_env = backend.process_env();
    let (fleet, address) = Fleet::builder(backend.clone())
        .nodes(1)
        .node_flags(&flags)
        .start_with_ingress()
        .await;
    // Where `restore` writes: the fleet's own storage.
    let storage = backend.storage_args(&fleet.path("data"));
    let db = "archived";
    corium::create(&address, db).await?;
    let shape = Shape {
        concurrency: WRITERS,
        requests: transactions,
        request_ids: false,
    };
    let (_, wrote) = load::transact(&address, db, "b", shape).await?;
    #[allow(clippy::cast_precision_loss)] // Counts far inside f64's exact integers.
    let written_per_s = transactions as f64 / wrote.as_secs_f64();
    publish_indexes(&address, db).await?;

    let dir = scratch.path().join("backups");
    let dir_arg = dir.display().to_string();
    let backup_s = fleet_cli(
        &fleet,
        &["backup", db, "--dir", &dir_arg, "--endpoint", &address],
        &[],
    )
    .await?;
    let archive_mib = mib(&dir);
    let more = Shape {
        requests: (transactions / 100).max(WRITERS),
        ..shape
    };
    load::transact(&address, db, "more", more).await?;
    let incremental_s = fleet_cli(
        &fleet,
        &["backup", db, "--dir", &dir_arg, "--endpoint", &address],
        &[],
    )
    .await?;

    let archive = dir.join(format!("{db}.backup")).display().to_string();
    let mut args = vec!["restore", archive.as_str(), "--as-db", "archived-copy"];
    args.extend(storage.iter().map(String::as_str));
    let restore_s = fleet_cli(&fleet, &args, &storage_env).await?;
    let source = corium::log(&address, db).await?;
    let copy = corium::log(&address, "archived-copy")
        .await
        .map_err(|status| anyhow::anyhow!("{store}: reading the copy back: {status:?}\n{}", fleet.logs()))?;
    anyhow::ensure!(
        source == copy,
        "{store}: the copy differs ({} transactions, the source {})",
        copy.len(),
        source.len()
    );
    let stock = if matches!(backend, Backend::Filesystem) {
        Some(stock_backup_and_restore(scratch.path(), transactions).await?)
    } else {
        None
    };
    Ok(Point {
        store,
        transactions,
        written_per_s,
        backup_s,
        archive_mib,
        incremental_s,
        restore_s,
        restored_transactions: copy.len(),
        stock,
    })
}

/// Publishes `db`'s indexes now (a backup copies their blobs and replays
/// only the transactions after them).
async fn publish_indexes(endpoint: &str, db: &str) -> anyhow::Result<()> {
    let mut request = tonic::Request::new(pb::RequestIndexRequest { db: db.to_owned() });
    request.set_timeout(Duration::from_mins(5));
    CatalogClient::new(corium::channel(endpoint).await)
        .request_index(request)
        .await?;
    Ok(())
}

/// Runs `corium-fleet ARGS` with `env` (within [`COMMAND_LIMIT`]); its
/// wall time in seconds.
async fn fleet_cli(fleet: &Fleet, args: &[&str], env: &[(String, String)]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let run = corium_fleet_tests::cli::run_within(args, env, COMMAND_LIMIT)
        .await
        .ok_or_else(|| anyhow::anyhow!("{args:?} did not finish within {COMMAND_LIMIT:?}"))?;
    anyhow::ensure!(run.success, "{args:?} failed: {run:?}\n{}", fleet.logs());
    tracing::info!(?args, stdout = %run.stdout.trim(), "done");
    Ok(started.elapsed().as_secs_f64())
}

/// Runs the stock `corium` CLI with `args` within [`COMMAND_LIMIT`]; its
/// wall time in seconds.
async fn stock_cli(args: &[&str]) -> anyhow::Result<f64> {
    let mut command = tokio::process::Command::new(corium_fleet_tests::stock::binary());
    command.args(args).env_remove("CORIUM_TOKEN").kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(COMMAND_LIMIT, command.output())
        .await
        .map_err(|_| anyhow::anyhow!("{args:?} did not finish within {COMMAND_LIMIT:?}"))??;
    anyhow::ensure!(
        output.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(started.elapsed().as_secs_f64())
}

/// The same history on a stock transactor: stock `corium backup` and
/// `corium restore` timed (seconds) and the archive's size (MiB).
async fn stock_backup_and_restore(scratch: &Path, transactions: usize) -> anyhow::Result<(f64, f64, f64)> {
    let stock = StockTransactor::start().await?;
    let db = "archived";
    corium::create(&stock.endpoint, db).await?;
    let shape = Shape {
        concurrency: WRITERS,
        requests: transactions,
        request_ids: false,
    };
    load::transact(&stock.endpoint, db, "b", shape).await?;
    publish_indexes(&stock.endpoint, db).await?;
    let archive = scratch.join("stock.backup").display().to_string();
    let backup_s = stock_cli(&[
        "backup",
        db,
        archive.as_str(),
        "--transactor",
        stock.endpoint.as_str(),
    ])
    .await?;
    let archive_mib = mib(Path::new(&archive));
    let data_dir = scratch.join("stock-restored").display().to_string();
    let restore_s = stock_cli(&[
        "restore",
        archive.as_str(),
        "--data-dir",
        data_dir.as_str(),
        "--as-db",
        "copy",
    ])
    .await?;
    Ok((backup_s, restore_s, archive_mib))
}

/// The size of everything under `path`, MiB.
fn mib(path: &Path) -> f64 {
    fn bytes(path: &Path) -> u64 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::read_dir(path).map_or(0, |entries| {
                entries.flatten().map(|entry| bytes(&entry.path())).sum()
            }),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        }
    }
    #[allow(clippy::cast_precision_loss)] // Sizes far inside f64's exact integers.
    let mib = bytes(path) as f64 / (1024.0 * 1024.0);
    mib
}

/// Prints the table of `points`.
pub(crate) fn print(points: &[Point]) {
    let Some(first) = points.first() else {
        return;
    };
    println!(
        "\n== backup: {} transactions written by {WRITERS} clients, then corium-fleet backup / +1 % incremental / restore into the running fleet (seconds) ==",
        first.transactions
    );
    println!(
        "{:<22} {:>10} {:>9} {:>11} {:>12} {:>10} {:>10}",
        "", "writes/s", "backup", "archive MiB", "incremental", "restore", "read back"
    );
    for point in points {
        println!(
            "{:<22} {:>10.0} {:>9.2} {:>11.1} {:>12.2} {:>10.2} {:>10}",
            format!("fleet, {}", point.store),
            point.written_per_s,
            point.backup_s,
            point.archive_mib,
            point.incremental_s,
            point.restore_s,
            point.restored_transactions
        );
        if let Some((backup, restore, archive)) = point.stock {
            println!(
                "{:<22} {:>10} {:>9.2} {:>11.1} {:>12} {:>10.2} {:>10}",
                "stock corium, filesystem", "", backup, archive, "", restore, ""
            );
        }
    }
}
