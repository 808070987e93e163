//! `corium-fleet dev`'s flags.

use std::path::PathBuf;

/// `corium-fleet dev` flags: the shape of the local fleet.
#[derive(clap::Args)]
pub(crate) struct DevArgs {
    /// Where the fleet keeps its data (store, logs, node logs).
    #[arg(long, default_value = ".corium-fleet")]
    pub(super) data_dir: PathBuf,
    /// Number of transactor nodes (one zone each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=9))]
    pub(super) nodes: u16,
    /// Storage shared by the nodes: `filesystem` (under --data-dir) or `postgres://…`.
    #[arg(long, default_value = "filesystem")]
    pub(super) storage: String,
    /// Write-lease TTL in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub(super) lease_ttl_ms: u64,
    /// Candidates per database.
    #[arg(long, default_value_t = 2)]
    pub(super) replicas: u16,
    /// Run the internal hop in plaintext instead of mTLS.
    #[arg(long)]
    pub(super) plaintext: bool,
    /// The fleet's address: the ingress's gRPC port on 127.0.0.1. Stock
    /// Corium's port by default, which is where `corium-fleet status` and
    /// stock clients look without flags; 0 picks a free one (as every other
    /// port of the fleet is).
    #[arg(long, default_value_t = 4334)]
    pub(super) port: u16,
    /// How long to wait for the nodes to become ready.
    #[arg(long, default_value_t = 60)]
    pub(super) ready_timeout_secs: u64,
    /// Ports the first start uses as given, unchecked, in order: node-1
    /// gRPC, node-1 admin, node-2 gRPC, …, ingress gRPC, ingress admin (the
    /// rest are chosen free). For tests that reproduce a port taken at start.
    #[arg(long, hide = true, value_delimiter = ',')]
    pub(super) try_ports: Vec<u16>,
}
