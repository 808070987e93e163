//! `corium-fleet-transactor`: parse flags, bind, run until SIGTERM/SIGINT.

use clap::Parser;
use corium_fleet_transactor::{Args, Listeners};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    corium_fleet_common::logging::init(args.log.as_deref());
    let config = match args.merged().and_then(Args::validate) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("corium-fleet-transactor: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("corium-fleet-transactor: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let bind = |addr| async move {
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|error| format!("cannot listen on {addr}: {error}"))
        };
        let listeners = match (bind(config.listen).await, bind(config.admin_listen).await) {
            (Ok(grpc), Ok(admin)) => Listeners { grpc, admin },
            (Err(message), _) | (_, Err(message)) => {
                eprintln!("corium-fleet-transactor: {message}");
                return std::process::ExitCode::from(2);
            }
        };
        match corium_fleet_transactor::run(config, listeners, corium_fleet_common::signal::shutdown()).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("corium-fleet-transactor: {error} ({:?})", error.kind());
                std::process::ExitCode::FAILURE
            }
        }
    })
}
