//! What idle databases cost a node (issue 48): once a database has been
//! idle past `--idle-evict-after-ms` it holds no lease, no timer and no
//! task, so a node's idle CPU and its storage requests do not grow with
//! how many databases it has served. Measured by the node's own CPU time
//! (`/proc/PID/stat`, not wall time) and its root operations
//! (`/debug/root-ops`), at 100 databases and again at 2,500.

use std::collections::BTreeMap;
use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium, eventually, http_get};
use futures::StreamExt as _;

/// The idle window each count is measured over.
const WINDOW: Duration = Duration::from_secs(6);

/// utime + stime of `pid`, in clock ticks (10 ms).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// Root operations (reads + writes) the node has made, every database.
async fn root_ops(admin: u16) -> u64 {
    let (_, body) = http_get(admin, "/debug/root-ops").await.unwrap();
    let parsed: BTreeMap<String, serde_json::Value> = serde_json::from_str(&body).unwrap();
    parsed
        .values()
        .map(|ops| ops["reads"].as_u64().unwrap_or(0) + ops["writes"].as_u64().unwrap_or(0))
        .sum()
}

/// Creates and writes once each of `names` through `address`, 16 at once.
async fn create_and_write(address: &str, names: &[String]) {
    futures::stream::iter(names)
        .for_each_concurrent(16, |name| async move {
            corium::create(address, name).await.unwrap();
            corium::transact(address, name, "first", &[]).await.unwrap();
        })
        .await;
}

/// Waits until the node holds no database, then measures its CPU (per cent
/// of one core) and root operations over [`WINDOW`].
async fn idle_cost(fleet: &Fleet, count: usize) -> (f64, u64) {
    let node = &fleet.nodes[0];
    eventually(
        Duration::from_mins(1),
        format!("all {count} databases evicted"),
        async || {
            let (_, metrics) = http_get(node.admin, "/metrics").await.unwrap();
            let owned = metrics
                .lines()
                .find_map(|line| line.strip_prefix("corium_fleet_databases_owned "))
                .unwrap_or("?")
                .to_owned();
            if owned == "0" {
                Ok(())
            } else {
                Err(format!("{owned} still owned"))
            }
        },
    )
    .await;
    // Let the evictions' own trailing work end (cells dropped, freed pages
    // returned by the allocator's 1 s decay) before the idle window starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = node.pid().expect("running");
    let (cpu, ops) = (cpu_ticks(pid), root_ops(node.admin).await);
    tokio::time::sleep(WINDOW).await;
    let (cpu, ops) = (cpu_ticks(pid) - cpu, root_ops(node.admin).await - ops);
    // a tick is 10 ms: ticks per second are per cent of a core
    #[allow(clippy::cast_precision_loss)]
    let percent = cpu as f64 / WINDOW.as_secs_f64();
    (percent, ops)
}

/// 100 databases, then 2,500, each written once and left idle past a 1 s
/// idle eviction: the idle node's CPU at 2,500 is within a small margin of
/// its CPU at 100 (a per-database timer, renewal or listing would multiply
/// it by 25), and it makes no more root operations while idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_nodes_cost_does_not_grow_with_its_databases() {
    let mut fleet = Fleet::builder(Backend::Filesystem)
        .nodes(1)
        .node_flags(&["--idle-evict-after-ms", "1000"])
        .start()
        .await;
    fleet.start_ingresses(1, &[]).await;
    let address = fleet.ingresses[0].endpoint();
    let names: Vec<String> = (0..2_500).map(|n| format!("idle-{n}")).collect();
    create_and_write(&address, &names[..100]).await;
    let (cpu_few, ops_few) = idle_cost(&fleet, 100).await;
    create_and_write(&address, &names[100..]).await;
    let (cpu_many, ops_many) = idle_cost(&fleet, 2_500).await;
    let seen = format!(
        "idle CPU {cpu_few:.1} % of a core at 100 databases, {cpu_many:.1} % at 2,500; \
         root operations {ops_few} and {ops_many} over {WINDOW:?}"
    );
    assert!(
        cpu_many <= cpu_few * 2.0 + 3.0,
        "{}",
        fleet.with_logs(seen.clone())
    );
    assert!(ops_many <= ops_few, "{}", fleet.with_logs(seen.clone()));
    // and they are all still there: a call wakes any of them
    for name in [&names[0], &names[1_234], &names[2_499]] {
        corium::transact(&address, name, "again", &[]).await.unwrap();
    }
    eprintln!("{seen}");
}
