//! Starting the local fleet: free ports chosen all at once, every node and
//! then the ingress spawned, each start watched until every process is
//! ready — again on new ports when another process took one first.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use corium_fleet_common::launch;
use corium_fleet_common::placement::Member;

use super::args::DevArgs;
use super::process::{Process, seconds};
use super::signals::{Signals, stop};

/// How often the fleet starts again on new ports when a port it chose was
/// taken before its process could bind it.
const START_ATTEMPTS: u32 = 5;
/// `count` distinct free ports on loopback: bound all at once (so no two are
/// the same), then released for the children to bind. Another process can
/// still take one before its child binds it; the start then goes again on
/// new ports.
fn free_ports(count: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot find free ports on 127.0.0.1")?;
    Ok(listeners
        .iter()
        .map(|listener| listener.local_addr().map(|addr| addr.port()))
        .collect::<std::io::Result<Vec<_>>>()?)
}

/// A fleet binary: beside this one (one cargo target directory), else on PATH.
fn sibling_binary(name: &str) -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(name)))
        .filter(|path| path.exists())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// The local fleet's members: `node-N` in `zone-X`, on the given gRPC ports.
fn members(args: &DevArgs, grpc_ports: &[u16]) -> Vec<Member> {
    let scheme = if args.plaintext { "http" } else { "https" };
    grpc_ports
        .iter()
        .enumerate()
        .map(|(index, grpc)| Member {
            node_id: format!("node-{}", index + 1),
            zone: format!("zone-{}", char::from(b'a' + u8::try_from(index).unwrap_or(0))),
            weight: 1,
            endpoint: format!("{scheme}://127.0.0.1:{grpc}"),
        })
        .collect()
}

/// The ports of one start: `(gRPC, admin)` per node, then the ingress's.
/// The first start takes `--try-ports` first.
fn choose_ports(args: &DevArgs, first: bool) -> anyhow::Result<Vec<(u16, u16)>> {
    let count = 2 * (usize::from(args.nodes) + 1);
    // `--port`, held while the others are chosen so none of them is it.
    let fixed = match args.port {
        0 => None,
        port => Some(std::net::TcpListener::bind(("127.0.0.1", port)).with_context(|| {
            format!(
                "port {port} on 127.0.0.1 is in use (another `corium-fleet dev`, or a stock Corium on its \
                 default port?): pass --port N, or --port 0 for a free one"
            )
        })?),
    };
    let given: &[u16] = if first { &args.try_ports } else { &[] };
    let mut ports: Vec<u16> = given.iter().copied().take(count).collect();
    ports.extend(free_ports(count - ports.len())?);
    if fixed.is_some() {
        // The ingress's gRPC port: after every node's two.
        ports[2 * usize::from(args.nodes)] = args.port;
    }
    drop(fixed);
    Ok(ports.chunks(2).map(|pair| (pair[0], pair[1])).collect())
}

/// Starts every node, then the ingress (last in the returned list), on
/// `ports`; on a failure to start one, stops what started.
async fn spawn_all(
    args: &DevArgs,
    ports: &[(u16, u16)],
    logs: &Path,
    signals: &mut Signals,
) -> anyhow::Result<Vec<Process>> {
    let (node_ports, ingress_ports) = ports.split_at(usize::from(args.nodes));
    let grpc_ports: Vec<u16> = node_ports.iter().map(|&(grpc, _)| grpc).collect();
    let members = members(args, &grpc_ports);
    let data_dir = args.data_dir.join("data");
    let certs = (!args.plaintext).then(|| launch::Certs(args.data_dir.join("certs")));
    let shared = launch::Shared {
        storage: &args.storage,
        data_dir: &data_dir,
        members: Some(&members),
        replicas: Some(usize::from(args.replicas)),
        certs: certs.as_ref(),
        dev_token_operator: true,
    };
    let loopback = |port: u16| std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let transactor = sibling_binary("corium-fleet-transactor");
    let mut launches = Vec::new();
    for (member, &(grpc, admin)) in members.iter().zip(node_ports) {
        let mut command_line = launch::node_args(
            &shared,
            &launch::NodeProcess {
                member,
                listen: loopback(grpc),
                admin_listen: loopback(admin),
                lease_ttl: Some(Duration::from_millis(args.lease_ttl_ms)),
            },
        );
        // A restarted node waits for its previous registry record to
        // expire before it serves: keep that short on a laptop (3 s, not
        // the production 10 s), as the tests do.
        command_line.extend(["--registry-ttl-ms", "3000", "--registry-renew-ms", "1000"].map(str::to_owned));
        launches.push((
            member.node_id.clone(),
            (grpc, admin),
            transactor.clone(),
            command_line,
        ));
    }
    let (grpc, admin) = ingress_ports[0];
    launches.push((
        "ingress-1".to_owned(),
        (grpc, admin),
        sibling_binary("corium-fleet-ingress"),
        launch::ingress_args(&shared, loopback(grpc), loopback(admin)),
    ));
    let mut processes = Vec::new();
    for (id, ports, binary, command_line) in launches {
        let log = logs.join(format!("{id}.log"));
        match Process::start(id, ports, binary, command_line, log) {
            Ok(process) => processes.push(process),
            Err(error) => {
                stop(&mut processes, signals).await;
                return Err(error);
            }
        }
    }
    Ok(processes)
}

/// How one start of the fleet ended.
enum Started {
    /// Every process answered `/readyz`.
    Ready,
    /// A process could not bind a port it was given: why.
    PortTaken(String),
    /// A signal came first.
    Stopped(&'static str),
}

/// One look at the starting fleet: exits (a taken port ends this start; a
/// refused configuration ends the command; anything else is started again
/// after its back-off), restarts that are due, readiness. `Some` once the
/// start is over; `last_exit` keeps each process's last exit for the
/// not-ready message.
async fn startup_pass(
    processes: &mut [Process],
    last_exit: &mut [Option<String>],
) -> anyhow::Result<Option<Started>> {
    for (process, last_exit) in processes.iter_mut().zip(last_exit.iter_mut()) {
        if let Some(exit) = process.exited() {
            let described = exit.describe();
            if exit.port_taken() {
                return Ok(Some(Started::PortTaken(format!(
                    "{} exited ({described})",
                    process.id
                ))));
            }
            if exit.refused_configuration() {
                bail!(
                    "{} refused its configuration ({described}); see {}",
                    process.id,
                    process.log().display()
                );
            }
            eprintln!(
                "corium-fleet: {} exited while starting ({described}); starting it again in {} s",
                process.id,
                seconds(process.restart_in().unwrap_or_default())
            );
            *last_exit = Some(described);
        }
        if process.restart_in() == Some(Duration::ZERO) {
            let pid = process.restart()?;
            eprintln!("corium-fleet: {} started again (pid {pid})", process.id);
        }
        process.became_ready().await;
    }
    // A child that exited after its probe answered (another process on its
    // port) is not ready: its exit is handled on the next pass.
    if processes
        .iter_mut()
        .all(|process| process.is_ready() && !process.has_exited())
    {
        return Ok(Some(Started::Ready));
    }
    Ok(None)
}

/// Why the fleet was not ready in time: the first process not ready, its
/// last exit if it had one, its log.
fn not_ready(args: &DevArgs, processes: &[Process], last_exit: &[Option<String>]) -> anyhow::Error {
    let index = processes
        .iter()
        .position(|process| !process.is_ready())
        .unwrap_or_default();
    let Some(process) = processes.get(index) else {
        return anyhow::anyhow!("the fleet was not ready within {} s", args.ready_timeout_secs);
    };
    let exited = last_exit
        .get(index)
        .and_then(Option::as_deref)
        .map(|exit| format!(" (it last exited: {exit})"))
        .unwrap_or_default();
    anyhow::anyhow!(
        "{} was not ready within {} s{exited}; see {}",
        process.id,
        args.ready_timeout_secs,
        process.log().display()
    )
}

/// Starts the fleet and waits until every process is ready (within
/// `--ready-timeout-secs`); starts it again on new ports when a port was
/// taken before a process bound it, at most [`START_ATTEMPTS`] times.
/// `None` when a signal came first (everything is stopped).
pub(super) async fn start(
    args: &DevArgs,
    logs: &Path,
    signals: &mut Signals,
) -> anyhow::Result<Option<Vec<Process>>> {
    let mut why = String::new();
    for attempt in 1..=START_ATTEMPTS {
        let ports = choose_ports(args, attempt == 1)?;
        let mut processes = spawn_all(args, &ports, logs, signals).await?;
        let deadline = Instant::now() + Duration::from_secs(args.ready_timeout_secs);
        let mut last_exit = vec![None; processes.len()];
        let outcome = loop {
            let pass = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                startup_pass(&mut processes, &mut last_exit).await
            };
            let result = tokio::select! {
                biased;
                reason = signals.recv() => Ok(Some(Started::Stopped(reason))),
                result = pass => result,
            };
            match result {
                Ok(Some(started)) => break Ok(started),
                Ok(None) if Instant::now() > deadline => break Err(not_ready(args, &processes, &last_exit)),
                Ok(None) => {}
                Err(error) => break Err(error),
            }
        };
        match outcome {
            Ok(Started::Ready) => return Ok(Some(processes)),
            Ok(Started::Stopped(reason)) => {
                eprintln!("corium-fleet: {reason} while starting; stopping the fleet");
                stop(&mut processes, signals).await;
                return Ok(None);
            }
            Ok(Started::PortTaken(reason)) => {
                stop(&mut processes, signals).await;
                if attempt < START_ATTEMPTS {
                    eprintln!(
                        "corium-fleet: {reason}: another process took the port before it bound it; \
                         starting the fleet again on new ports (start {} of {START_ATTEMPTS})",
                        attempt + 1
                    );
                }
                why = reason;
            }
            Err(error) => {
                stop(&mut processes, signals).await;
                return Err(error);
            }
        }
    }
    bail!(
        "{why}: other processes kept taking the ports chosen for the fleet ({START_ATTEMPTS} starts on new \
         ports); see {}",
        logs.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ports_of_a_start_are_distinct_and_the_first_start_takes_the_given_ones_first() {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            dev: DevArgs,
        }
        let args = Cli::parse_from(["dev", "--nodes", "2", "--try-ports", "1111,2222,3333"]).dev;
        let first = choose_ports(&args, true).unwrap();
        assert_eq!(first.len(), 3, "two nodes and the ingress");
        assert_eq!(&first[..1], &[(1111, 2222)]);
        assert_eq!(first[1].0, 3333);
        let again = choose_ports(&args, false).unwrap();
        let mut all: Vec<u16> = again.iter().flat_map(|&(grpc, admin)| [grpc, admin]).collect();
        assert!(!all.contains(&1111), "only the first start takes the given ports");
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 6, "distinct: {again:?}");
    }
}
