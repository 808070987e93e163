//! `corium-fleet`: the operator and developer command.
//!
//! - `corium-fleet dev` runs a local fleet on loopback (see `dev.rs`);
//! - `corium-fleet status` prints every node of the fleet: zone, endpoint,
//!   owned / standby / cold counts, lease versions, load;
//! - `corium-fleet where` tells who owns one database, its lease, basis and
//!   candidates;
//! - `corium-fleet handoff` moves one database to a named live candidate;
//! - `corium-fleet rebalance --dry-run` prints what load-aware placement
//!   would move now, and why;
//! - `corium-fleet request-status` tells whether a request id committed;
//! - `corium-fleet backup` backs databases up through the fleet (stock
//!   `corium backup` archives, by Corium's own backup code);
//! - `corium-fleet restore` restores an archive into the fleet's storage
//!   under a new name, on every store;
//! - `corium-fleet certs` writes a development CA and mTLS certificates;
//! - `corium-fleet completions SHELL` prints a shell completion script.
//!
//! `status`, `where`, `handoff`, `rebalance`, `request-status` and `backup` present a bearer token on every
//! call (`--token` / `CORIUM_TOKEN`, resolved as stock `corium` resolves it;
//! see `auth.rs`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

mod auth;
mod backup;
mod certs;
mod dev;
mod handoff;
mod node_args;
mod rebalance;
mod request_status;
mod restore;
mod status;
mod where_;

use clap::{CommandFactory as _, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "corium-fleet", version, about = "Run and inspect Corium Fleet")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a local fleet on loopback until interrupted.
    Dev(dev::DevArgs),
    /// Show every node of the fleet: what each owns, stands by for and
    /// holds cold, its lease versions and load.
    Status(status::StatusArgs),
    /// Show where one database lives: owner, lease, basis, candidates.
    Where(where_::WhereArgs),
    /// Hand one database to a named live candidate (drain, release, the
    /// candidate acquires at once); prints the write unavailability.
    Handoff(handoff::HandoffArgs),
    /// What load-aware placement would move now (`--dry-run`): each node's
    /// calls per second against the fleet's mean, and each move's reason.
    Rebalance(rebalance::RebalanceArgs),
    /// Did the transaction sent under a request id commit? (The answer to
    /// an unknown outcome; "not committed" fences the id for good.)
    RequestStatus(request_status::RequestStatusArgs),
    /// Back databases up through the fleet (stock `corium backup`'s
    /// archives, one per database in --dir, incremental when one is there).
    Backup(backup::BackupArgs),
    /// Restore a backup archive into the fleet's storage under a new name
    /// (on the filesystem, `PostgreSQL` or S3; the fleet may be running).
    Restore(restore::RestoreArgs),
    /// Generate a development CA and mTLS certificates for a fleet.
    Certs(certs::CertsArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish,
    /// elvish, powershell), e.g. `corium-fleet completions bash >
    /// /etc/bash_completion.d/corium-fleet`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    corium_fleet_common::tls::install_default_provider();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("corium-fleet: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Dev(args) => dev::run(args).await,
            Command::Status(args) => status::run(args).await,
            Command::Where(args) => where_::run(args).await,
            Command::Handoff(args) => handoff::run(args).await,
            Command::Rebalance(args) => rebalance::run(args).await,
            Command::RequestStatus(args) => request_status::run(args).await,
            Command::Backup(args) => backup::run(args).await,
            Command::Restore(args) => restore::run(args).await,
            Command::Certs(args) => certs::run(&args),
            Command::Completions { shell } => {
                clap_complete::generate(shell, &mut Cli::command(), "corium-fleet", &mut std::io::stdout());
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("corium-fleet: {error:#}");
            if let Some(hint) = auth::refusal_hint(&error) {
                eprintln!("corium-fleet: {hint}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory as _;

    /// The bash script names every command and is valid bash (`bash -n`).
    #[test]
    fn the_bash_completion_script_is_bash_and_names_every_command() {
        let mut script = Vec::new();
        clap_complete::generate(
            clap_complete::Shell::Bash,
            &mut Cli::command(),
            "corium-fleet",
            &mut script,
        );
        let text = String::from_utf8(script.clone()).unwrap();
        for command in [
            "dev",
            "status",
            "where",
            "handoff",
            "rebalance",
            "request-status",
            "certs",
            "completions",
        ] {
            assert!(text.contains(command), "{command} missing");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corium-fleet.bash");
        std::fs::write(&path, &script).unwrap();
        let checked = std::process::Command::new("bash")
            .arg("-n")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            checked.status.success(),
            "{}",
            String::from_utf8_lossy(&checked.stderr)
        );
    }
}
