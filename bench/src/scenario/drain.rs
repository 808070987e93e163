//! A drain at scale: a node owning `databases` databases on `PostgreSQL`
//! is sent SIGTERM with a roomy deadline (10 s: the pace widens to hand
//! everything over) and a tight one (4 s: what is not handed over in time
//! is released). The measurement itself is `corium_fleet_tests::drain`, the
//! same one the suite runs with 40 databases.

use serde::Serialize;

use corium_fleet_tests::Backend;
use corium_fleet_tests::drain::drain;

/// One drain.
#[derive(Debug, Serialize)]
pub(crate) struct Run {
    pub(crate) deadline_ms: u64,
    pub(crate) exit_ms: u128,
    pub(crate) handed: usize,
    pub(crate) released: usize,
    pub(crate) all_back_ms: u128,
}

/// The scenario's result.
#[derive(Debug, Serialize)]
pub(crate) struct Result {
    pub(crate) databases: usize,
    pub(crate) runs: Vec<Run>,
}

/// Runs it on the `PostgreSQL` server at `base`.
pub(crate) async fn run(base: &str, databases: usize) -> Result {
    let mut runs = Vec::new();
    for deadline_ms in [10_000, 4_000] {
        let drained = drain(Backend::postgres(base), deadline_ms, databases).await;
        runs.push(Run {
            deadline_ms,
            exit_ms: drained.exit.as_millis(),
            handed: drained.handed,
            released: drained.released,
            all_back_ms: drained.slowest_back.as_millis(),
        });
    }
    Result { databases, runs }
}
