//! How a fleet process is started on one machine: the command line of a
//! transactor node and of an ingress, built from one description, and the
//! readiness probe. The local launcher (`corium-fleet dev`) and the
//! multi-process tests both start their processes through this module, so
//! the fleet a developer runs is started the way the tests start theirs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::placement::Member;

/// The certificate name every ingress of a local fleet presents; nodes
/// trust `corium-principal` only from it.
pub const INGRESS_IDENTITY: &str = "corium-fleet-ingress";

/// A directory of PEM files as `corium-fleet certs` writes it: `ca.pem`
/// and `NAME.pem` / `NAME.key` per node or ingress.
#[derive(Clone, Debug)]
pub struct Certs(pub PathBuf);

impl Certs {
    fn file(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

/// What every process of one fleet shares.
#[derive(Clone, Debug)]
pub struct Shared<'a> {
    /// The `--storage` value.
    pub storage: &'a str,
    /// The `--data-dir` (a filesystem store lives under it).
    pub data_dir: &'a Path,
    /// Static members (`--member`), or `None` for the node registry.
    pub members: Option<&'a [Member]>,
    /// Candidates per database (`--replicas`); `None`: the default.
    pub replicas: Option<usize>,
    /// The internal hop's mTLS material, or `None` for cleartext.
    pub certs: Option<&'a Certs>,
    /// `--dev-token-operator`: the public development token is a fleet
    /// operator — a local development fleet (`corium-fleet dev`, the tests'
    /// fleets), never a deployment.
    pub dev_token_operator: bool,
}

/// One transactor node.
#[derive(Clone, Debug)]
pub struct NodeProcess<'a> {
    /// Where it is and what it advertises (`endpoint` is its `--advertise`).
    pub member: &'a Member,
    /// Its gRPC listener.
    pub listen: SocketAddr,
    /// Its admin HTTP listener.
    pub admin_listen: SocketAddr,
    /// The write-lease TTL; `None`: the default.
    pub lease_ttl: Option<Duration>,
}

/// `--member` flags naming every member.
#[must_use]
pub fn member_args(members: &[Member]) -> Vec<String> {
    members
        .iter()
        .flat_map(|member| {
            [
                "--member".to_owned(),
                format!("{}={},zone={}", member.node_id, member.endpoint, member.zone),
            ]
        })
        .collect()
}

fn shared_args(shared: &Shared<'_>, listen: SocketAddr, admin_listen: SocketAddr) -> Vec<String> {
    let mut args = vec![
        "--listen".to_owned(),
        listen.to_string(),
        "--admin-listen".to_owned(),
        admin_listen.to_string(),
        "--storage".to_owned(),
        shared.storage.to_owned(),
        "--data-dir".to_owned(),
        shared.data_dir.display().to_string(),
    ];
    if let Some(replicas) = shared.replicas {
        args.extend(["--replicas".to_owned(), replicas.to_string()]);
    }
    if let Some(members) = shared.members {
        args.extend(member_args(members));
    }
    if shared.dev_token_operator {
        args.push("--dev-token-operator".to_owned());
    }
    args
}

/// The command line of a transactor node.
#[must_use]
pub fn node_args(shared: &Shared<'_>, node: &NodeProcess<'_>) -> Vec<String> {
    let member = node.member;
    let mut args = vec![
        "--node-id".to_owned(),
        member.node_id.clone(),
        "--zone".to_owned(),
        member.zone.clone(),
        "--advertise".to_owned(),
        member.endpoint.clone(),
    ];
    if let Some(ttl) = node.lease_ttl {
        args.extend(["--lease-ttl-ms".to_owned(), ttl.as_millis().to_string()]);
    }
    args.extend(shared_args(shared, node.listen, node.admin_listen));
    if let Some(certs) = shared.certs {
        args.extend([
            "--tls-cert".to_owned(),
            certs.file(&format!("{}.pem", member.node_id)),
            "--tls-key".to_owned(),
            certs.file(&format!("{}.key", member.node_id)),
            "--tls-client-ca".to_owned(),
            certs.file("ca.pem"),
        ]);
    }
    args
}

/// The command line of an ingress (clients in cleartext on `listen`).
#[must_use]
pub fn ingress_args(shared: &Shared<'_>, listen: SocketAddr, admin_listen: SocketAddr) -> Vec<String> {
    let mut args = shared_args(shared, listen, admin_listen);
    if let Some(certs) = shared.certs {
        args.extend([
            "--upstream-ca".to_owned(),
            certs.file("ca.pem"),
            "--upstream-cert".to_owned(),
            certs.file(&format!("{INGRESS_IDENTITY}.pem")),
            "--upstream-key".to_owned(),
            certs.file(&format!("{INGRESS_IDENTITY}.key")),
        ]);
    }
    args
}

/// Whether the process with this admin listener answers `/readyz` with 200
/// (bounded by 2 s).
pub async fn is_ready(admin: SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await.ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, port: u16) -> Member {
        Member {
            node_id: id.into(),
            zone: format!("zone-{id}"),
            weight: 1,
            endpoint: format!("https://127.0.0.1:{port}"),
        }
    }

    fn value<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|pair| pair[0] == flag)
            .map(|pair| pair[1].as_str())
            .collect()
    }

    #[test]
    fn a_node_gets_its_identity_sockets_store_members_and_certificates() {
        let members = [member("n1", 7001), member("n2", 7002)];
        let certs = Certs(PathBuf::from("/c"));
        let shared = Shared {
            storage: "filesystem",
            data_dir: Path::new("/d"),
            members: Some(&members),
            replicas: Some(2),
            certs: Some(&certs),
            dev_token_operator: true,
        };
        let args = node_args(
            &shared,
            &NodeProcess {
                member: &members[1],
                listen: "127.0.0.1:7002".parse().unwrap(),
                admin_listen: "127.0.0.1:9002".parse().unwrap(),
                lease_ttl: Some(Duration::from_millis(1500)),
            },
        );
        assert_eq!(value(&args, "--node-id"), ["n2"]);
        assert_eq!(value(&args, "--advertise"), ["https://127.0.0.1:7002"]);
        assert_eq!(value(&args, "--lease-ttl-ms"), ["1500"]);
        assert_eq!(
            value(&args, "--member"),
            [
                "n1=https://127.0.0.1:7001,zone=zone-n1",
                "n2=https://127.0.0.1:7002,zone=zone-n2"
            ]
        );
        assert_eq!(value(&args, "--tls-cert"), ["/c/n2.pem"]);
        assert_eq!(value(&args, "--tls-client-ca"), ["/c/ca.pem"]);
        let ingress = ingress_args(
            &shared,
            "127.0.0.1:8000".parse().unwrap(),
            "127.0.0.1:9000".parse().unwrap(),
        );
        assert_eq!(
            value(&ingress, "--upstream-cert"),
            ["/c/corium-fleet-ingress.pem"]
        );
        assert!(value(&ingress, "--node-id").is_empty());
        assert!(ingress.iter().any(|arg| arg == "--dev-token-operator"));
    }

    #[test]
    fn a_registry_fleet_in_cleartext_names_no_members_and_no_certificates() {
        let me = member("n1", 7001);
        let shared = Shared {
            storage: "postgres://x@h/db",
            data_dir: Path::new("/d"),
            members: None,
            replicas: None,
            certs: None,
            dev_token_operator: false,
        };
        let args = node_args(
            &shared,
            &NodeProcess {
                member: &me,
                listen: "127.0.0.1:7001".parse().unwrap(),
                admin_listen: "127.0.0.1:9001".parse().unwrap(),
                lease_ttl: None,
            },
        );
        assert!(
            !args
                .iter()
                .any(|arg| arg == "--member" || arg == "--tls-cert" || arg == "--replicas")
        );
        assert_eq!(value(&args, "--storage"), ["postgres://x@h/db"]);
    }
}
