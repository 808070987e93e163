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
use tokio::process::{Child, Command};

#[derive(clap::Args)]
pub struct DevArgs {
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

async fn ready(admin: u16) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", admin)).await.ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_secs(2), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
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

fn spawn(
    args: &DevArgs,
    binary: &Path,
    index: u16,
    ports: &[(u16, u16)],
    logs: &Path,
) -> anyhow::Result<Node> {
    let id = format!("node-{}", index + 1);
    let (grpc, admin) = ports[usize::from(index)];
    let zone = format!("zone-{}", char::from(b'a' + u8::try_from(index).unwrap_or(0)));
    let mut command = Command::new(binary);
    command
        .arg("--node-id")
        .arg(&id)
        .arg("--zone")
        .arg(&zone)
        .arg("--lease-ttl-ms")
        .arg(args.lease_ttl_ms.to_string())
        .args(common_flags(args, grpc, admin, ports));
    if !args.plaintext {
        let dir = args.data_dir.join("certs");
        command
            .arg("--advertise")
            .arg(format!("https://127.0.0.1:{grpc}"))
            .arg("--tls-cert")
            .arg(dir.join(format!("{id}.pem")))
            .arg("--tls-key")
            .arg(dir.join(format!("{id}.key")))
            .arg("--tls-client-ca")
            .arg(dir.join("ca.pem"));
    }
    launch(command, id, grpc, admin, binary, logs)
}

/// Flags every process of the local fleet gets: its sockets, the shared
/// store, placement settings and the member list.
fn common_flags(args: &DevArgs, grpc: u16, admin: u16, ports: &[(u16, u16)]) -> Vec<String> {
    let mut flags = vec![
        "--listen".to_owned(),
        format!("127.0.0.1:{grpc}"),
        "--admin-listen".to_owned(),
        format!("127.0.0.1:{admin}"),
        "--storage".to_owned(),
        args.storage.clone(),
        "--data-dir".to_owned(),
        args.data_dir.join("data").display().to_string(),
        "--replicas".to_owned(),
        args.replicas.to_string(),
    ];
    flags.extend(member_flags(args, ports));
    flags
}

/// Starts `command`, logging to `logs/ID.log`, killed if the CLI dies.
fn launch(
    mut command: Command,
    id: String,
    grpc: u16,
    admin: u16,
    binary: &Path,
    logs: &Path,
) -> anyhow::Result<Node> {
    let log = std::fs::File::create(logs.join(format!("{id}.log")))?;
    let child = command
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

fn scheme(args: &DevArgs) -> &'static str {
    if args.plaintext { "http" } else { "https" }
}

fn member_flags(args: &DevArgs, ports: &[(u16, u16)]) -> Vec<String> {
    ports
        .iter()
        .enumerate()
        .flat_map(|(index, (grpc, _))| {
            let zone = char::from(b'a' + u8::try_from(index).unwrap_or(0));
            let scheme = scheme(args);
            [
                "--member".to_owned(),
                format!("node-{}={scheme}://127.0.0.1:{grpc},zone=zone-{zone}", index + 1),
            ]
        })
        .collect()
}

/// The mTLS certificates of the local fleet, made once and kept.
fn certs(args: &DevArgs) -> anyhow::Result<crate::certs::CertsArgs> {
    let certs = crate::certs::CertsArgs {
        out: args.data_dir.join("certs"),
        nodes: (1..=args.nodes).map(|i| format!("node-{i}")).collect(),
        ingresses: vec!["corium-fleet-ingress".to_owned()],
        force: true,
    };
    if !crate::certs::complete(&certs) {
        crate::certs::generate(&certs)?;
    }
    Ok(certs)
}

fn spawn_ingress(args: &DevArgs, ports: &[(u16, u16)], logs: &Path) -> anyhow::Result<Node> {
    let (grpc, admin) = (free_port()?, free_port()?);
    let binary = sibling_binary("corium-fleet-ingress");
    let mut command = Command::new(&binary);
    command.args(common_flags(args, grpc, admin, ports));
    if !args.plaintext {
        let dir = args.data_dir.join("certs");
        command
            .arg("--upstream-ca")
            .arg(dir.join("ca.pem"))
            .arg("--upstream-cert")
            .arg(dir.join("corium-fleet-ingress.pem"))
            .arg("--upstream-key")
            .arg(dir.join("corium-fleet-ingress.key"));
    }
    launch(command, "ingress-1".to_owned(), grpc, admin, &binary, logs)
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let logs = args.data_dir.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("cannot create {}", logs.display()))?;
    if !args.plaintext {
        certs(&args)?;
    }
    let binary = sibling_binary("corium-fleet-transactor");
    let ports = (0..args.nodes)
        .map(|_| Ok((free_port()?, free_port()?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut nodes = Vec::new();
    for index in 0..args.nodes {
        match spawn(&args, &binary, index, &ports, &logs) {
            Ok(node) => nodes.push(node),
            Err(error) => {
                stop(&mut nodes).await;
                return Err(error);
            }
        }
    }
    match spawn_ingress(&args, &ports, &logs) {
        Ok(ingress) => nodes.push(ingress),
        Err(error) => {
            stop(&mut nodes).await;
            return Err(error);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_secs);
    for index in 0..nodes.len() {
        loop {
            if ready(nodes[index].admin).await {
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
        let scheme = if node.id.starts_with("node") {
            scheme(&args)
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
    use tokio::signal::unix::{SignalKind, signal};
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
