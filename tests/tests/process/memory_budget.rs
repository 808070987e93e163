//! The memory budget over real nodes (`--memory-budget-mib`). The policy
//! (which of these tests pass `--memory-measure datoms`, the deterministic
//! estimate, so that their sizes say exactly when a node is past its
//! budget): idle
//! databases are evicted when the node is past its budget, a database too
//! large for the budget is refused `RESOURCE_EXHAUSTED` naming it and the
//! budget while a small one beside it is served, and the budget, the node's
//! use and each database's estimate are in `corium-fleet status --json`.
//! Over two nodes: a busy node past its budget hands its largest database
//! to a candidate with room for it, sends an activation it has no room for
//! to a candidate with room, and only when every candidate is full is the
//! activation refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use corium_fleet_tests::{Fleet, corium, eventually, http_get, metric};
use serde_json::Value;
use tonic::Code;

/// Just over the node's fixed base estimate (40 MiB, `host/memory.rs`): a
/// database whose schema is all it holds fits; one of a few hundred
/// transactions does not.
const BUDGET_MIB: u64 = 41;

#[tokio::test]
async fn a_node_keeps_its_memory_budget() {
    let (fleet, address) =
        Fleet::filesystem_with_ingress(1, &["--memory-budget-mib", "41", "--memory-measure", "datoms"]).await;
    corium::create(&address, "small").await.unwrap();
    corium::create(&address, "big").await.unwrap();
    corium::transact(&address, "small", "first", &[]).await.unwrap();
    // ~3 datoms per transaction at the estimate's 6,000 bytes each: past the
    // 1 MiB above the base within a few hundred. A single node has no
    // candidate to hand the busy database to, so its writes are refused
    // from there on, naming it and the budget.
    let mut refused = None;
    for n in 0..400 {
        match corium::transact(&address, "big", &format!("item-{n}"), &[]).await {
            Ok(_) => {}
            Err(status) => {
                refused = Some(status);
                break;
            }
        }
    }
    let refused = refused.expect("writes past the budget are refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("writes to \"big\"")
            && refused.message().contains("of 41 MiB")
            && refused.message().contains("node-1"),
        "{}",
        refused.message()
    );

    // Past the budget, and nothing in use: the budget's loop evicts idle
    // databases (after 5 s idle), least recently used first, until the
    // estimate is under the budget — which takes the big one.
    let admin = fleet.nodes[0].admin;
    eventually(
        Duration::from_secs(30),
        fleet.with_logs("the big database evicted for memory"),
        async || {
            let run = corium_fleet_tests::cli::run(&["status", "--json"], &address).await;
            let status: Value =
                serde_json::from_str(&run.stdout).map_err(|error| format!("{error}: {}", run.stderr))?;
            let owned = status["nodes"][0]["owned_databases"].clone();
            if owned
                .as_array()
                .is_some_and(|owned| owned.iter().any(|db| db == "big"))
            {
                Err(format!("still owned: {owned}"))
            } else {
                Ok(())
            }
        },
    )
    .await;
    let metrics = http_get(admin, "/metrics").await.unwrap().1;
    assert!(
        metric(&metrics, "corium_fleet_memory_evictions_total").is_some_and(|evicted| evicted >= 1.0),
        "{metrics}"
    );

    // Opened again, the big database alone is past the budget: refused, with
    // words that name it and the budget; asked again, refused without an open.
    for attempt in 0..2 {
        let refused = corium::transact(&address, "big", &format!("again-{attempt}"), &[])
            .await
            .expect_err("a database larger than the budget is refused");
        assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
        assert!(
            refused.message().contains("\"big\"") && refused.message().contains("memory budget of 41 MiB"),
            "{}",
            refused.message()
        );
    }
    let metrics = http_get(admin, "/metrics").await.unwrap().1;
    assert_eq!(
        metric(&metrics, "corium_fleet_memory_budget_bytes"),
        Some(f64::from(u32::try_from(BUDGET_MIB << 20).unwrap()))
    );
    assert!(metric(&metrics, "corium_fleet_memory_refusals_total").is_some_and(|refused| refused >= 2.0));

    // The small database beside it is served.
    corium::transact(&address, "small", "second", &[]).await.unwrap();

    let run = corium_fleet_tests::cli::run(&["status", "--json"], &address).await;
    assert!(run.success, "{}", run.stderr);
    let status: Value = serde_json::from_str(&run.stdout).unwrap();
    let node = &status["nodes"][0];
    assert_eq!(node["memory_budget_bytes"], BUDGET_MIB << 20, "{node:#}");
    assert!(
        node["memory_used_bytes"]
            .as_u64()
            .is_some_and(|used| used >= 40 << 20),
        "{node:#}"
    );
    assert!(
        node["memory_resident_bytes"]
            .as_u64()
            .is_some_and(|resident| resident > 0),
        "{node:#}"
    );
    let small = node["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|db| db["database"] == "small")
        .unwrap_or_else(|| panic!("small listed: {node:#}"));
    assert!(
        small["memory_bytes"].as_u64().is_some_and(|bytes| bytes > 0),
        "{small:#}"
    );
}

/// Room above the base estimate in [`two_nodes_share_the_memory`]: 8 MiB,
/// about 460 transactions of three datoms at the estimate's 6,000 bytes a
/// datom (`host/memory.rs`).
const SHARED_BUDGET_MIB: &str = "48";

/// Transactions that take ~4.3 MiB of estimate: two such databases are
/// past one node's 8 MiB of room, one fits beside the base.
const HALF: usize = 250;

/// Writes `count` items to `db` through `address`.
async fn write(address: &str, db: &str, tag: &str, count: usize) {
    for n in 0..count {
        corium::transact(address, db, &format!("{tag}-{n}"), &[])
            .await
            .unwrap_or_else(|status| panic!("{db} write {n}: {status:?}"));
    }
}

/// The node owning `db`, as the ingress at `address` reads it.
async fn owner(address: &str, db: &str) -> String {
    corium::placement(address, db).await.owner_id
}

/// Creates `db` through `address`, writes `item` to it, and asserts that
/// node-2 owns it then.
async fn assert_opens_at_node_2(fleet: &Fleet, address: &str, db: &str, item: &str) {
    corium::create(address, db).await.unwrap();
    corium::transact(address, db, item, &[]).await.unwrap();
    assert_eq!(
        owner(address, db).await,
        "node-2",
        "{}",
        fleet.with_logs(format!("{db} at node-2"))
    );
}

/// A database name starting `tag` whose first candidate is node `index`.
fn first_at(fleet: &Fleet, index: usize, tag: &str) -> String {
    (0..1_000)
        .map(|n| format!("{tag}-{n}"))
        .find(|db| fleet.candidates(db)[0] == index)
        .expect("about half of all names rank node-1 first")
}

/// The memory counters of node `index`'s `/metrics`.
async fn memory_counter(fleet: &Fleet, index: usize, name: &str) -> f64 {
    let metrics = http_get(fleet.nodes[index].admin, "/metrics").await.unwrap().1;
    metric(&metrics, name).unwrap_or_else(|| panic!("{name} exported: {metrics}"))
}

/// Node `index` in `corium-fleet status --json` through `address`.
async fn node_status(address: &str, index: usize) -> Result<Value, String> {
    let run = corium_fleet_tests::cli::run(&["status", "--json"], address).await;
    let status: Value =
        serde_json::from_str(&run.stdout).map_err(|error| format!("{error}: {}", run.stderr))?;
    status["nodes"]
        .as_array()
        .and_then(|nodes| {
            nodes
                .iter()
                .find(|node| node["node_id"] == format!("node-{}", index + 1))
        })
        .cloned()
        .ok_or_else(|| format!("no node-{} in {status}", index + 1))
}

/// Whether `status --json` shows node `index` past its budget.
async fn over_budget(address: &str, index: usize) -> Result<(), String> {
    let node = node_status(address, index).await?;
    match (
        node["memory_used_bytes"].as_u64(),
        node["memory_budget_bytes"].as_u64(),
    ) {
        (Some(used), Some(budget)) if used > budget => Ok(()),
        _ => Err(format!("not over its budget: {node}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_the_memory() {
    let (fleet, address) = Fleet::filesystem_with_ingress(
        2,
        &[
            "--memory-budget-mib",
            SHARED_BUDGET_MIB,
            "--memory-measure",
            "datoms",
            // The policy alone: no cache (hot or warm standbys) comes and
            // goes beside the databases whose sizes the steps count on.
            "--hot-standbys",
            "0",
            "--warm-standby-mib",
            "0",
        ],
    )
    .await;
    let first = first_at(&fleet, 0, "first");
    let second = first_at(&fleet, 0, "second");
    let spill = first_at(&fleet, 0, "spill");
    for db in [&first, &second] {
        corium::create(&address, db).await.unwrap();
    }

    // Two busy databases on node-1: neither is ever idle long enough to be
    // evicted.
    let busy = KeepBusy::start(&address, [first.clone(), second.clone()]);
    write(&address, &first, "a", HALF).await;
    write(&address, &second, "b", HALF).await;

    // Past its budget with nothing idle, node-1 hands its largest database to
    // node-2, which has room for it.
    eventually(
        Duration::from_mins(1),
        fleet.with_logs("a busy database handed to node-2 for memory"),
        async || {
            let owners = [owner(&address, &first).await, owner(&address, &second).await];
            if owners.iter().any(|owner| owner == "node-2") {
                Ok(())
            } else {
                Err(format!("owners {owners:?}"))
            }
        },
    )
    .await;
    assert!(memory_counter(&fleet, 0, "corium_fleet_memory_handoffs_total").await >= 1.0);
    let (moved, stayed) = if owner(&address, &first).await == "node-2" {
        (&first, &second)
    } else {
        (&second, &first)
    };
    assert_eq!(owner(&address, stayed).await, "node-1");

    // The one that stayed grows past node-1's budget again; node-2 has no
    // room for it now (it would hand it back), so it stays, over budget, and
    // its writes are refused.
    let refused = write_until_refused(&address, stayed, "c").await;
    assert!(
        refused.message().contains(&format!("writes to {stayed:?}")),
        "{}",
        refused.message()
    );
    eventually(Duration::from_secs(30), "node-1 past its budget", async || {
        over_budget(&address, 0).await
    })
    .await;
    assert_eq!(
        owner(&address, stayed).await,
        "node-1",
        "no room for it at node-2"
    );

    // A new database, and a new activation at node-1 (a create opens the
    // database at its first candidate), go to node-2, which has room.
    assert_opens_at_node_2(&fleet, &address, &spill, "spilled").await;
    assert!(memory_counter(&fleet, 0, "corium_fleet_memory_redirects_total").await >= 1.0);

    // node-2 fills up too, and node-1 has no room for its databases: writes
    // to them are refused, naming the database and the budget, while the
    // databases stay where they are.
    let refused = write_until_refused(&address, moved, "d").await;
    assert!(
        refused.message().contains(&format!("writes to {moved:?}"))
            && refused.message().contains("node node-2")
            && refused.message().contains(&format!("of {SHARED_BUDGET_MIB} MiB")),
        "{}",
        refused.message()
    );
    assert_eq!(owner(&address, moved).await, "node-2");
    busy.stop().await;
}

/// Writes items `{tag}-N` to `db` until the fleet refuses one for memory
/// (at most 2,000 items); that refusal.
async fn write_until_refused(address: &str, db: &str, tag: &str) -> tonic::Status {
    for n in 0..2_000 {
        match corium::transact(address, db, &format!("{tag}-{n}"), &[]).await {
            Ok(_) => {}
            Err(status) if status.code() == Code::ResourceExhausted => return status,
            Err(status) => panic!("{db} write {n}: {status:?}"),
        }
    }
    panic!("{db}: 2,000 writes and none refused")
}

/// A node's warm standbys are a cache: they fill at most half the room its
/// firm memory leaves under the budget, never make the node look full to
/// its peers or to `status`, and a database activated there is taken, not
/// sent away or refused. (Before they were told apart, the warm set had its
/// own 64 MiB and made a node with 1 MiB of room publish "over budget".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_standbys_never_make_a_node_look_full() {
    let (fleet, address) = Fleet::filesystem_with_ingress(
        2,
        &[
            "--memory-budget-mib",
            "41",
            "--memory-measure",
            "datoms",
            "--warm-standby-interval-ms",
            "200",
        ],
    )
    .await;
    let kept_warm = first_at(&fleet, 0, "warm");
    corium::create(&address, &kept_warm).await.unwrap();
    // ~4 MB of log in 20 transactions: four times node-2's whole room (the
    // 1 MiB over its base), a few hundred KiB of estimate at node-1.
    let long = "x".repeat(200_000);
    for n in 0..20 {
        corium::transact(&address, &kept_warm, &format!("{n}-{long}"), &[])
            .await
            .unwrap_or_else(|status| panic!("write {n}: {status:?}"));
    }
    eventually(
        Duration::from_secs(30),
        fleet.with_logs("node-2 keeps the database warm"),
        async || match memory_counter(&fleet, 1, "corium_fleet_warm_standby_bytes").await {
            bytes if bytes > 0.0 => Ok(()),
            _ => Err("nothing warm yet".to_owned()),
        },
    )
    .await;
    // Ten refresh intervals: never past half the room, never over.
    let budget = memory_counter(&fleet, 1, "corium_fleet_memory_budget_bytes").await;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let warm = memory_counter(&fleet, 1, "corium_fleet_warm_standby_bytes").await;
        let firm = memory_counter(&fleet, 1, "corium_fleet_memory_firm_bytes").await;
        let used = memory_counter(&fleet, 1, "corium_fleet_memory_used_bytes").await;
        assert!(
            warm <= (budget - firm) / 2.0,
            "{warm} warm bytes past half of the {} left",
            budget - firm
        );
        assert!(
            used <= budget,
            "node-2 over its budget from its cache: {used} > {budget}"
        );
    }
    let node = node_status(&address, 1).await.unwrap();
    assert!(over_budget(&address, 1).await.is_err(), "{node}");
    assert!(
        node["memory_cache_bytes"].as_u64().is_some_and(|bytes| bytes > 0),
        "{node}"
    );

    // A database whose first candidate is node-2 opens there.
    let fresh = first_at(&fleet, 1, "fresh");
    assert_opens_at_node_2(&fleet, &address, &fresh, "first").await;
    let refused_or_sent = memory_counter(&fleet, 1, "corium_fleet_memory_refusals_total").await
        + memory_counter(&fleet, 1, "corium_fleet_memory_redirects_total").await;
    assert!(
        refused_or_sent < 0.5,
        "{refused_or_sent} refused or sent away for memory"
    );
}

/// Writes to `dbs` through `address` every 300 ms (a call each), so none
/// of them is ever idle, until stopped.
struct KeepBusy {
    busy: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeepBusy {
    fn start(address: &str, dbs: [String; 2]) -> Self {
        let busy = Arc::new(AtomicBool::new(true));
        let (running, address) = (Arc::clone(&busy), address.to_owned());
        let task = tokio::spawn(async move {
            // Bounded: stopped before the test ends; at most 10 minutes.
            for n in 0..2_000 {
                if !running.load(Ordering::Relaxed) {
                    break;
                }
                for db in &dbs {
                    let _ = corium::transact(&address, db, &format!("busy-{n}"), &[]).await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        Self { busy, task }
    }

    async fn stop(self) {
        self.busy.store(false, Ordering::Relaxed);
        self.task.await.unwrap();
    }
}

/// The small budget of [`a_write_load_over_many_databases_stays_within_a_small_budget`].
const SMALL_BUDGET_MIB: u64 = 52;

/// Items per database in that test: ~10.8 MiB of estimate each, so one
/// wave of three (~32 MiB) is already more than both nodes' room (2 × 12
/// MiB).
const WAVE_ITEMS: usize = 600;

/// Commits item `name` to `db` through `address`, sending it again while
/// the fleet refuses it for memory (`RESOURCE_EXHAUSTED`: refused before
/// any work, so a resend cannot commit it twice), for at most a minute.
async fn write_acknowledged(address: &str, db: &str, name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    loop {
        match corium::transact(address, db, name, &[]).await {
            Ok(_) => return,
            Err(status)
                if status.code() == Code::ResourceExhausted && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("{db} {name}: {status:?}"),
        }
    }
}

/// Creates `db` through `address`, asking again while the fleet refuses it
/// for memory, for at most a minute.
async fn create_acknowledged(address: &str, db: &str) {
    let deadline = std::time::Instant::now() + Duration::from_mins(1);
    loop {
        match corium::create(address, db).await {
            Ok(created) => {
                assert!(created, "{db} created");
                return;
            }
            Err(status)
                if status.code() == Code::ResourceExhausted && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => panic!("create {db}: {status:?}"),
        }
    }
}

/// The peak resident set of process `pid`, in bytes (`VmHWM`).
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap();
    kib * 1024
}

/// Six databases written in two waves over two nodes whose budgets hold
/// fewer than all of them: every write is acknowledged exactly once, no node
/// restarts, and each node's peak resident set stays within the issue's
/// bound (1.25 × budget + 64 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_load_over_many_databases_stays_within_a_small_budget() {
    let (fleet, address) = Fleet::filesystem_with_ingress(
        2,
        &[
            "--memory-budget-mib",
            &SMALL_BUDGET_MIB.to_string(),
            "--memory-measure",
            "datoms",
        ],
    )
    .await;
    let pids: Vec<u32> = fleet.nodes.iter().map(|node| node.pid().unwrap()).collect();
    let dbs: Vec<String> = (0..6).map(|n| format!("wave-{n}")).collect();
    // Two waves of three databases created and written at once: the second
    // wave finds the nodes full of the first, idle but not yet for long
    // enough to be evicted, and waits for room.
    for wave in dbs.chunks(3) {
        for db in wave {
            create_acknowledged(&address, db).await;
        }
        let writers: Vec<_> = wave
            .iter()
            .map(|db| {
                let (address, db) = (address.clone(), db.clone());
                tokio::spawn(async move {
                    for n in 0..WAVE_ITEMS {
                        write_acknowledged(&address, &db, &format!("{db}-{n}")).await;
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
    }
    // Every item once, read back through the fleet (each read opens its
    // database where there is room, once the last wave has gone idle).
    for db in &dbs {
        let log = eventually(
            Duration::from_mins(1),
            format!("{db} opened again to be read"),
            async || match corium::log(&address, db).await {
                Ok(log) => Ok(log),
                Err(status) if status.code() == Code::ResourceExhausted => Err(format!("{status:?}")),
                Err(status) => panic!("{db}: {status:?}"),
            },
        )
        .await;
        let mut names: Vec<String> = log.into_iter().flat_map(|(_, names)| names).collect();
        names.sort();
        let mut expected: Vec<String> = (0..WAVE_ITEMS).map(|n| format!("{db}-{n}")).collect();
        expected.sort();
        assert_eq!(names, expected, "{db}: every write exactly once");
    }
    // The budget was at work: idle databases evicted, activations sent
    // elsewhere or refused until there was room.
    let mut pressure = 0.0;
    for index in 0..fleet.nodes.len() {
        for counter in [
            "corium_fleet_memory_evictions_total",
            "corium_fleet_memory_redirects_total",
            "corium_fleet_memory_refusals_total",
            "corium_fleet_memory_handoffs_total",
        ] {
            pressure += memory_counter(&fleet, index, counter).await;
        }
    }
    assert!(pressure >= 1.0, "{}", fleet.with_logs("no memory pressure seen"));
    let bound = SMALL_BUDGET_MIB * 5 / 4 + 64;
    for (node, pid) in fleet.nodes.iter().zip(&pids) {
        assert_eq!(node.pid(), Some(*pid), "{} restarted", node.id);
        let peak_mib = peak_rss(*pid) >> 20;
        assert!(
            peak_mib <= bound,
            "{}: peak RSS {peak_mib} MiB past {bound} MiB",
            node.id
        );
    }
}

/// The budget of [`writes_past_every_budget_are_refused_until_memory_returns`],
/// measured by the allocator.
const MEASURED_BUDGET_MIB: u64 = 128;

/// What one writer of that test did: the items acknowledged, and the
/// refusals it met.
#[derive(Default)]
struct Written {
    acked: Vec<String>,
    refusals: Vec<tonic::Status>,
}

/// Writes ~4 KiB items to `db` through `address` until `stop` (or 20,000
/// items): each acknowledged name, and each `RESOURCE_EXHAUSTED` refusal.
async fn write_until(address: String, db: String, stop: Arc<AtomicBool>) -> Written {
    let mut written = Written::default();
    for n in 0..20_000 {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let name = format!("{db}-{n}-{}", "m".repeat(4 * 1024));
        match corium::transact(&address, &db, &name, &[]).await {
            Ok(_) => written.acked.push(name),
            Err(status) if status.code() == Code::ResourceExhausted => {
                written.refusals.push(status);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("{db} write {n}: {status:?}"),
        }
    }
    written
}

/// Every name of `acked` is in `db`'s log, once.
async fn assert_kept(address: &str, db: &str, acked: &[String]) {
    let log = corium::log(address, db).await.unwrap();
    let names: Vec<&String> = log.iter().flat_map(|(_, names)| names).collect();
    for name in acked {
        assert_eq!(
            names.iter().filter(|logged| **logged == name).count(),
            1,
            "{db}: {} once",
            &name[..20]
        );
    }
}

/// Each node's peak resident set is within 1.25 × budget + 64 MiB, and its
/// measure within 20 % of its resident set.
async fn assert_bounded(fleet: &Fleet, address: &str) {
    let limit = (MEASURED_BUDGET_MIB * 5 / 4 + 64) << 20;
    for (index, node) in fleet.nodes.iter().enumerate() {
        let peak = peak_rss(node.pid().expect("running"));
        assert!(
            peak <= limit,
            "node-{} peaked at {} MiB > {} MiB\n{}",
            index + 1,
            peak >> 20,
            limit >> 20,
            fleet.logs()
        );
        let status = node_status(address, index).await.unwrap();
        let (used, resident) = (
            status["memory_used_bytes"].as_f64().unwrap(),
            status["memory_resident_bytes"].as_f64().unwrap(),
        );
        assert!(
            (used - resident).abs() <= resident * 0.2,
            "node-{}: measured {used} vs resident {resident}",
            index + 1
        );
        // and `status` reports that error to its readers
        let reported = status["memory_estimate_error_percent"].as_f64();
        let error = (used - resident) / resident * 100.0;
        assert!(
            reported.is_some_and(|reported| (reported - error).abs() < 0.1),
            "node-{}: status reports an estimate error of {reported:?}, not {error:.1} %",
            index + 1
        );
    }
}

/// Writes that outgrow every node's budget, measured by the allocator (the
/// default): four busy databases over two nodes of 96 MiB. Past its budget
/// a node hands its largest database to a candidate with room; with room
/// nowhere, writes are refused `RESOURCE_EXHAUSTED` naming the database, its
/// size, the node and the budget, while reads go on. Every acknowledged
/// write is kept, each node's peak resident set stays within 1.25 × budget
/// + 64 MiB, each node's measure is within 20 % of its resident set, and
/// once a database is deleted, writes are admitted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_every_budget_are_refused_until_memory_returns() {
    let (fleet, address) =
        Fleet::filesystem_with_ingress(2, &["--memory-budget-mib", &MEASURED_BUDGET_MIB.to_string()]).await;
    let dbs: Vec<String> = (0..4).map(|n| format!("busy-{n}")).collect();
    for db in &dbs {
        corium::create(&address, db).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = dbs
        .iter()
        .map(|db| tokio::spawn(write_until(address.clone(), db.clone(), Arc::clone(&stop))))
        .collect();
    // Until every writer meets refusals: no node has room left.
    let metrics_of = |index: usize| {
        let admin = fleet.nodes[index].admin;
        async move {
            http_get(admin, "/metrics")
                .await
                .map(|(_, text)| text)
                .unwrap_or_default()
        }
    };
    eventually(
        Duration::from_mins(3),
        fleet.with_logs("writes refused once no node has room"),
        async || {
            let refused: f64 = [metrics_of(0).await, metrics_of(1).await]
                .iter()
                .map(|text| metric(text, "corium_fleet_memory_write_refusals_total").unwrap_or(0.0))
                .sum();
            if refused >= 8.0 {
                Ok(())
            } else {
                Err(format!("{refused} refusals so far"))
            }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let mut written = Vec::new();
    for writer in writers {
        written.push(writer.await.unwrap());
    }
    let refusal = written
        .iter()
        .flat_map(|written| &written.refusals)
        .rfind(|status| status.message().contains("are refused until memory is freed"))
        .unwrap_or_else(|| {
            panic!(
                "a write refusal: {:?}",
                written.iter().map(|w| &w.refusals).collect::<Vec<_>>()
            )
        });
    let message = refusal.message().to_owned();
    let refused = dbs
        .iter()
        .position(|db| message.contains(&format!("writes to {db:?}")))
        .unwrap_or_else(|| panic!("the refusal names a database: {message}"));
    assert!(
        message.contains("over its memory budget")
            && message.contains(&format!("of {MEASURED_BUDGET_MIB} MiB"))
            && message.contains("node-")
            && message.contains("MiB here"),
        "{message}"
    );
    // Reads go on: the database whose write was refused answers a read.
    let read = corium::log(&address, &dbs[refused])
        .await
        .expect("a read while writes are refused");
    assert!(!read.is_empty());
    assert_bounded(&fleet, &address).await;
    // Two other databases deleted free their nodes' memory: writes are
    // admitted again, and every write acknowledged to the two kept is there.
    let mut catalog =
        corium_protocol::pb::catalog_client::CatalogClient::new(corium::channel(&address).await);
    let others: Vec<usize> = (0..dbs.len()).filter(|index| *index != refused).collect();
    for &index in &others[..2] {
        catalog
            .delete_database(corium_protocol::pb::DeleteDatabaseRequest {
                db: dbs[index].clone(),
            })
            .await
            .unwrap();
    }
    let kept = [refused, others[2]];
    eventually(
        Duration::from_mins(1),
        fleet.with_logs("writes admitted again once memory returned"),
        async || {
            for &index in &kept {
                corium::transact(&address, &dbs[index], "after-the-delete", &[])
                    .await
                    .map_err(|status| format!("{}: {status:?}", dbs[index]))?;
            }
            Ok::<(), String>(())
        },
    )
    .await;
    for index in kept {
        assert_kept(&address, &dbs[index], &written[index].acked).await;
    }
}
