//! Load-aware placement over real nodes (`--load-balance`): two busy
//! databases on one node while the other idles — the busy node hands one of
//! them to the idle candidate, says why in its status and its metrics, and
//! nothing moves back; with it off, `corium-fleet rebalance --dry-run`
//! prints the same move and nothing moves.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use corium_fleet_tests::{Fleet, corium, eventually, http_get, metric};
use serde_json::Value;

/// Writers per busy database.
const WRITERS: usize = 4;

/// Keeps `dbs` busy through `address` (`WRITERS` writers each, back to
/// back) until stopped.
struct Load {
    running: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(address: &str, dbs: &[String]) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let mut writers = Vec::new();
        for db in dbs {
            for writer in 0..WRITERS {
                let (running, address, db) = (Arc::clone(&running), address.to_owned(), db.clone());
                writers.push(tokio::spawn(async move {
                    // Bounded: stopped before the test ends; at most 100,000 calls.
                    for n in 0..100_000 {
                        if !running.load(Ordering::Relaxed) {
                            break;
                        }
                        let _ = corium::transact(&address, &db, &format!("w{writer}-{n}"), &[]).await;
                    }
                }));
            }
        }
        Self { running, writers }
    }

    async fn stop(self) {
        self.running.store(false, Ordering::Relaxed);
        for writer in self.writers {
            writer.await.unwrap();
        }
    }
}

/// Two databases whose first candidate is node-1 (and second node-2), created.
async fn two_on_node_1(fleet: &Fleet, address: &str) -> [String; 2] {
    let mut names = (0..1_000)
        .map(|n| format!("busy-{n}"))
        .filter(|db| fleet.candidates(db) == [0, 1]);
    let dbs = [names.next().unwrap(), names.next().unwrap()];
    for db in &dbs {
        corium::create(address, db).await.unwrap();
    }
    dbs
}

async fn owner(address: &str, db: &str) -> String {
    corium::placement(address, db).await.owner_id
}

/// Node `index`'s `corium_fleet_load_moves_total`.
async fn load_moves(fleet: &Fleet, index: usize) -> u64 {
    let metrics = http_get(fleet.nodes[index].admin, "/metrics").await.unwrap().1;
    let moves =
        metric(&metrics, "corium_fleet_load_moves_total").unwrap_or_else(|| panic!("exported: {metrics}"));
    // A counter: a small whole number.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let whole = moves as u64;
    whole
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_node_hands_a_database_to_an_idle_candidate() {
    let (fleet, address) = Fleet::filesystem_with_ingress(2, &["--load-balance-interval-ms", "1000"]).await;
    let dbs = two_on_node_1(&fleet, &address).await;
    let load = Load::start(&address, &dbs);

    eventually(
        Duration::from_mins(1),
        fleet.with_logs("one busy database moved to node-2"),
        async || {
            let owners = [owner(&address, &dbs[0]).await, owner(&address, &dbs[1]).await];
            if owners.contains(&"node-1".to_owned()) && owners.contains(&"node-2".to_owned()) {
                Ok(())
            } else {
                Err(format!("owners {owners:?}"))
            }
        },
    )
    .await;
    assert_eq!(load_moves(&fleet, 0).await, 1);

    // Explained in node-1's status: which database, where, and the figures.
    let run = corium_fleet_tests::cli::run(&["status", "--json"], &address).await;
    let status: Value =
        serde_json::from_str(&run.stdout).unwrap_or_else(|error| panic!("{error}: {}", run.stderr));
    let node_1 = status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|node| node["node_id"] == "node-1"))
        .unwrap_or_else(|| panic!("node-1 listed: {status:#}"));
    let moved = &node_1["load_moves"][0];
    assert_eq!(moved["to"], "node-2", "{node_1:#}");
    assert!(dbs.iter().any(|db| moved["database"] == db.as_str()), "{moved:#}");
    assert!(
        moved["reason"]
            .as_str()
            .is_some_and(|reason| reason.contains("above the fleet mean")),
        "{moved:#}"
    );
    assert!(
        node_1["calls_per_second"].as_f64().is_some_and(|rate| rate > 0.0),
        "{node_1:#}"
    );

    // Balanced now: five more intervals under the same load move nothing
    // back (each node is within the band, and a move must narrow the gap).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let owners = [owner(&address, &dbs[0]).await, owner(&address, &dbs[1]).await];
    assert!(
        owners.contains(&"node-1".to_owned()) && owners.contains(&"node-2".to_owned()),
        "{owners:?}"
    );
    assert_eq!(load_moves(&fleet, 0).await + load_moves(&fleet, 1).await, 1);
    load.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_prints_the_move_and_moves_nothing() {
    let (fleet, address) = Fleet::filesystem_with_ingress(
        2,
        &["--load-balance", "false", "--load-balance-interval-ms", "1000"],
    )
    .await;
    let dbs = two_on_node_1(&fleet, &address).await;
    let load = Load::start(&address, &dbs);

    let refused = corium_fleet_tests::cli::run(&["rebalance"], &address).await;
    assert!(
        !refused.success && refused.stderr.contains("--dry-run"),
        "{refused:?}"
    );
    eventually(
        Duration::from_secs(30),
        "the dry run plans a move of a busy database to node-2",
        async || {
            let run = corium_fleet_tests::cli::run(&["rebalance", "--dry-run", "--json"], &address).await;
            let plan: Value =
                serde_json::from_str(&run.stdout).map_err(|error| format!("{error}: {}", run.stderr))?;
            match plan["moves"].as_array().map(Vec::as_slice) {
                Some([planned])
                    if planned["from"] == "node-1"
                        && planned["to"] == "node-2"
                        && dbs.iter().any(|db| planned["database"] == db.as_str()) =>
                {
                    Ok(())
                }
                _ => Err(format!("{plan:#}")),
            }
        },
    )
    .await;
    let text = corium_fleet_tests::cli::run(&["rebalance", "--dry-run"], &address).await;
    assert!(
        text.success && text.stdout.contains("would move") && text.stdout.contains("above the band"),
        "{text:?}"
    );
    // Off: nothing moved.
    for db in &dbs {
        assert_eq!(owner(&address, db).await, "node-1");
    }
    assert_eq!(load_moves(&fleet, 0).await, 0);
    load.stop().await;
}

/// A fleet where no move would help makes none: one hot database alone (a
/// move would only carry its heat along), then two busy databases on two
/// nodes (balanced) — 50 intervals each (a 200 ms interval here: at the
/// default 10 s, over 8 minutes each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_move_where_none_helps() {
    let (fleet, address) = Fleet::filesystem_with_ingress(2, &["--load-balance-interval-ms", "200"]).await;
    let on = |index: usize| {
        (0..1_000)
            .map(|n| format!("steady-{n}"))
            .find(|db| fleet.candidates(db)[0] == index)
            .unwrap()
    };
    let (hot, other) = (on(0), on(1));
    for db in [&hot, &other] {
        corium::create(&address, db).await.unwrap();
    }
    let alone = Load::start(&address, std::slice::from_ref(&hot));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(owner(&address, &hot).await, "node-1");
    let both = Load::start(&address, std::slice::from_ref(&other));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        (owner(&address, &hot).await, owner(&address, &other).await),
        ("node-1".to_owned(), "node-2".to_owned())
    );
    assert_eq!(load_moves(&fleet, 0).await + load_moves(&fleet, 1).await, 0);
    alone.stop().await;
    both.stop().await;
}
