//! The simulation tier of the fault suite (`tests/src/sim`): seeded plans of
//! crashes and freezes at protocol boundaries, partitions, flaky storage,
//! drains, handoffs and placement changes, run against in-process hosts
//! sharing one store, each judged by the checker.
//!
//! - `CORIUM_FLEET_SIM_SEEDS=N` runs seeds `0..N` (default 12 here; `make
//!   soak` runs thousands), `CORIUM_FLEET_SIM_FIRST_SEED` moves the start;
//! - `CORIUM_FLEET_SIM_PLAN='<plan>'` replays one plan exactly as a failing
//!   run printed it;
//! - `CORIUM_FLEET_SIM_LOG=debug` shows the hosts' logs.
//!
//! Seeds that once failed are kept in `REGRESSIONS` and run every time.

use corium_fleet_tests::sim::{self, Options, Plan};

/// Seeds that found bugs (fixed), run on every `make test`.
/// 2 and 7: a storage failure during a commit answered `INTERNAL` (fixed:
/// `error::node_status`); 12: a log read (Subscribe) during a partition
/// answered `INTERNAL` (same fix, on every call into a cell); 1028: an owner
/// frozen after a log append, whose caller's deadline cancelled Corium's
/// group-commit leader half-way, wedged its database for good ("corrupt
/// transaction log"; fixed: `Cell::commit` runs in its own task, and a cell
/// whose commit failed in storage is reset); 2008: an owner frozen at its
/// post-append fence was deposed and then answered its own refused batch as
/// a request-id replay — an acknowledged write the log does not hold (fixed:
/// replays only on the id's uniqueness refusal, fenced by a lease check).
const REGRESSIONS: &[u64] = &[2, 7, 12, 1028, 2008];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.trim().parse().ok())
}

/// Runs one plan on a fresh current-thread runtime; returns its report.
fn run_plan(plan: &Plan, options: Options) -> corium_fleet_tests::checker::Report {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(sim::run(plan, options))
}

#[test]
fn seeded_fault_plans_keep_every_promise() {
    if let Ok(level) = std::env::var("CORIUM_FLEET_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(level))
            .with_test_writer()
            .try_init();
    }
    let options = Options::default();
    let plans: Vec<Plan> = if let Ok(text) = std::env::var("CORIUM_FLEET_SIM_PLAN") {
        vec![
            text.parse()
                .unwrap_or_else(|error| panic!("CORIUM_FLEET_SIM_PLAN: {error}")),
        ]
    } else {
        let first = env_u64("CORIUM_FLEET_SIM_FIRST_SEED").unwrap_or(0);
        let count = env_u64("CORIUM_FLEET_SIM_SEEDS").unwrap_or(12);
        REGRESSIONS
            .iter()
            .copied()
            .chain(first..first + count)
            .map(|seed| Plan::generate(seed, options.shape))
            .collect()
    };
    let mut failed = Vec::new();
    let mut acked = 0;
    for plan in &plans {
        // The plan first, so a failing run can be replayed from its text.
        eprintln!("plan: {plan}");
        let report = run_plan(plan, options);
        eprintln!("{report}");
        acked += report.acked;
        if !report.passed() {
            eprintln!(
                "replay: CORIUM_FLEET_SIM_PLAN='{plan}' cargo nextest run -p corium-fleet-tests --test simulation --no-capture"
            );
            failed.push(plan.seed);
        }
    }
    eprintln!(
        "{} plans, {acked} transactions acknowledged, {} failed: {failed:?}",
        plans.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "seeds {failed:?} broke a promise (reports above)"
    );
    assert!(acked > 0, "the workload acknowledged nothing");
}
