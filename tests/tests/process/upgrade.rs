//! A rolling upgrade from the previous release (issue 38, `docs/upgrading.md`).
//!
//! A fleet of the previous release's binaries — the commit named in
//! `tests/previous-release`, built by `scripts/previous-release.sh` (`make
//! test` runs it) — with two ingresses behind a round-robin balancer (a
//! Kubernetes Service) is rolled the way the upgrade notes say: each node in
//! turn is sent SIGTERM (its drain hands its databases over) and started again
//! on this tree's binary with the same identity and data, then each ingress is
//! replaced by a new one (the new one first, then the old taken out of the
//! balancer and sent SIGTERM), and then the new ingresses once more by newer
//! ones. Stock Corium clients write through the balancer the whole time.
//! Asserted: no client saw an error, every acknowledged write is in the log
//! exactly once, every database kept being written while the releases were
//! mixed, and every process ends on the new binary (read from
//! `/proc/PID/exe`, so the test cannot pass by running the same binary
//! twice).
//!
//! One allowance, for the previous release's own ingress only: it sends its
//! GOAWAY at SIGTERM while a stock peer's subscription is open on the
//! connection, and tonic's client then fails that peer's next write
//! `CANCELLED` without sending it (`ingress/src/connection_life.rs`). This
//! release's ingress ends the subscriptions first and waits for quiet; the
//! second ingress roll, new to new, holds it to no error at all. The
//! allowance is tied to [`PREVIOUS_WITHOUT_LEAVING`]: it goes when
//! `tests/previous-release` names a later release.

use std::path::{Path, PathBuf};
use std::time::Duration;

use corium_fleet_tests::balancer::Balancer;
use corium_fleet_tests::node::Node;
use corium_fleet_tests::stock_load::StockWriter;
use corium_fleet_tests::{Backend, Fleet, bin_dir, corium, eventually};

const TTL: Duration = Duration::from_millis(1500);

/// The previous release whose ingress closes connections with
/// subscriptions open (before `ingress/src/leaving.rs`).
const PREVIOUS_WITHOUT_LEAVING: &str = "5ca2fd1e72390fbf11f7e7718292a17fbc633bdd";

/// What a stock peer says of a write the previous release's GOAWAY left
/// unsent: tonic's client drops it (`CANCELLED`, "connection closed") when
/// the GOAWAY reached a connection with a stream open, or h2 fails it with
/// the server's own `GoAway(NO_ERROR, Remote)` when it was opened above the
/// GOAWAY's last stream id, which HTTP/2 (RFC 9113 §6.8) guarantees the
/// server never processed. Both are the previous ingress's one-phase GOAWAY;
/// a full run saw both kinds in one roll.
fn unsent_after_goaway(error: &str) -> bool {
    (error.contains("The operation was cancelled") && error.contains("connection closed"))
        || (error.contains("GoAway(") && error.contains("NO_ERROR, Remote"))
}

/// Each writer's errors after its first `from[i]`.
fn errors_since(writers: &[(String, StockWriter)], from: &[usize]) -> Vec<String> {
    writers
        .iter()
        .zip(from)
        .flat_map(|((db, writer), from)| {
            writer
                .writes()
                .errors
                .into_iter()
                .skip(*from)
                .map(move |error| format!("{db}: {error}"))
        })
        .collect()
}

/// How many errors each writer has seen so far.
fn error_counts(writers: &[(String, StockWriter)]) -> Vec<usize> {
    writers
        .iter()
        .map(|(_, writer)| writer.writes().errors.len())
        .collect()
}
/// The previous release's binaries.
///
/// # Panics
/// When they were not built.
fn previous_release() -> PathBuf {
    let dir = bin_dir()
        .parent()
        .expect("target/debug has a parent")
        .join("previous-release/bin");
    assert!(
        dir.join("COMMIT").is_file() && dir.join("corium-fleet-transactor").is_file(),
        "{} has no previous release: run scripts/previous-release.sh (make test does)",
        dir.display()
    );
    dir
}

/// The binary process `node` runs now, as the kernel sees it.
fn running_binary(node: &Node) -> PathBuf {
    let pid = node.pid().expect("the process runs");
    std::fs::read_link(format!("/proc/{pid}/exe")).expect("/proc/PID/exe")
}

/// Asserts every running process of `fleet` runs a binary from `dir`.
fn all_run_from(fleet: &Fleet, dir: &Path, when: &str) {
    let dir = dir.canonicalize().expect("the binaries' directory");
    for node in fleet
        .nodes
        .iter()
        .chain(&fleet.ingresses)
        .filter(|node| node.pid().is_some())
    {
        let binary = running_binary(node);
        assert!(
            binary.starts_with(&dir),
            "{when}: {} runs {}, not a binary from {}",
            node.id,
            binary.display(),
            dir.display()
        );
    }
}

/// Waits until every writer has `more` acknowledgements beyond what it had.
async fn every_writer_moves_on(writers: &[(String, StockWriter)], more: usize, after: &str) {
    for (db, writer) in writers {
        writer
            .acked_at_least(
                writer.acked() + more,
                Duration::from_mins(1),
                &format!("{db} written after {after}"),
            )
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_the_previous_release_rolls_to_this_one_under_stock_writes_with_no_error() {
    let previous = previous_release();
    let current = bin_dir();
    for backend in Backend::all() {
        roll(backend, &previous, &current).await;
    }
}

async fn roll(backend: Backend, previous: &Path, current: &Path) {
    let mut fleet = Fleet::builder(backend.clone())
        .lease_ttl(TTL)
        .binaries(previous)
        .start()
        .await;
    // A drain period under the kit's 20 s SIGTERM bound: the previous
    // release's ingress waits all of it for open subscriptions.
    let ingress_flags = ["--drain-timeout-ms", "10000"];
    fleet.start_ingresses(2, &ingress_flags).await;
    let balancer = Balancer::start(fleet.ingresses.iter().map(|ingress| ingress.grpc).collect()).await;
    let address = balancer.endpoint();
    all_run_from(&fleet, previous, "before the roll");

    // Databases spread over the nodes, each written by its own stock client.
    let dbs: Vec<String> = (0..4).map(|i| format!("upgrade-{i}")).collect();
    for db in &dbs {
        eventually(
            Duration::from_secs(30),
            format!("{db} created"),
            async || match corium::create(&address, db).await {
                Ok(_) => Ok(()),
                Err(status) if status.code() == tonic::Code::AlreadyExists => Ok(()),
                Err(status) => Err(status.to_string()),
            },
        )
        .await;
    }
    let started = std::time::Instant::now();
    let writers: Vec<(String, StockWriter)> = dbs
        .iter()
        .map(|db| (db.clone(), StockWriter::start(&address, db)))
        .collect();
    every_writer_moves_on(&writers, 5, "the start").await;

    // The nodes, one at a time: drained by SIGTERM, back on the new binary.
    for index in 0..fleet.nodes.len() {
        let id = fleet.nodes[index].id.clone();
        eprintln!("@{:?} {backend:?}: {id}: SIGTERM", started.elapsed());
        fleet.nodes[index].terminate().await;
        fleet.nodes[index].run_binaries_from(current);
        fleet.nodes[index].restart().await;
        eprintln!(
            "@{:?} {backend:?}: {id} ready on the new release",
            started.elapsed()
        );
        every_writer_moves_on(&writers, 5, &format!("{id} rolled to the new release")).await;
    }

    let errors = errors_since(&writers, &[0; 4]);
    assert!(
        errors.is_empty(),
        "{backend:?}: stock writes failed while the nodes rolled: {errors:?}\n{}",
        fleet.logs()
    );

    // Then the ingresses: a new one in, the old one out of the balancer and
    // sent SIGTERM (it finishes its calls and closes its connections; the
    // clients reconnect through the balancer). Twice: the previous
    // release's ingresses replaced by new ones, then those by newer ones.
    fleet.run_binaries_from(current);
    let previous_commit = std::fs::read_to_string(previous.join("COMMIT")).expect("COMMIT");
    for round in 0..2 {
        let before = error_counts(&writers);
        let olds: Vec<usize> = (0..fleet.ingresses.len())
            .filter(|index| fleet.ingresses[*index].pid().is_some())
            .collect();
        for old in olds {
            fleet.start_ingresses(1, &ingress_flags).await;
            let new = fleet.ingresses.last().expect("the new ingress").grpc;
            balancer.add(new);
            balancer.remove(fleet.ingresses[old].grpc);
            let id = fleet.ingresses[old].id.clone();
            eprintln!(
                "@{:?} {backend:?}: {id}: out of the balancer, SIGTERM",
                started.elapsed()
            );
            fleet.ingresses[old].terminate().await;
            eprintln!("@{:?} {backend:?}: {id} exited", started.elapsed());
            every_writer_moves_on(&writers, 5, &format!("{id} replaced by a new one")).await;
        }
        let errors = errors_since(&writers, &before);
        let allowed = round == 0 && previous_commit.trim() == PREVIOUS_WITHOUT_LEAVING;
        assert!(
            errors.iter().all(|error| allowed && unsent_after_goaway(error)),
            "{backend:?}: stock writes failed while the ingresses rolled (round {round}): {errors:?}\n{}",
            fleet.logs()
        );
        if !errors.is_empty() {
            eprintln!(
                "{backend:?}: the previous release's ingresses cost {} unsent writes at SIGTERM (allowed): {errors:?}",
                errors.len()
            );
        }
    }
    all_run_from(&fleet, current, "after the roll");

    let mut report = Vec::new();
    for (db, writer) in writers {
        let seen = writer.stop().await;
        let log = corium::log(&address, &db).await.expect("the log reads back");
        seen.check(&log)
            .unwrap_or_else(|error| panic!("{backend:?}: {db}: {error}"));
        report.push(format!("{db}: {} acknowledged", seen.acked.len()));
    }
    eprintln!(
        "{backend:?}: rolled 3 nodes and 2 ingresses to the new release, then the ingresses again: {}",
        report.join(", ")
    );
}
