//! Running the `corium-fleet` operator CLI as an operator would: the real
//! binary, against an endpoint, with the development token (no
//! `CORIUM_TOKEN` or `CORIUM_FLEET_ENDPOINT` from the test's environment),
//! bounded by a minute.

use std::time::Duration;

use crate::bin_dir;

/// What one run of the `corium-fleet` binary printed.
#[derive(Debug)]
pub struct Run {
    /// Whether it exited successfully.
    pub success: bool,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `corium-fleet ARGS --endpoint ENDPOINT`.
///
/// # Panics
/// When the binary cannot run or does not finish within a minute.
pub async fn run(args: &[&str], endpoint: &str) -> Run {
    let mut all = args.to_vec();
    all.extend(["--endpoint", endpoint]);
    run_on_storage(&all, &[]).await
}

/// Runs `corium-fleet ARGS` with `env` and no endpoint (a command that
/// reaches the storage itself: `restore`).
///
/// # Panics
/// When the binary cannot run or does not finish within a minute.
pub async fn run_on_storage(args: &[&str], env: &[(String, String)]) -> Run {
    run_within(args, env, Duration::from_mins(1))
        .await
        .unwrap_or_else(|| panic!("corium-fleet {args:?} did not finish within a minute"))
}

/// Runs `corium-fleet ARGS` with `env`; `None` when it did not finish
/// within `limit` (it is killed).
///
/// # Panics
/// When the binary cannot run.
pub async fn run_within(args: &[&str], env: &[(String, String)], limit: Duration) -> Option<Run> {
    let mut command = tokio::process::Command::new(bin_dir().join("corium-fleet"));
    command
        .args(args)
        .envs(env.iter().map(|(key, value)| (key, value)))
        .env_remove("CORIUM_TOKEN")
        .env_remove("CORIUM_FLEET_ENDPOINT")
        .kill_on_drop(true);
    let output = tokio::time::timeout(limit, command.output())
        .await
        .ok()?
        .expect("corium-fleet runs");
    Some(Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}
