//! `corium-fleet-bench`: Corium Fleet's benchmarks, each figure against its
//! baseline measured in the same run, written as a table and as JSON.
//!
//! - `real-path`: `Transact` direct to the owner vs through the ingress,
//!   with and without request ids, at concurrency 1 and 16;
//! - `failover`: SIGKILL → first commit, handoff and drain write gaps;
//! - `activation`: cold vs hot requests, memory per hot/cold database,
//!   root-store operations with few databases active among many;
//! - `recovery`: handoff unavailability against a database's history length;
//! - `moves`: SIGKILL takeover, handoff and SIGTERM drain under a steady
//!   writer, and a cold open, at 5,000, 50,000 and 200,000 transactions on
//!   each store, this build (hot standbys promoted in place) beside the
//!   previous release over the same database;
//! - `many-databases`: 1,000 and 10,000 small databases on three nodes:
//!   create and first-write rates, idle CPU per node, idle root operations,
//!   memory, reactivation latency, beside the previous release;
//! - `backup`: `corium-fleet backup` (full, then incremental) and `restore`
//!   of a 50,000-transaction database on each store, the copy read back
//!   whole, beside stock `corium backup`/`restore` (filesystem store);
//! - `replica-moves`: how soon after a handoff a read replica on a third
//!   node answers a read of a write made at the new owner, at 5,000, 50,000
//!   and 200,000 transactions, beside building that replica;
//! - `rebalance`: load-aware placement's time to even out six busy
//!   databases when an idle node is among their candidates;
//! - `history`: memory while written, cold open and handoff at 5,000,
//!   50,000 and 200,000 transactions, fleet against a stock `corium
//!   transactor` (filesystem store);
//! - `auth`: the ingress's per-call authentication and principal-envelope
//!   CPU, in-process;
//! - `drain`: SIGTERM of a node owning 500 databases on `PostgreSQL`, a
//!   roomy and a tight deadline;
//! - `tracing`: the ingress's per-call span and trace-context work, export
//!   off, on, and sampled at 10 %, in-process;
//! - `overload`: four times the fleet's capacity offered open-loop, with
//!   the node's shedding on and off: goodput and admitted latency;
//! - `scaling`: aggregate throughput over many databases, fleet with 1–3
//!   nodes against one stock `corium transactor` (filesystem store).
//! - `reads`: one hot database's query throughput with 1–3 read replica
//!   nodes beside a stock `corium peer-server`, and the owner's write p50
//!   with and without heavy reads (filesystem store).
//!
//! The ingress-vs-HAProxy/Envoy comparison is `scripts/bench/proxies.sh`.
//! `make bench` runs everything (release build, `PostgreSQL` on loopback).

mod load;
mod scenario;
mod stats;

use std::path::PathBuf;

use clap::Parser;
use corium_fleet_tests::Backend;

/// The JSON report: one entry per scenario and backend.
type Report = serde_json::Map<String, serde_json::Value>;

#[derive(Parser)]
#[command(
    name = "corium-fleet-bench",
    about = "Corium Fleet benchmarks (ratios inside one run)"
)]
struct Args {
    /// Scenarios to run: real-path, failover, activation, recovery, moves, many-databases, backup, history, replica-moves, rebalance, scaling, reads, owner-cache, auth, tracing, drain, overload, scale-model, or all.
    #[arg(default_value = "all")]
    scenarios: Vec<String>,
    /// `PostgreSQL` server URL (a fresh database is made per scenario); without
    /// it only the filesystem store is measured.
    #[arg(long, env = "CORIUM_FLEET_TEST_PG_URL")]
    postgres: Option<String>,
    /// S3 endpoint with conditional writes (`scripts/seaweedfs.sh` starts
    /// one; a fresh prefix is used per scenario); without it S3 is not
    /// measured.
    #[arg(long, env = "CORIUM_FLEET_TEST_S3_ENDPOINT")]
    s3: Option<String>,
    /// Rounds per figure (median and spread are reported).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Requests per round and path in `real-path`.
    #[arg(long, default_value_t = 2000)]
    requests: usize,
    /// Databases in `activation`.
    #[arg(long, default_value_t = 1000)]
    databases: usize,
    /// Seconds of offered load in `overload` (per run; capacity is measured
    /// for at most 10 s first).
    #[arg(long, default_value_t = 30)]
    overload_seconds: u64,
    /// Transactions of history in `backup` (2,000 with `--quick`).
    #[arg(long, default_value_t = 50_000)]
    backup_transactions: usize,
    /// Small sizes for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Measure only these stores (comma-separated: filesystem, postgres,
    /// s3); default every store configured.
    #[arg(long, value_delimiter = ',')]
    only_stores: Vec<String>,
    /// Where the JSON goes.
    #[arg(long, default_value = "target/bench/fleet.json")]
    out: PathBuf,
}

/// The backends to measure; `PostgreSQL` gets a fresh database per scenario.
/// A store the benchmarks run on.
enum Store {
    Filesystem,
    /// The `PostgreSQL` server's URL (a fresh database per fleet).
    Postgres(String),
    /// The S3 endpoint (a fresh prefix per fleet).
    S3(String),
}

impl Store {
    /// A fresh backend on this store for one fleet.
    fn backend(&self) -> Backend {
        match self {
            Self::Filesystem => Backend::Filesystem,
            Self::Postgres(url) => Backend::postgres(url),
            Self::S3(endpoint) => Backend::s3(endpoint),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Self::Filesystem => "filesystem",
            Self::Postgres(_) => "postgres",
            Self::S3(_) => "s3",
        }
    }
}

/// The filesystem store, and `PostgreSQL` and S3 when their servers are
/// given (`make bench` starts both).
fn stores(postgres: Option<&str>, s3: Option<&str>) -> Vec<Store> {
    let mut all = vec![Store::Filesystem];
    if let Some(url) = postgres {
        all.push(Store::Postgres(url.to_owned()));
    }
    if let Some(endpoint) = s3 {
        all.push(Store::S3(endpoint.to_owned()));
    }
    all
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.quick {
        args.rounds = 1;
        args.requests = args.requests.min(200);
        args.databases = args.databases.min(60);
        args.overload_seconds = args.overload_seconds.min(5);
        args.backup_transactions = args.backup_transactions.min(2_000);
    }
    let wants = |name: &str| args.scenarios.iter().any(|s| s == name || s == "all");
    let mut report = Report::new();
    report.insert("load_at_start".into(), stats::load().into());
    let mut backups = Vec::new();
    for store in stores(args.postgres.as_deref(), args.s3.as_deref()) {
        let (server, label) = (&store, store.label());
        if !args.only_stores.is_empty() && !args.only_stores.iter().any(|only| only == label) {
            continue;
        }
        if wants("real-path") {
            real_path(&args, server, label, &mut report).await?;
        }
        if wants("failover") {
            failover(&args, server, label, &mut report).await?;
        }
        if wants("owner-cache") {
            owner_cache(&args, server, label, &mut report).await?;
        }
        if wants("activation") {
            activation(&args, server, label, &mut report).await?;
        }
        if wants("recovery") {
            recovery(&args, server, label, &mut report).await?;
        }
        if wants("moves") {
            moves(&args, server, label, &mut report).await?;
        }
        if wants("many-databases") {
            many_databases(&args, server, label, &mut report).await?;
        }
        if wants("backup") {
            backups.push(scenario::backup::run(label, server.backend(), args.backup_transactions).await?);
        }
    }
    if !backups.is_empty() {
        scenario::backup::print(&backups);
        report.insert("backup".into(), serde_json::to_value(&backups)?);
    }
    if wants("history") {
        history(&args, &mut report).await?;
    }
    if wants("replica-moves") {
        replica_moves(&args, &mut report).await?;
    }
    if wants("rebalance") {
        rebalance(&mut report).await?;
    }
    if wants("auth") {
        auth_cost(&args, &mut report)?;
    }
    if wants("drain")
        && let Some(base) = args.postgres.as_deref()
    {
        let databases = if args.quick { 50 } else { 500 };
        let result = scenario::drain::run(base, databases).await;
        println!("\n== drain: SIGTERM of a node owning {databases} databases on PostgreSQL ==");
        println!(
            "{:>12} {:>10} {:>8} {:>9} {:>14}",
            "deadline ms", "exit ms", "handed", "released", "all back ms"
        );
        for run in &result.runs {
            println!(
                "{:>12} {:>10} {:>8} {:>9} {:>14}",
                run.deadline_ms, run.exit_ms, run.handed, run.released, run.all_back_ms
            );
        }
        report.insert("drain".into(), serde_json::to_value(&result)?);
    }
    if wants("tracing") {
        tracing_cost(&args, &mut report)?;
    }
    if wants("overload") {
        overload(&args, &mut report).await?;
    }
    if wants("scaling") {
        scaling(&args, &mut report).await?;
    }
    if wants("reads") {
        reads(&args, &mut report).await?;
    }
    if wants("scale-model") {
        scale_model(&args, &mut report).await?;
    }
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&args.out, serde_json::to_string_pretty(&report)?)?;
    println!("\nwrote {}", args.out.display());
    Ok(())
}

/// `auth`: the ingress's per-call authentication and principal envelope.
fn auth_cost(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::auth::run(args.rounds);
    let rows = [
        ("anonymous (stock default)", result.anonymous),
        ("development token (operator)", result.token),
        ("wrong token, strict (refused)", result.refused),
    ];
    cpu_table(
        "auth",
        "the ingress's per-call authentication + envelope,",
        args.rounds,
        &rows,
    );
    report.insert("auth".into(), serde_json::to_value(&result)?);
    Ok(())
}

/// `tracing`: the ingress's per-call span and trace-context work.
fn tracing_cost(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::tracing::run(args.rounds);
    let rows = [
        ("export off (the default)", result.off),
        ("export on, every trace sampled", result.sampled_all),
        ("export on, 10 % sampled", result.sampled_tenth),
    ];
    cpu_table(
        "tracing",
        "the ingress's per-call spans and trace context, process",
        args.rounds,
        &rows,
    );
    report.insert("tracing".into(), serde_json::to_value(&result)?);
    Ok(())
}

/// Prints an in-process CPU table: `what` per call, one row per variant.
fn cpu_table(name: &str, what: &str, rounds: usize, rows: &[(&str, stats::Spread)]) {
    println!("\n== {name}: {what} CPU ns per call, median (min–max) of {rounds} rounds ==");
    for (label, spread) in rows {
        println!("{label:<31}{spread}");
    }
}

/// `real-path`: `Transact` direct to the owner and through the ingress,
/// with and without request ids. Prints the table and adds the figures to
/// `report`.
async fn real_path(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::real_path::run(server.backend(), args.rounds, args.requests).await?;
    println!(
        "\n== real path ({label}): Transact, {} requests × {} rounds, median (min–max) ==",
        args.requests, args.rounds
    );
    println!(
        "{:<4} {:<11} {:>22} {:>22} {:>22}",
        "c", "path", "p50 µs", "p99 µs", "tx/s"
    );
    for row in &result.rows {
        println!(
            "{:<4} {:<11} {:>22} {:>22} {:>22}",
            row.concurrency,
            row.path,
            row.p50_us.to_string(),
            row.p99_us.to_string(),
            row.per_second.to_string()
        );
    }
    for c in [1, 16] {
        let find = |path: &str| {
            result
                .rows
                .iter()
                .find(|row| row.concurrency == c && row.path == path)
                .map(|row| row.p50_us.median)
        };
        if let (Some(direct), Some(ingress), Some(direct_id), Some(ingress_id)) = (
            find("direct"),
            find("ingress"),
            find("direct+id"),
            find("ingress+id"),
        ) {
            println!(
                "c={c}: ingress/direct p50 {:.2}×; request id cost at p50: direct {:+.1} %, ingress {:+.1} %",
                ingress / direct,
                (direct_id / direct - 1.0) * 100.0,
                (ingress_id / ingress - 1.0) * 100.0
            );
        }
    }
    println!(
        "one-hop share {:.4}, owner-cache hit rate {:.4}, load {}",
        result.one_hop_share, result.owner_cache_hit_rate, result.load
    );
    report.insert(format!("real_path_{label}"), serde_json::to_value(&result)?);
    Ok(())
}

/// `overload`: 4× capacity, shedding on and off. Prints the table and adds
/// the figures to `report`.
async fn overload(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::overload::run(args.overload_seconds).await?;
    println!(
        "\n== overload (filesystem, one node): capacity {:.0} tx/s (p99 {:.1} ms), then 4× offered open-loop for {} s, 2 s deadlines ==",
        result.capacity_per_second, result.capacity_p99_ms, result.seconds
    );
    println!(
        "{:<9} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10}",
        "shedding",
        "offered/s",
        "acked/s",
        "goodput",
        "refused",
        "late",
        "other",
        "unsent",
        "p50 ms",
        "p99 ms"
    );
    for run in &result.runs {
        println!(
            "{:<9} {:>10.0} {:>10.0} {:>7.0}% {:>10} {:>10} {:>8} {:>8} {:>10.1} {:>10.1}",
            if run.shedding { "on" } else { "off" },
            run.offered_per_second,
            run.acknowledged_per_second,
            run.goodput_ratio * 100.0,
            run.refused_with_hint,
            run.deadline_exceeded,
            run.other_errors,
            run.not_sent,
            run.acknowledged_p50_ms,
            run.acknowledged_p99_ms
        );
    }
    println!("load {}", result.load);
    report.insert("overload".into(), serde_json::to_value(&result)?);
    Ok(())
}

/// `failover`: SIGKILL → first commit, and the write gaps of a handoff and
/// a drain. Prints the table and adds the figures to `report`.
async fn failover(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let history = if args.quick { 1_000 } else { 16_000 };
    // The defaults, then the ingress's failover buffer off, then the nodes'
    // warm standbys off.
    for (variant, key, ingress_flags, node_flags) in [
        ("defaults", "buffer_on", &[][..], &[][..]),
        (
            "failover buffer off",
            "buffer_off",
            &["--failover-buffer-per-database", "0"][..],
            &[][..],
        ),
        (
            "warm standbys off",
            "warm_off",
            &[][..],
            &["--warm-standby-mib", "0"][..],
        ),
    ] {
        let result =
            scenario::failover::run(server.backend(), args.rounds, history, ingress_flags, node_flags)
                .await?;
        println!(
            "\n== failover ({label}, {variant}), {} transactions of history, lease TTL {} ms, {} repetitions, median (min–max) ms ==",
            result.history, result.lease_ttl_ms, args.rounds
        );
        println!(
            "SIGKILL → first commit through the ingress  {}",
            result.sigkill_to_commit_ms
        );
        println!(
            "takeover, the successor's recovery          {}",
            result.takeover_recovery_ms
        );
        println!(
            "handoff, owner-reported unavailability     {}",
            result.handoff_reported_ms
        );
        println!(
            "handoff, longest client gap                {}",
            result.handoff_client_gap_ms
        );
        println!(
            "SIGTERM drain, longest client gap          {}",
            result.drain_client_gap_ms
        );
        println!(
            "no event, longest client gap (baseline)    {}",
            result.quiet_client_gap_ms
        );
        let errors = &result.client_errors;
        println!(
            "client-visible errors (all repetitions), Transact with ids: SIGKILL {}, handoff {}, drain {}",
            errors.sigkill, errors.handoff, errors.drain
        );
        println!(
            "client-visible errors (all repetitions), Sync without ids: SIGKILL {}, handoff {}, drain {}",
            errors.sync_sigkill, errors.sync_handoff, errors.sync_drain
        );
        println!("load {}", result.load);
        report.insert(format!("failover_{label}_{key}"), serde_json::to_value(&result)?);
    }
    Ok(())
}

/// `owner-cache`: the ingress's owner cache, its hit rate steady and under
/// churn, and the storage reads of a cold burst. Prints the table and adds
/// the figures to `report`.
async fn owner_cache(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::owner_cache::run(server.backend(), args.rounds).await?;
    let share = |spread: stats::Spread| format!("{:.4} ({:.4}–{:.4})", spread.median, spread.min, spread.max);
    println!(
        "\n== owner cache ({label}): {} databases through one ingress, 3 s per phase, {} rounds, median (min–max) ==",
        result.databases, args.rounds
    );
    println!(
        "hit rate, owners steady                   {}",
        share(result.steady_hit_rate)
    );
    println!(
        "hit rate, an owner moving every 250 ms    {}  ({} handoffs, {} stale entries found, one-hop share {}, {} errors in {} requests)",
        share(result.churn_hit_rate),
        result.churn_handoffs,
        result.churn_stale,
        share(result.churn_one_hop_share),
        result.churn_errors,
        result.churn_requests
    );
    println!(
        "storage reads for a burst of {} requests to an unseen database: {}",
        result.burst_requests, result.burst_storage_reads
    );
    println!("load {}", result.load);
    report.insert(format!("owner_cache_{label}"), serde_json::to_value(&result)?);
    Ok(())
}

/// `activation`: cold and hot requests, memory per database, root-store
/// operations. Prints the table and adds the figures to `report`.
async fn activation(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::activation::run(server.backend(), args.databases, 10).await?;
    println!(
        "\n== activation ({label}): {} databases, {} active ==",
        result.databases, result.active
    );
    println!(
        "cold request p50 {:.0} µs p99 {:.0} µs; hot request p50 {:.0} µs p99 {:.0} µs",
        result.cold_request.p50_us,
        result.cold_request.p99_us,
        result.hot_request.p50_us,
        result.hot_request.p99_us
    );
    println!(
        "RSS per hot database {:.0} KiB; left per evicted database {:.0} KiB",
        result.rss_per_hot_db_kib, result.rss_per_cold_db_kib
    );
    println!(
        "root ops/s: idle {:.1}, with {} active {:.1} (on the active ones {:.1})",
        result.root_ops_per_s_idle,
        result.active,
        result.root_ops_per_s_active,
        result.root_ops_per_s_on_active
    );
    println!("load {}", result.load);
    report.insert(format!("activation_{label}"), serde_json::to_value(&result)?);
    Ok(())
}

/// `recovery`: handoff unavailability against a database's history length.
/// Prints the table and adds the figures to `report`.
async fn recovery(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let lengths: &[usize] = if args.quick {
        &[0, 200]
    } else {
        &[0, 1000, 4000, 6000, 16000]
    };
    // Corium's own reads (record by record, delayed ACKs), then the fleet's
    // remedies added one by one (the last is the default, warm standbys
    // included: a handoff's target is its database's first standby), side by
    // side in one run.
    let variants: [(&str, &str, &[&str]); 3] = [
        (
            "as Corium reads",
            "as_corium",
            &[
                "--activation-read-ahead-mib",
                "0",
                "--warm-standby-mib",
                "0",
                "--postgres-quick-ack",
                "false",
            ],
        ),
        (
            "quick ACKs",
            "quick_ack",
            &["--activation-read-ahead-mib", "0", "--warm-standby-mib", "0"],
        ),
        ("quick ACKs + read-ahead (default)", "default", &[]),
    ];
    let flags: Vec<&[&str]> = variants.iter().map(|(_, _, flags)| *flags).collect();
    let results = scenario::recovery::run(|| server.backend(), lengths, args.rounds, &flags).await?;
    for ((variant, key, _), points) in variants.iter().zip(results) {
        println!("\n== recovery ({label}, {variant}): handoff unavailability against history length ==");
        for point in &points {
            // Milliseconds of one handoff: far inside f64's exact integers (2^53).
            #[allow(clippy::cast_precision_loss)]
            let ms: Vec<f64> = point.handoff_ms.iter().map(|ms| *ms as f64).collect();
            println!(
                "{:>6} transactions: {} ms",
                point.transactions,
                stats::spread(&ms)
            );
        }
        report.insert(format!("recovery_{label}_{key}"), serde_json::to_value(&points)?);
    }
    Ok(())
}

/// `moves`: the events of `failover` and a cold open at each history
/// length, the previous release and this build over the same database.
/// Prints the table and adds the figures to `report`.
async fn moves(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let lengths: &[usize] = if args.quick {
        &[2_000]
    } else {
        &[5_000, 50_000, 200_000]
    };
    let points = scenario::moves::run(|| server.backend(), lengths, args.rounds).await?;
    println!(
        "\n== moves ({label}, 2 nodes, lease TTL 5 s, a writer through the ingress): previous release / this build, median (min–max) ms =="
    );
    for point in &points {
        println!("{} transactions:", point.transactions);
        let row = |what: &str, pick: &dyn Fn(&scenario::moves::Build) -> String| {
            let cells: Vec<String> = point.builds.iter().map(pick).collect();
            println!("  {what:<34} {}", cells.join("  /  "));
        };
        row("SIGKILL → first commit", &|b| {
            b.events.sigkill_to_commit_ms.to_string()
        });
        row("handoff, owner-reported", &|b| {
            b.events.handoff_reported_ms.to_string()
        });
        row("handoff, longest client gap", &|b| {
            b.events.handoff_client_gap_ms.to_string()
        });
        row("SIGTERM drain, longest client gap", &|b| {
            b.events.drain_client_gap_ms.to_string()
        });
        row("cold open (all nodes restarted)", &|b| b.cold_open_ms.to_string());
        row("promoted in place / refused", &|b| {
            format!("{} / {}", b.promotions, b.promotions_refused)
        });
        if let Some(ms) = point.stock_cold_open_ms {
            println!("  {:<34} {ms:.0}", "stock corium transactor, cold open");
        }
    }
    report.insert(format!("moves_{label}"), serde_json::to_value(&points)?);
    Ok(())
}

/// `many-databases`: what idle databases cost against how many there are,
/// the previous release beside this build. Prints the table and adds the
/// figures to `report`.
async fn many_databases(args: &Args, server: &Store, label: &str, report: &mut Report) -> anyhow::Result<()> {
    let counts: &[usize] = if args.quick { &[200] } else { &[1_000, 10_000] };
    let runs = scenario::many::run(|| server.backend(), counts).await?;
    println!(
        "\n== many-databases ({label}, 3 nodes, one write each, then idle 20 s): previous release / this build =="
    );
    println!(
        "{:>9} {:>8} {:>26} {:>26} {:>6} {:>18} {:>15} {:>18} {:>26}",
        "databases",
        "build",
        "create /s, p50/p99 ms",
        "first write /s, p50/p99 ms",
        "open",
        "idle CPU % per node",
        "root ops/s r/w",
        "RSS MiB per node",
        "reactivation p50/p99 ms"
    );
    let ms = |us: f64| us / 1000.0;
    for run in &runs {
        let per_node = |values: &[f64]| {
            values
                .iter()
                .map(|v| format!("{v:.1}"))
                .collect::<Vec<_>>()
                .join("/")
        };
        println!(
            "{:>9} {:>8} {:>26} {:>26} {:>6} {:>18} {:>15} {:>18} {:>26}",
            run.databases,
            run.binaries,
            format!(
                "{:.0}, {:.1}/{:.1}",
                run.create.per_second,
                ms(run.create.p50_us),
                ms(run.create.p99_us)
            ),
            format!(
                "{:.0}, {:.1}/{:.1}",
                run.first_write.per_second,
                ms(run.first_write.p50_us),
                ms(run.first_write.p99_us)
            ),
            run.open_when_idle,
            per_node(&run.idle_cpu_percent),
            format!(
                "{:.0}/{:.0}",
                run.idle_root_reads_per_s, run.idle_root_writes_per_s
            ),
            per_node(&run.rss_mib),
            format!(
                "{:.1}/{:.1}",
                ms(run.reactivation.p50_us),
                ms(run.reactivation.p99_us)
            ),
        );
    }
    report.insert(format!("many_databases_{label}"), serde_json::to_value(&runs)?);
    Ok(())
}

/// `rebalance`: load-aware placement's time to even out a fleet with an
/// idle node among the busy databases' candidates. Prints the figures and
/// adds them to `report`.
async fn rebalance(report: &mut Report) -> anyhow::Result<()> {
    let result = scenario::rebalance::run().await?;
    println!(
        "\n== rebalance (filesystem, 3 nodes, 6 busy databases, node-3 idle among their candidates) ==\n\
         node-3 owned its share after {} ms; owned {:?} → {:?}; calls/s {:?} → {:?}",
        result
            .evened_ms
            .map_or_else(|| "(not within 3 minutes)".to_owned(), |ms| ms.to_string()),
        result.owned_before,
        result.owned_after,
        result.calls_before.map(f64::round),
        result.calls_after.map(f64::round)
    );
    report.insert("rebalance_filesystem".into(), serde_json::to_value(&result)?);
    Ok(())
}

/// `replica-moves`: a read replica across handoffs at each history length
/// (filesystem store). Prints the table and adds the figures to `report`.
async fn replica_moves(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let lengths: &[usize] = if args.quick {
        &[1_000, 5_000]
    } else {
        &[5_000, 50_000, 200_000]
    };
    let points = scenario::replica_moves::run(lengths, args.rounds.max(3)).await?;
    println!(
        "\n== replica-moves (filesystem, 3 nodes): a replica on a third node across handoffs, median (min–max) =="
    );
    println!(
        "{:>8}  {:>18}  {:>32}  {:>26}",
        "tx", "replica built ms", "read after the move answered ms", "handoff ms"
    );
    for point in &points {
        println!(
            "{:>8}  {:>18.0}  {:>32}  {:>26}",
            point.transactions,
            point.replica_build_ms,
            stats::spread(&point.follow_after_move_ms).to_string(),
            stats::spread(&point.handoff_ms).to_string()
        );
    }
    report.insert("replica_moves_filesystem".into(), serde_json::to_value(&points)?);
    Ok(())
}

/// `history`: the fleet against a stock `corium transactor` at each
/// history length (filesystem store). Prints the table and adds the
/// figures to `report`.
async fn history(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let lengths: &[usize] = if args.quick {
        &[1_000, 5_000]
    } else {
        &[5_000, 50_000, 200_000]
    };
    for (request_ids, label) in [(true, "request ids"), (false, "no request ids")] {
        let points = scenario::history::run(lengths, args.rounds, request_ids).await?;
        print_history(label, &points);
        let key = if request_ids {
            "history_filesystem"
        } else {
            "history_filesystem_no_request_ids"
        };
        report.insert(key.into(), serde_json::to_value(&points)?);
    }
    Ok(())
}

/// The `history` table of one variant.
fn print_history(label: &str, points: &[scenario::history::Point]) {
    println!(
        "\n== history (filesystem): fleet (2 nodes, through the ingress, {label}) vs stock corium transactor, median (min–max) =="
    );
    println!(
        "{:>8}  {:>12} {:>12}  {:>24} {:>24}  {:>10} {:>10}  {:>22}",
        "tx",
        "written fleet",
        "stock MiB",
        "cold open fleet ms",
        "stock ms",
        "cold fleet",
        "stock MiB",
        "handoff ms"
    );
    for point in points {
        println!(
            "{:>8}  {:>12} {:>12}  {:>24} {:>24}  {:>10} {:>10}  {:>22}",
            point.transactions,
            point.fleet_written_rss_kib / 1024,
            point.stock_written_rss_kib / 1024,
            stats::spread(&point.fleet_cold_open_ms).to_string(),
            stats::spread(&point.stock_cold_open_ms).to_string(),
            point.fleet_cold_rss_kib / 1024,
            point.stock_cold_rss_kib / 1024,
            stats::spread(&point.fleet_handoff_ms).to_string(),
        );
    }
}

/// `scaling`: aggregate throughput of 1–3 nodes against one stock `corium
/// transactor` (filesystem store). Prints the table and adds the figures to
/// `report`.
async fn scaling(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let per_client = if args.quick { 50 } else { 300 };
    let rows = scenario::scaling::run(12, args.rounds, per_client).await?;
    println!("\n== scaling (filesystem): 12 databases, 16 clients, {per_client} transactions each ==");
    let stock = rows.first().map_or(1.0, |row| row.transactions_per_second.median);
    for row in &rows {
        println!(
            "{:<28} {:>22} tx/s  {:.2}× stock  (load {})",
            row.target,
            row.transactions_per_second.to_string(),
            row.transactions_per_second.median / stock,
            row.load
        );
    }
    report.insert("scaling_filesystem".into(), serde_json::to_value(&rows)?);
    Ok(())
}

/// `reads`: one hot database's query throughput with 1–3 replica nodes
/// beside a stock `corium peer-server`, and the owner's write p50 with and
/// without heavy reads (filesystem store). Prints the tables and adds the
/// figures to `report`.
async fn reads(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    let seconds = if args.quick { 2 } else { 5 };
    let result = scenario::reads::run(args.rounds, seconds).await?;
    println!("\n== reads (filesystem): one hot database, a count over 2,000 items, {seconds} s rounds ==");
    let stock = result
        .throughput
        .first()
        .map_or(1.0, |row| row.reads_per_second.median);
    for row in &result.throughput {
        println!(
            "{:<48} {:>3} readers {:>22} reads/s ({:.2}× stock) {:>22} reads/CPU-s",
            row.target,
            row.readers,
            row.reads_per_second.to_string(),
            row.reads_per_second.median / stock,
            row.reads_per_cpu_second.to_string(),
        );
    }
    println!("owner's write p50 under read load:");
    for row in &result.writes {
        println!(
            "  reads: {:<40} write p50 {:>22} us  reads {:>22}/s",
            row.reads,
            row.write_p50_us.to_string(),
            row.reads_per_second.to_string()
        );
    }
    println!("(load {})", result.load);
    report.insert("reads_filesystem".into(), serde_json::to_value(&result)?);
    Ok(())
}

/// `scale-model`: the control plane's storage operations with many nodes
/// and databases in one process over one real store (`PostgreSQL` when
/// given, else the filesystem), and the owners a join or a leave moves.
/// Prints the tables and adds the figures to `report`.
async fn scale_model(args: &Args, report: &mut Report) -> anyhow::Result<()> {
    use scenario::scale_model::Shape;
    let shape = |nodes, active| Shape { nodes, active };
    let (catalog, shapes, warmup, window) = if args.quick {
        (5_000, vec![shape(5, 100), shape(20, 100), shape(20, 1_000)], 4, 4)
    } else if args.postgres.is_some() {
        (
            100_000,
            vec![shape(10, 1_000), shape(100, 1_000), shape(100, 10_000)],
            7,
            15,
        )
    } else {
        // The filesystem store served ~4,100 of the ~40,000 ops/s 10,000
        // active ask for, with its blocking threads driving the load past
        // 200 (docs/benchmarks.md): the 1,000-active shapes only.
        (100_000, vec![shape(10, 1_000), shape(100, 1_000)], 7, 15)
    };
    let result = scenario::scale_model::run(
        args.postgres.as_deref(),
        catalog,
        &shapes,
        std::time::Duration::from_secs(warmup),
        std::time::Duration::from_secs(window),
    )
    .await?;
    println!(
        "\n== scale model ({}): catalog {} databases, lease TTL {} ms, registry renewal {} ms, registry read every {} ms, {} s window ==",
        result.backend,
        result.catalog,
        result.lease_ttl_ms,
        result.registry_renew_ms,
        result.registry_read_ms,
        result.window_s
    );
    println!(
        "{:>5} {:>6} {:<24} {:>9} {:>9} {:>10} {:>10} {:>9} {:>12}",
        "nodes", "active", "kind", "reads/s", "writes/s", "rounds/s", "due/s", "ops/round", "at schedule"
    );
    for run in &result.runs {
        for kind in &run.kinds {
            println!(
                "{:>5} {:>6} {:<24} {:>9.1} {:>9.1} {:>10.1} {:>10.1} {:>9.1}{} {:>11.1}",
                run.nodes,
                run.active,
                kind.name,
                kind.reads_per_s,
                kind.writes_per_s,
                kind.rounds_per_s,
                kind.rounds_due_per_s,
                kind.ops_per_round,
                if kind.per_round_from == "code" { "*" } else { " " },
                kind.at_schedule_per_s
            );
        }
        println!(
            "{:>5} {:>6} total: {:.1} ops/s measured, {:.1} at schedule ({} watched, members seen {}, setup {:.1} s, load {})",
            run.nodes,
            run.active,
            run.measured_per_s,
            run.at_schedule_per_s,
            run.watched,
            run.members_seen,
            run.setup_s,
            run.load
        );
    }
    println!("(ops/round: the watcher's per node and round; * = what the code does per round, not measured)");
    println!(
        "\n== scale model: owners (first candidate) and candidate sets ({} replicas) moved, {} databases ==",
        result.replicas, result.catalog
    );
    for moves in &result.moves {
        println!(
            "{:<5} {} nodes, {} zone(s): owners moved {} ({:.4}; ideal {:.4}), candidate sets changed {} ({:.4}; ideal {:.4})",
            moves.event,
            moves.nodes_before,
            moves.zones,
            moves.owners_moved,
            moves.owners_moved_share,
            moves.owners_ideal_share,
            moves.candidate_sets_changed,
            moves.candidate_sets_share,
            moves.candidate_sets_ideal_share
        );
    }
    report.insert("scale_model".into(), serde_json::to_value(&result)?);
    Ok(())
}
