//! `corium-fleet dev`: a local fleet on loopback — three transactor nodes in
//! three zones sharing one store, and one ingress, the client address —
//! until interrupted.
//!
//! Ports are chosen free on 127.0.0.1; children are stopped with SIGTERM (so
//! they release their leases) and killed only if they do not stop in time.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use corium_fleet_common::launch;
use corium_fleet_common::placement::Member;
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

/// `corium-fleet dev` flags: the shape of the local fleet.
#[derive(clap::Args)]
pub(crate) struct DevArgs {
    /// Where the fleet keeps its data (store, logs, node logs).
    #[arg(long, default_value = ".corium-fleet")]
    data_dir: PathBuf,
    /// Number of transactor nodes (one zone each).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=9))]
    nodes: u16,
    /// Storage shared by the nodes: `filesystem` (under --data-dir) or `postgres://…`.
    #[arg(long, default_value = "filesystem")]
    storage: String,
    /// Write-lease TTL in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    lease_ttl_ms: u64,
    /// Candidates per database.
    #[arg(long, default_value_t = 2)]
    replicas: u16,
    /// Run the internal hop in plaintext instead of mTLS.
    #[arg(long)]
    plaintext: bool,
    /// How long to wait for the nodes to become ready.
    #[arg(long, default_value_t = 60)]
    ready_timeout_secs: u64,
}

/// A free TCP port on loopback (bound and released).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fleet binary: beside this one (one cargo target directory), else on PATH.
fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

struct Node {
    id: String,
    grpc: u16,
    admin: u16,
    child: Child,
}

async fn stop(nodes: &mut [Node]) {
    for node in nodes.iter() {
        if let Some(pid) = node.child.id() {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }
    for node in nodes.iter_mut() {
        if tokio::time::timeout(Duration::from_secs(15), node.child.wait())
            .await
            .is_err()
        {
            eprintln!("corium-fleet: {} did not stop in 15 s; killing it", node.id);
            let _ = node.child.kill().await;
        }
    }
}

/// The local fleet's members: `node-N` in `zone-X`, on the given gRPC ports.
fn members(args: &DevArgs, ports: &[(u16, u16)]) -> Vec<Member> {
    let scheme = if args.plaintext { "http" } else { "https" };
    ports
        .iter()
        .enumerate()
        .map(|(index, (grpc, _))| Member {
            node_id: format!("node-{}", index + 1),
            zone: format!("zone-{}", char::from(b'a' + u8::try_from(index).unwrap_or(0))),
            weight: 1,
            endpoint: format!("{scheme}://127.0.0.1:{grpc}"),
        })
        .collect()
}

/// Starts `binary` with `command_line`, logging to `logs/ID.log`, killed if the CLI
/// dies.
fn spawn(
    binary: &Path,
    command_line: Vec<String>,
    id: String,
    (grpc, admin): (u16, u16),
    logs: &Path,
) -> anyhow::Result<Node> {
    let log = std::fs::File::create(logs.join(format!("{id}.log")))?;
    let child = Command::new(binary)
        .args(command_line)
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {} (build it with `cargo build`)", binary.display()))?;
    Ok(Node {
        id,
        grpc,
        admin,
        child,
    })
}

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

/// Starts every node, then the ingress (last in the returned list); on a
/// failure, stops what started.
async fn spawn_all(args: &DevArgs, logs: &Path) -> anyhow::Result<Vec<Node>> {
    let ports = (0..args.nodes)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let members = members(args, &ports);
    let data_dir = args.data_dir.join("data");
    let certs = (!args.plaintext).then(|| launch::Certs(args.data_dir.join("certs")));
    let shared = launch::Shared {
        storage: &args.storage,
        data_dir: &data_dir,
        members: Some(&members),
        replicas: Some(usize::from(args.replicas)),
        certs: certs.as_ref(),
    };
    let loopback = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let transactor = sibling_binary("corium-fleet-transactor");
    let mut nodes = Vec::new();
    for (member, &(grpc, admin)) in members.iter().zip(&ports) {
        let command_line = launch::node_args(
            &shared,
            &launch::NodeProcess {
                member,
                listen: loopback(grpc),
                admin_listen: loopback(admin),
                lease_ttl: Some(Duration::from_millis(args.lease_ttl_ms)),
            },
        );
        match spawn(
            &transactor,
            command_line,
            member.node_id.clone(),
            (grpc, admin),
            logs,
        ) {
            Ok(node) => nodes.push(node),
            Err(error) => {
                stop(&mut nodes).await;
                return Err(error);
            }
        }
    }
    let ingress = (|| {
        let (grpc, admin) = (free_port()?, free_port()?);
        let command_line = launch::ingress_args(&shared, loopback(grpc), loopback(admin));
        spawn(
            &sibling_binary("corium-fleet-ingress"),
            command_line,
            "ingress-1".to_owned(),
            (grpc, admin),
            logs,
        )
    })();
    match ingress {
        Ok(ingress) => nodes.push(ingress),
        Err(error) => {
            stop(&mut nodes).await;
            return Err(error);
        }
    }
    Ok(nodes)
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

/// Runs `corium-fleet dev`: starts the nodes and the ingress, waits until
/// each is ready, prints the client address and how to connect to it (the
/// development token), and stops them all on SIGTERM,
/// Ctrl-C, or when one of them exits.
///
/// # Errors
/// A process cannot be started or is not ready in time (every started one
/// is stopped first), or the certificates or log directory cannot be made.
pub(crate) async fn run(args: DevArgs) -> anyhow::Result<()> {
    let logs = args.data_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    if !args.plaintext {
        certs(&args)?;
    }
    let mut nodes = spawn_all(&args, &logs).await?;
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_secs);
    for index in 0..nodes.len() {
        loop {
            if launch::is_ready(std::net::SocketAddr::from(([127, 0, 0, 1], nodes[index].admin))).await {
                break;
            }
            if let Ok(Some(status)) = nodes[index].child.try_wait() {
                let id = nodes[index].id.clone();
                stop(&mut nodes).await;
                bail!(
                    "{id} exited with {status}; see {}",
                    logs.join(format!("{id}.log")).display()
                );
            }
            if Instant::now() > deadline {
                let id = nodes[index].id.clone();
                stop(&mut nodes).await;
                bail!(
                    "{id} was not ready within {} s; see {}",
                    args.ready_timeout_secs,
                    logs.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for node in &nodes {
        let scheme = if node.id.starts_with("node") && !args.plaintext {
            "https"
        } else {
            "http"
        };
        eprintln!(
            "corium-fleet: {} grpc {scheme}://127.0.0.1:{} admin http://127.0.0.1:{}/metrics",
            node.id, node.grpc, node.admin
        );
    }
    if !args.plaintext {
        eprintln!(
            "corium-fleet: nodes accept mTLS only (certificates in {})",
            args.data_dir.join("certs").display()
        );
    }
    eprintln!(
        "corium-fleet: node logs in {}; Ctrl-C stops the fleet",
        logs.display()
    );
    // The ingress is the one client address.
    let ingress = nodes.last().map_or(0, |node| node.grpc);
    println!("corium-fleet: ready at http://127.0.0.1:{ingress}");
    for line in connect_hint(&format!("http://127.0.0.1:{ingress}")) {
        eprintln!("corium-fleet: {line}");
    }
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let exited = async {
        loop {
            for node in &mut nodes {
                if let Ok(Some(status)) = node.child.try_wait() {
                    return format!("{} exited with {status}", node.id);
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let reason = tokio::select! {
        _ = term.recv() => "SIGTERM".to_owned(),
        _ = int.recv() => "interrupted".to_owned(),
        reason = exited => reason,
    };
    eprintln!("corium-fleet: {reason}; stopping the fleet");
    stop(&mut nodes).await;
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
