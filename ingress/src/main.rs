//! `corium-fleet-ingress`: parse flags, bind, run until SIGTERM/SIGINT.

use clap::Parser;
use corium_fleet_ingress::{Args, Listeners};

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    corium_fleet_common::logging::init(args.log.as_deref());
    let config = match args.merged().and_then(Args::validate) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("corium-fleet-ingress: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("corium-fleet-ingress: cannot start the runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let bind = |addr| async move {
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|error| format!("cannot listen on {addr}: {error}"))
        };
        let tls = match config.tls_listen.as_ref().map(|(addr, _)| *addr) {
            Some(addr) => bind(addr).await.map(Some),
            None => Ok(None),
        };
        let listeners = match (bind(config.listen).await, bind(config.admin_listen).await, tls) {
            (Ok(grpc), Ok(admin), Ok(tls)) => Listeners { grpc, admin, tls },
            (Err(message), _, _) | (_, Err(message), _) | (_, _, Err(message)) => {
                eprintln!("corium-fleet-ingress: {message}");
                return std::process::ExitCode::from(2);
            }
        };
        match corium_fleet_ingress::run(config, listeners, corium_fleet_common::signal::shutdown()).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("corium-fleet-ingress: {error} ({:?})", error.kind());
                std::process::ExitCode::FAILURE
            }
        }
    })
}
