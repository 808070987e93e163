//! `corium-fleet-transactor`: parse flags, bind, run until SIGTERM/SIGINT.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use clap::Parser;
use corium_fleet_common::process::{self, Failure};
use corium_fleet_common::settings::LogFlags;
use corium_fleet_transactor::{Args, Listeners};

/// jemalloc: its own accounting of what the process holds is what the memory
/// budget keeps to (`allocator.rs`), and its background threads give freed
/// pages back to the system, so an eviction or a handoff lowers the resident
/// set (design note 0030).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// What the test suite injects (storage fault schedules, a crash after a
/// commit, read from the environment): only in a build with the
/// `fault-injection` feature.
#[cfg(feature = "fault-injection")]
fn seams() -> corium_fleet_transactor::Seams {
    corium_fleet_faults::env::announce();
    corium_fleet_transactor::Seams {
        wrap_store: Some(Box::new(corium_fleet_faults::env::wrap_store)),
        hooks: corium_fleet_transactor::Hooks {
            after_commit: Some(std::sync::Arc::new(corium_fleet_faults::env::after_commit)),
            refuse_warm_starts: corium_fleet_faults::env::refuse_warm_starts(),
        },
    }
}

/// A production build injects nothing.
#[cfg(not(feature = "fault-injection"))]
fn seams() -> corium_fleet_transactor::Seams {
    corium_fleet_transactor::Seams::default()
}

fn main() -> std::process::ExitCode {
    corium_fleet_transactor::allocator::jemalloc_is_global();
    // Flags, environment and the --config file, merged before logging
    // starts, so `log` and `log_format` in the file apply too.
    let merged = Args::parse().merged();
    let _telemetry = LogFlags::init_merged(&merged, |args| &args.logging, "corium-fleet-transactor");
    process::main(
        "corium-fleet-transactor",
        merged.and_then(Args::validate),
        |config| async move {
            let listeners = Listeners {
                grpc: process::bind(config.listen).await?,
                admin: process::bind(config.admin_listen).await?,
            };
            corium_fleet_transactor::run_with(
                config,
                listeners,
                corium_fleet_common::signal::shutdown(),
                seams(),
            )
            .await
            .map_err(|error| match error.kind() {
                // A configuration the process cannot run with: exit 2.
                corium_fleet_wire::kind::ErrorKind::GiveUp => Failure::Usage(error.to_string()),
                kind => Failure::Runtime(format!("{error} ({kind:?})")),
            })
        },
    )
}
