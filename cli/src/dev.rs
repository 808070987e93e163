//! `corium-fleet dev`: a local fleet on loopback — three transactor nodes in
//! three zones sharing one store, and one ingress, the client address —
//! supervised until interrupted.
//!
//! Ports are chosen free on 127.0.0.1, all at once. A process that cannot
//! bind its port at start (another process took it between the choice and
//! the bind) makes the fleet start again on new ports, a bounded number of
//! times. Once the fleet is ready, it is supervised like a `StatefulSet`: a
//! process that exits, for any reason, is started again on the same ports
//! with the same node id after a back-off (1 s, doubling to 10 s while it
//! keeps failing quickly), and every exit and restart is printed on stderr.
//! SIGTERM or Ctrl-C stops the children with SIGTERM (so nodes release
//! their leases), killing any that do not stop in time (or at once on a
//! second signal).
//!
//! - `args.rs` — the flags;
//! - `start.rs` — ports, spawning, each start watched until ready;
//! - `process.rs` — one supervised process and its back-off;
//! - `signals.rs` — SIGTERM/Ctrl-C taken over, and stopping the fleet.

mod args;
mod process;
mod signals;
mod start;

use std::time::Duration;

use anyhow::Context as _;
use corium_fleet_common::launch;

pub(crate) use self::args::DevArgs;
use self::process::{Process, seconds};
use self::signals::{Signals, stop};
use self::start::start;

/// How often the supervisor looks at its children.
const TICK: Duration = Duration::from_millis(200);

/// The mTLS certificates of the local fleet, made once and kept.
fn certs(args: &DevArgs) -> anyhow::Result<crate::certs::CertsArgs> {
    let certs = crate::certs::CertsArgs {
        out: args.data_dir.join("certs"),
        nodes: (1..=args.nodes).map(|i| format!("node-{i}")).collect(),
        ingresses: vec![launch::INGRESS_IDENTITY.to_owned()],
        force: true,
        renew: false,
    };
    if !crate::certs::complete(&certs) {
        crate::certs::generate(&certs)?;
    }
    Ok(certs)
}

/// One look at the running fleet: a process that exited is started again
/// after its back-off, on the same command line; each exit, restart and
/// readiness after a restart is printed.
async fn supervise_pass(processes: &mut [Process]) {
    for process in processes.iter_mut() {
        if let Some(exit) = process.exited() {
            eprintln!(
                "corium-fleet: {} exited ({}); restarting in {} s",
                process.id,
                exit.describe(),
                seconds(process.restart_in().unwrap_or_default())
            );
        }
        if process.restart_in() == Some(Duration::ZERO) {
            match process.restart() {
                Ok(pid) => eprintln!(
                    "corium-fleet: {} restarted (pid {pid}, restart {}, same ports)",
                    process.id, process.restarts
                ),
                Err(error) => eprintln!(
                    "corium-fleet: cannot restart {}: {error:#}; trying again in {} s",
                    process.id,
                    seconds(process.restart_in().unwrap_or_default())
                ),
            }
        }
        if process.became_ready().await {
            eprintln!(
                "corium-fleet: {} ready again (pid {})",
                process.id,
                process.pid().unwrap_or_default()
            );
        }
    }
}

/// Supervises the ready fleet until a signal; returns its name.
async fn supervise(processes: &mut [Process], signals: &mut Signals) -> &'static str {
    loop {
        let pass = async {
            tokio::time::sleep(TICK).await;
            supervise_pass(processes).await;
        };
        tokio::select! {
            biased;
            reason = signals.recv() => return reason,
            () = pass => {}
        }
    }
}

/// How to connect to the ready fleet at `ingress` (printed on stderr after
/// the "ready at" line, which stays the one line on stdout): the address,
/// the development token it accepts, and the CLI with the token as a flag
/// and as `CORIUM_TOKEN`.
fn connect_hint(ingress: &str) -> [String; 4] {
    let token = corium_protocol::auth::DEFAULT_DEV_TOKEN;
    [
        format!(
            "connect to the ingress at {ingress}; as in stock Corium, the development token \
             \"{token}\" is accepted (a development convenience: never rely on it beyond loopback), e.g."
        ),
        format!("  corium-fleet status --endpoint {ingress} --token {token}"),
        format!("  CORIUM_TOKEN={token} corium-fleet status --endpoint {ingress}"),
        "(corium-fleet and corium send that token when neither --token nor CORIUM_TOKEN is set)".to_owned(),
    ]
}

/// What the ready fleet prints on stderr about each process: its pid and
/// addresses.
fn process_line(process: &Process, plaintext: bool) -> String {
    let scheme = if process.id.starts_with("node") && !plaintext {
        "https"
    } else {
        "http"
    };
    format!(
        "corium-fleet: {} pid {} grpc {scheme}://127.0.0.1:{} admin http://127.0.0.1:{}/metrics",
        process.id,
        process.pid().unwrap_or_default(),
        process.grpc,
        process.admin
    )
}

/// Runs `corium-fleet dev`: starts the nodes and the ingress, waits until
/// each is ready, prints the client address and how to connect to it (the
/// development token), restarts any process that exits, and stops them all
/// on SIGTERM or Ctrl-C.
///
/// # Errors
/// A process cannot be started, refuses its configuration or is not ready in
/// time, or ports kept being taken (every started process is stopped first);
/// the certificates or log directory cannot be made.
pub(crate) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let logs = args.data_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    if !args.plaintext {
        certs(&args)?;
    }
    let mut signals = Signals::new()?;
    let Some(mut processes) = start(&args, &logs, &mut signals).await? else {
        return Ok(());
    };
    for process in &processes {
        eprintln!("{}", process_line(process, args.plaintext));
    }
    if !args.plaintext {
        eprintln!(
            "corium-fleet: nodes accept mTLS only (certificates in {})",
            args.data_dir.join("certs").display()
        );
    }
    eprintln!(
        "corium-fleet: logs in {}; a process that exits is restarted on the same ports; Ctrl-C stops the fleet",
        logs.display()
    );
    // The ingress is the one client address.
    let ingress = processes.last().map_or(0, |process| process.grpc);
    println!("corium-fleet: ready at http://127.0.0.1:{ingress}");
    for line in connect_hint(&format!("http://127.0.0.1:{ingress}")) {
        eprintln!("corium-fleet: {line}");
    }
    let reason = supervise(&mut processes, &mut signals).await;
    eprintln!("corium-fleet: {reason}; stopping the fleet");
    stop(&mut processes, &mut signals).await;
    eprintln!("corium-fleet: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_hint_names_the_address_the_token_and_both_forms() {
        let lines = connect_hint("http://127.0.0.1:4334");
        let token = corium_protocol::auth::DEFAULT_DEV_TOKEN;
        assert_eq!(token, "corium-dev-insecure-token");
        assert!(lines[0].contains("http://127.0.0.1:4334") && lines[0].contains(token));
        assert_eq!(
            lines[1],
            "  corium-fleet status --endpoint http://127.0.0.1:4334 --token corium-dev-insecure-token"
        );
        assert_eq!(
            lines[2],
            "  CORIUM_TOKEN=corium-dev-insecure-token corium-fleet status --endpoint http://127.0.0.1:4334"
        );
        // Whoever reads stdout for "ready at " finds only the ready line.
        assert!(lines.iter().all(|line| !line.contains("ready at")));
    }
}
