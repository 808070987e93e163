//! Backups on every store, taken through the fleet's address while the
//! database is written and moved, and restored: the stock `corium backup`
//! and `corium restore` on the filesystem (restored into the fleet's own
//! storage under a new name and served by it), and on `PostgreSQL` and S3
//! `corium-fleet backup` (Corium's own backup code, what the stock CLI built
//! with those backends runs) discovering the storage through the fleet's
//! `GetStorageInfo`, and `corium-fleet restore` into the fleet's storage.
//! Every acknowledged transaction is read back once, and nothing else.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium, eventually};

use super::stock_cli::{run_cli, run_stock};

/// Writes `w-N` items to `db` through `address` one after another, every
/// 20 ms, until stopped (at most 3,000); the names acknowledged.
struct Writer {
    running: Arc<AtomicBool>,
    /// Writes acknowledged so far.
    count: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<Vec<String>>,
}

impl Writer {
    fn start(address: &str, db: &str) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let count = Arc::new(AtomicUsize::new(0));
        let (still, counted) = (Arc::clone(&running), Arc::clone(&count));
        let (address, db) = (address.to_owned(), db.to_owned());
        let task = tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for n in 0..3_000 {
                if !still.load(Ordering::Relaxed) {
                    break;
                }
                let name = format!("w-{n}");
                // A failed write (the owner killed under it) may or may not
                // be in the log; only acknowledged ones must be.
                if corium::transact(&address, &db, &name, &[]).await.is_ok() {
                    acknowledged.push(name);
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            acknowledged
        });
        Self { running, count, task }
    }

    /// Waits (a minute at most) until `more` writes beyond those
    /// acknowledged now are acknowledged: each phase of a test has writes in
    /// it however slow the machine, instead of however many a sleep allows.
    async fn wrote(&self, more: usize) {
        let target = self.count.load(Ordering::Relaxed) + more;
        eventually(
            Duration::from_mins(1),
            format!("{target} writes acknowledged"),
            async || {
                let now = self.count.load(Ordering::Relaxed);
                if now >= target {
                    Ok(())
                } else {
                    Err(format!("{now} acknowledged"))
                }
            },
        )
        .await;
    }

    async fn stop(self) -> Vec<String> {
        self.running.store(false, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// SIGKILLs node `owner` (which owns `ledger`), waits until a write to
/// `ledger` through `address` is acknowledged by the survivor and the
/// writer has written on, then stops `writer`: every name acknowledged, the
/// survivor's first among them. Each attempt writes a name of its own: an
/// attempt refused with an unknown outcome may have committed, and only
/// acknowledged names must be in the log exactly once.
async fn fail_over(fleet: &mut Fleet, address: &str, owner: &str, writer: Writer) -> Vec<String> {
    let index = fleet.index(owner);
    fleet.nodes[index].kill();
    let attempts = AtomicUsize::new(0);
    let survivor = eventually(
        Duration::from_secs(30),
        fleet.with_logs(format!("the survivor of {owner} owns ledger")),
        async || {
            let name = format!("after-failover-{}", attempts.fetch_add(1, Ordering::Relaxed));
            match corium::transact(address, "ledger", &name, &[]).await {
                Ok(_) => Ok(name),
                Err(status) => Err(format!("{status:?}")),
            }
        },
    )
    .await;
    writer.wrote(8).await;
    let mut acknowledged = writer.stop().await;
    acknowledged.push(survivor);
    acknowledged
}

/// Every item name in `db`'s log read through `address`, with how many
/// times each was asserted.
async fn names_in(address: &str, db: &str) -> HashMap<String, usize> {
    let mut names = HashMap::new();
    for (_, asserted) in corium::log(address, db).await.unwrap() {
        for name in asserted {
            *names.entry(name).or_insert(0) += 1;
        }
    }
    names
}

/// A backup's round trip through the fleet on the filesystem, with the
/// stock CLI: `corium backup` through the fleet's address while the
/// database is written, then incrementally into the same file after a
/// handoff and after the owner was killed, then `corium restore` into the
/// fleet's storage under a new name — which the fleet then serves, with
/// every acknowledged transaction once and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_through_the_fleet_across_moves_restores_under_a_new_name() {
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(2)
        .lease_ttl(Duration::from_secs(2))
        .start_with_ingress()
        .await;
    corium::create(&address, "ledger").await.unwrap();
    let archive = fleet.path("ledger.backup");
    let archive = archive.to_str().unwrap();
    let backup_to = async |fleet: &Fleet, archive: &str, step: &str| {
        let (ok, out, err) = run_cli(&address, &["backup", "ledger", archive], "").await;
        assert!(ok, "backup {step}: {out}{err}\n{}", fleet.logs());
        eprintln!("backup {step}: {out}");
        out
    };
    let backup = async |fleet: &Fleet, step: &str| backup_to(fleet, archive, step).await;
    let writer = Writer::start(&address, "ledger");
    writer.wrote(8).await;
    let first = backup(&fleet, "while written").await;
    assert!(first.contains(":basis-t"), "{first}");

    // Indexes published (an incremental backup keeps its first root and
    // adds log frames; a new archive below copies the index blobs).
    let (ok, out, err) = run_cli(&address, &["db", "request-index", "ledger"], "").await;
    assert!(ok, "request-index: {out}{err}");

    // An incremental backup after a handoff.
    let from = corium::placement(&address, "ledger").await.owner_id;
    let to = if from == "node-1" { "node-2" } else { "node-1" };
    let handoff = corium_fleet_tests::cli::run(&["handoff", "ledger", "--to", to], &address).await;
    assert!(handoff.success, "{handoff:?}\n{}", fleet.logs());
    writer.wrote(8).await;
    backup(&fleet, "after a handoff").await;

    // And after a failover: the owner killed, the other node takes over.
    let acknowledged = fail_over(&mut fleet, &address, to, writer).await;
    let last = backup(&fleet, "after a failover").await;
    assert!(!last.contains(":replayed-transactions 0 "), "{last}");
    let full_archive = fleet.path("ledger-full.backup");
    let full_archive = full_archive.to_str().unwrap();
    let full = backup_to(&fleet, full_archive, "anew after it all").await;
    assert!(
        !full.contains(":index-basis-t 0 ") && !full.contains(":copied-blobs 0 "),
        "a new archive copies the published index: {full}"
    );
    assert!(
        acknowledged.len() > 20,
        "only {} writes acknowledged",
        acknowledged.len()
    );

    // Restored into the fleet's own storage under a new name, and served.
    let data_dir = fleet.path("data");
    let source = names_in(&address, "ledger").await;
    // The first by stock `corium restore`, the second by `corium-fleet
    // restore` (the same Corium restore, then moved through the storage
    // backend: what PostgreSQL and S3 fleets use).
    for (archive, copy, stock_cli) in [
        (archive, "ledger-copy", true),
        (full_archive, "ledger-full", false),
    ] {
        let data_dir = data_dir.to_str().unwrap();
        let (ok, out, err) = if stock_cli {
            run_stock(&["restore", archive, "--data-dir", data_dir, "--as-db", copy], "").await
        } else {
            let run = corium_fleet_tests::cli::run_on_storage(
                &[
                    "restore",
                    archive,
                    "--as-db",
                    copy,
                    "--storage",
                    "filesystem",
                    "--data-dir",
                    data_dir,
                ],
                &[],
            )
            .await;
            (run.success, run.stdout, run.stderr)
        };
        assert!(ok, "restore {copy}: {out}{err}");
        let names = names_in(&address, copy).await;
        for name in &acknowledged {
            assert_eq!(
                names.get(name),
                Some(&1),
                "{name} acknowledged, not once in {copy}"
            );
        }
        assert_eq!(names, source, "{copy} holds what the source holds, each once");
        corium::transact(&address, copy, "written to the copy", &[])
            .await
            .unwrap_or_else(|status| panic!("a write to {copy}: {status:?}\n{}", fleet.logs()));
    }
}

/// What `corium-fleet backup` reported for one database.
#[derive(Debug)]
struct Backed {
    basis_t: u64,
    index_basis_t: u64,
    transactions: u64,
    blobs: u64,
}

/// `corium-fleet backup DB --dir DIR` through `address` (the real binary);
/// its report line read back.
async fn backup_with_fleet_cli(fleet: &Fleet, address: &str, db: &str, dir: &std::path::Path) -> Backed {
    let run = corium_fleet_tests::cli::run(&["backup", db, "--dir", dir.to_str().unwrap()], address).await;
    assert!(run.success, "backup of {db}: {run:?}\n{}", fleet.logs());
    let numbers: Vec<u64> = run
        .stdout
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect();
    // "DB: backed up to t=B (index at t=I): T transactions and N index blobs copied into …"
    match numbers[..] {
        [basis_t, index_basis_t, transactions, blobs, ..] => Backed {
            basis_t,
            index_basis_t,
            transactions,
            blobs,
        },
        _ => panic!("unexpected report: {run:?}"),
    }
}

/// On `PostgreSQL` and S3: `corium-fleet backup` through the fleet's
/// address (the nodes given the stock transactor's read-only flags) while
/// the database is written, incremental ones after a handoff and after the
/// owner's SIGKILL, then
/// `corium-fleet restore` into the fleet's own storage under a new name
/// while it runs: served with every acknowledged transaction once, and
/// writable; a restore over an existing name is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_postgres_or_s3_fleet_restores_every_acknowledged_transaction() {
    let dir = tempfile::tempdir().unwrap();
    for backend in Backend::all() {
        let Some(read_only) = backend.read_only_flags() else {
            continue;
        };
        let flags: Vec<&str> = read_only.iter().map(String::as_str).collect();
        let storage = backend.storage_args(dir.path());
        let env = backend.process_env();
        let kind = if matches!(backend, Backend::Postgres { .. }) {
            "postgres"
        } else {
            "s3"
        };
        let (mut fleet, address) = Fleet::builder(backend)
            .nodes(2)
            .lease_ttl(Duration::from_secs(2))
            .node_flags(&flags)
            .start_with_ingress()
            .await;
        corium::create(&address, "ledger").await.unwrap();
        let backups = dir.path().join(kind);
        let archive = backups.join("ledger.backup");
        let writer = Writer::start(&address, "ledger");
        writer.wrote(8).await;
        // Indexes published first: the new archive copies their blobs out
        // of the fleet's storage.
        let (ok, out, err) = run_cli(&address, &["db", "request-index", "ledger"], "").await;
        assert!(ok, "{kind}: request-index: {out}{err}");
        let first = backup_with_fleet_cli(&fleet, &address, "ledger", &backups).await;
        assert!(
            first.basis_t > 0 && first.index_basis_t > 0 && first.blobs > 0,
            "{kind}: {first:?}"
        );

        let from = corium::placement(&address, "ledger").await.owner_id;
        let to = if from == "node-1" { "node-2" } else { "node-1" };
        let handoff = corium_fleet_tests::cli::run(&["handoff", "ledger", "--to", to], &address).await;
        assert!(handoff.success, "{kind}: {handoff:?}\n{}", fleet.logs());
        writer.wrote(8).await;
        let handed = backup_with_fleet_cli(&fleet, &address, "ledger", &backups).await;
        assert!(
            handed.basis_t > first.basis_t && handed.transactions > 0,
            "{kind}: an incremental backup after the handoff: {handed:?}"
        );

        // And after a failover: the owner killed, the other node takes over.
        let acknowledged = fail_over(&mut fleet, &address, to, writer).await;
        let last = backup_with_fleet_cli(&fleet, &address, "ledger", &backups).await;
        assert!(
            last.basis_t > handed.basis_t && last.transactions > 0,
            "{kind}: an incremental backup after the failover: {last:?}"
        );
        eprintln!("{kind}: first {first:?}, after the handoff {handed:?}, after the failover {last:?}");
        let source = names_in(&address, "ledger").await;

        // Restored into the fleet's own storage under a new name, while it
        // runs, and served by it.
        let restore_as = async |name: &str| {
            let mut args = vec!["restore", archive.to_str().unwrap(), "--as-db", name];
            args.extend(storage.iter().map(String::as_str));
            corium_fleet_tests::cli::run_on_storage(&args, &env).await
        };
        let restore = restore_as("ledger-copy").await;
        assert!(restore.success, "{kind}: {restore:?}");
        eprintln!("{kind}: {}", restore.stdout);
        let names = names_in(&address, "ledger-copy").await;
        for name in &acknowledged {
            assert_eq!(
                names.get(name),
                Some(&1),
                "{kind}: {name} acknowledged, not once in the copy"
            );
        }
        assert_eq!(
            names, source,
            "{kind}: the copy holds what the source held, each once"
        );
        corium::transact(&address, "ledger-copy", "written to the copy", &[])
            .await
            .unwrap_or_else(|status| panic!("{kind}: a write to the copy: {status:?}\n{}", fleet.logs()));
        // Never over an existing database.
        let again = restore_as("ledger").await;
        assert!(
            !again.success && again.stderr.contains("exists"),
            "{kind}: {again:?}"
        );
        assert_eq!(
            names_in(&address, "ledger").await,
            source,
            "{kind}: the original untouched"
        );
    }
}
