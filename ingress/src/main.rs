//! `corium-fleet-ingress`: parse flags, bind, run until SIGTERM/SIGINT.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

use clap::Parser;
use corium_fleet_common::process::{self, Failure};
use corium_fleet_common::settings::LogFlags;
use corium_fleet_ingress::{Args, Listeners};

/// mimalloc instead of glibc's allocator: a forwarded call makes a few dozen
/// small allocations (frames, header maps, the call's future), and glibc's
/// `malloc`/`free` were 8 % of the ingress's instructions per call (design
/// note 0018).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Flags, environment and the --config file, merged before logging
    // starts, so `log` and `log_format` in the file apply too.
    let merged = Args::parse().merged();
    let _telemetry = LogFlags::init_merged(&merged, |args| &args.logging, "corium-fleet-ingress");
    process::main_with_threads(
        "corium-fleet-ingress",
        merged.and_then(Args::validate),
        |config| config.worker_threads,
        |config| async move {
            let tls = match config.tls_listen.as_ref().map(|listener| listener.addr) {
                Some(addr) => Some(process::bind(addr).await?),
                None => None,
            };
            let listeners = Listeners {
                grpc: process::bind(config.listen).await?,
                admin: process::bind(config.admin_listen).await?,
                tls,
            };
            corium_fleet_ingress::run(config, listeners, corium_fleet_common::signal::shutdown())
                .await
                .map_err(|error| match error.kind() {
                    // A configuration the process cannot run with: exit 2.
                    corium_fleet_wire::kind::ErrorKind::GiveUp => Failure::Usage(error.to_string()),
                    kind => Failure::Runtime(format!("{error} ({kind:?})")),
                })
        },
    )
}
