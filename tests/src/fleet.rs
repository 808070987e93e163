//! A fleet of transactor processes over one store, and the ingresses in
//! front of it: [`Fleet::builder`] is the one way to start one.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use corium_fleet_common::launch;
use corium_fleet_common::placement::{self, Member};

use crate::backend::Backend;
use crate::node::{Node, WithLogs};
use crate::ports::{bin_dir, free_port};
use crate::proxy::Partition;

/// A fleet of transactor processes sharing one store.
pub struct Fleet {
    /// The transactor nodes, `node-1` first.
    pub nodes: Vec<Node>,
    /// Ingress processes, started with [`Fleet::start_ingresses`].
    pub ingresses: Vec<Node>,
    /// Whether the internal hop is mTLS.
    mtls: bool,
    /// Whether nodes and ingresses get the `--member` list (else: registry).
    static_members: bool,
    /// Whether processes get `--dev-token-operator`.
    dev_token_operator: bool,
    /// Per node, the cuttable path to its storage server (`PostgreSQL` and S3
    /// fleets only).
    pub partitions: Vec<Option<Partition>>,
    /// The members placement ranks, one per node, in node order.
    pub members: Vec<Member>,
    /// Candidates per database (the nodes' default).
    pub replicas: usize,
    /// The storage every node shares.
    pub backend: Backend,
    /// The nodes' lease TTL.
    pub lease_ttl: Duration,
    /// Where new processes' binaries come from (`target/debug` unless
    /// [`FleetBuilder::binaries`] or [`Fleet::run_binaries_from`] said).
    binaries: PathBuf,
    /// Data directory, certificates and logs.
    dir: tempfile::TempDir,
}

/// How to start a fleet: [`Fleet::builder`], then [`FleetBuilder::start`].
#[derive(Clone, Debug)]
pub struct FleetBuilder {
    backend: Backend,
    nodes: usize,
    lease_ttl: Duration,
    mtls: bool,
    static_members: bool,
    dev_token_operator: bool,
    node_flags: Vec<String>,
    env: Vec<(String, String)>,
    /// Node index → a loopback port in front of it that it advertises (a
    /// [`crate::scripted::ScriptedHop`]): routing reaches the node through it.
    fronts: Vec<(usize, u16)>,
    /// Where the processes' binaries come from.
    binaries: PathBuf,
}

impl FleetBuilder {
    /// Transactor nodes, each in its own zone (default 3).
    #[must_use]
    pub fn nodes(mut self, count: usize) -> Self {
        self.nodes = count;
        self
    }

    /// The lease TTL (default 1.5 s).
    #[must_use]
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// The internal hop on mTLS: certificates from `corium-fleet certs`,
    /// nodes serving mTLS only, ingresses presenting the ingress certificate.
    #[must_use]
    pub fn mtls(mut self) -> Self {
        self.mtls = true;
        self
    }

    /// No `--member` lists: nodes (and ingresses) find each other through
    /// the node registry in storage.
    #[must_use]
    pub fn registry(mut self) -> Self {
        self.static_members = false;
        self
    }

    /// Processes take the development token as the bare binaries do: a
    /// data admin, not a fleet operator (no `--dev-token-operator`, which
    /// local development fleets get by default).
    #[must_use]
    pub fn bare_auth(mut self) -> Self {
        self.dev_token_operator = false;
        self
    }

    /// Extra flags for every node.
    #[must_use]
    pub fn node_flags(mut self, flags: &[&str]) -> Self {
        self.node_flags
            .extend(flags.iter().map(|flag| (*flag).to_owned()));
        self
    }

    /// Environment for every node (fault injection).
    #[must_use]
    pub fn env(mut self, env: &[(&str, &str)]) -> Self {
        self.env.extend(
            env.iter()
                .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
        );
        self
    }

    /// Node `index` advertises `port` (a hop in front of it) instead of its
    /// own listener; start whatever listens there before the fleet.
    #[must_use]
    pub fn front(mut self, index: usize, port: u16) -> Self {
        self.fronts.push((index, port));
        self
    }

    /// Runs every process from the binaries in `dir` instead of the
    /// workspace's (an upgrade test's previous release).
    #[must_use]
    pub fn binaries(mut self, dir: &Path) -> Self {
        dir.clone_into(&mut self.binaries);
        self
    }

    /// Starts the nodes and waits until each is ready.
    ///
    /// # Panics
    /// When certificates cannot be made or a node does not become ready
    /// within 60 s.
    pub async fn start(self) -> Fleet {
        Fleet::launch(self).await
    }

    /// Starts the nodes and one ingress with its default flags, and waits
    /// until each is ready; the fleet and the ingress's endpoint.
    ///
    /// # Panics
    /// As [`FleetBuilder::start`], or when the ingress is not ready within
    /// 60 s.
    pub async fn start_with_ingress(self) -> (Fleet, String) {
        let mut fleet = self.start().await;
        fleet.start_ingresses(1, &[]).await;
        let address = fleet.ingresses[0].endpoint();
        (fleet, address)
    }

    /// [`FleetBuilder::start_with_ingress`], then creates `db` through the
    /// ingress; the fleet and the ingress's endpoint.
    ///
    /// # Panics
    /// As [`FleetBuilder::start_with_ingress`], or when `db` cannot be
    /// created.
    pub async fn start_with_database(self, db: &str) -> (Fleet, String) {
        let (fleet, address) = self.start_with_ingress().await;
        let created = crate::corium::create(&address, db)
            .await
            .unwrap_or_else(|status| panic!("create {db}: {status:?}\n{}", fleet.logs()));
        assert!(created, "{db} was created, not found existing");
        (fleet, address)
    }

    /// The members placement ranks: `node-N` in `zone-N`, at its own
    /// listener or the port fronting it.
    fn members(&self, grpc_ports: &[u16]) -> Vec<Member> {
        let scheme = if self.mtls { "https" } else { "http" };
        grpc_ports
            .iter()
            .enumerate()
            .map(|(i, grpc)| {
                let advertised = self
                    .fronts
                    .iter()
                    .find(|(index, _)| *index == i)
                    .map_or(*grpc, |(_, port)| *port);
                Member {
                    node_id: format!("node-{}", i + 1),
                    zone: format!("zone-{}", i + 1),
                    weight: 1,
                    endpoint: format!("{scheme}://127.0.0.1:{advertised}"),
                }
            })
            .collect()
    }
}

/// `127.0.0.1:port`.
fn loopback(port: u16) -> std::net::SocketAddr {
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

/// Makes the certificates of an mTLS fleet of `count` nodes in `certs`.
fn make_certs(certs: &Path, count: usize) {
    let mut command = Command::new(bin_dir().join("corium-fleet"));
    command
        .arg("certs")
        .arg("--out")
        .arg(certs)
        .arg("--ingress")
        .arg(launch::INGRESS_IDENTITY);
    for i in 1..=count {
        command.arg("--node").arg(format!("node-{i}"));
    }
    let output = command.output().expect("corium-fleet certs runs");
    assert!(
        output.status.success(),
        "certs: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Fleet {
    /// A fleet on `backend`: 3 nodes in 3 zones, lease TTL 1.5 s, static
    /// members, cleartext inside, unless told otherwise.
    #[must_use]
    pub fn builder(backend: Backend) -> FleetBuilder {
        FleetBuilder {
            backend,
            nodes: 3,
            lease_ttl: Duration::from_millis(1500),
            mtls: false,
            static_members: true,
            dev_token_operator: true,
            node_flags: Vec::new(),
            env: Vec::new(),
            fronts: Vec::new(),
            binaries: bin_dir(),
        }
    }

    /// A filesystem fleet of `nodes` nodes, each started with `node_flags`
    /// (all else as [`Fleet::builder`] has it), and one ingress with its
    /// default flags; the fleet and the ingress's endpoint.
    ///
    /// # Panics
    /// As [`FleetBuilder::start_with_ingress`].
    pub async fn filesystem_with_ingress(nodes: usize, node_flags: &[&str]) -> (Self, String) {
        Self::builder(Backend::Filesystem)
            .nodes(nodes)
            .node_flags(node_flags)
            .start_with_ingress()
            .await
    }

    /// The certificate directory of an mTLS fleet.
    #[must_use]
    pub fn certs(&self) -> Option<PathBuf> {
        self.mtls.then(|| self.dir.path().join("certs"))
    }

    /// Issues new certificates for `names` under this mTLS fleet's CA
    /// (`corium-fleet certs --renew`): a rotation of existing names, or new
    /// holders of the fleet CA.
    ///
    /// # Panics
    /// On a cleartext fleet, or when the command fails.
    pub fn issue_certs(&self, names: &[&str]) {
        let mut command = Command::new(bin_dir().join("corium-fleet"));
        command
            .args(["certs", "--renew", "--out"])
            .arg(self.certs().expect("an mTLS fleet"));
        // Exactly these names: naming one as an ingress too keeps the
        // command's default lists (every node, the ingress) out of it.
        let first = names.first().expect("at least one name");
        command.arg("--ingress").arg(first);
        for name in names {
            command.arg("--node").arg(name);
        }
        let output = command.output().expect("corium-fleet certs runs");
        assert!(
            output.status.success(),
            "certs --renew: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A TLS channel to `port` on loopback trusting this fleet's CA, as the
    /// holder of certificate `identity` (a name in the certificate
    /// directory), or with no client certificate.
    ///
    /// # Errors
    /// The connection or its handshake failed.
    ///
    /// # Panics
    /// On a cleartext fleet, or when a certificate file is missing.
    pub async fn tls_channel(
        &self,
        port: u16,
        identity: Option<&str>,
    ) -> Result<tonic::transport::Channel, tonic::transport::Error> {
        let certs = self.certs().expect("an mTLS fleet");
        let read = |name: &str| std::fs::read(certs.join(name)).expect("certificate file");
        let mut tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(read("ca.pem")))
            .domain_name("localhost");
        if let Some(name) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                read(&format!("{name}.pem")),
                read(&format!("{name}.key")),
            ));
        }
        tonic::transport::Endpoint::from_shared(format!("https://127.0.0.1:{port}"))
            .expect("a URL")
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .tls_config(tls)?
            .connect()
            .await
    }

    async fn launch(plan: FleetBuilder) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let certs = dir.path().join("certs");
        if plan.mtls {
            make_certs(&certs, plan.nodes);
        }
        let ports: Vec<(u16, u16)> = (0..plan.nodes).map(|_| (free_port(), free_port())).collect();
        let grpc_ports: Vec<u16> = ports.iter().map(|(grpc, _)| *grpc).collect();
        let members = plan.members(&grpc_ports);
        let data_dir = dir.path().join("data");
        let launch_certs = plan.mtls.then(|| launch::Certs(certs.clone()));
        let mut nodes = Vec::new();
        let mut partitions = Vec::new();
        for (member, (grpc, admin)) in members.iter().zip(&ports) {
            let partition = match plan.backend.through(0) {
                Some((target, _)) => Some(Partition::start(target).await),
                None => None,
            };
            let reached = match &partition {
                Some(partition) => plan.backend.through(partition.port).expect("a storage server").1,
                None => plan.backend.clone(),
            };
            partitions.push(partition);
            let storage = reached.flag();
            let shared = launch::Shared {
                storage: &storage,
                data_dir: &data_dir,
                members: plan.static_members.then_some(members.as_slice()),
                replicas: None,
                certs: launch_certs.as_ref(),
                dev_token_operator: plan.dev_token_operator,
            };
            let mut args = launch::node_args(
                &shared,
                &launch::NodeProcess {
                    member,
                    listen: loopback(*grpc),
                    admin_listen: loopback(*admin),
                    lease_ttl: Some(plan.lease_ttl),
                },
            );
            args.extend(
                reached
                    .flags()
                    .into_iter()
                    .flat_map(|(flag, value)| [flag.to_owned(), value]),
            );
            args.extend(plan.node_flags.iter().cloned());
            let mut node = Node {
                binary: "corium-fleet-transactor",
                binaries: plan.binaries.clone(),
                id: member.node_id.clone(),
                zone: member.zone.clone(),
                grpc: *grpc,
                admin: *admin,
                args,
                env: reached
                    .env()
                    .into_iter()
                    .chain(plan.env.iter().cloned())
                    .collect(),
                child: None,
                log: dir.path().join(format!("{}.log", member.node_id)),
            };
            node.spawn();
            nodes.push(node);
        }
        let mut fleet = Self {
            nodes,
            ingresses: Vec::new(),
            mtls: plan.mtls,
            static_members: plan.static_members,
            dev_token_operator: plan.dev_token_operator,
            partitions,
            members,
            replicas: placement::DEFAULT_REPLICAS,
            backend: plan.backend,
            lease_ttl: plan.lease_ttl,
            binaries: plan.binaries,
            dir,
        };
        for index in 0..fleet.nodes.len() {
            fleet.wait_ready(index).await;
        }
        fleet
    }

    /// Runs processes started from now (ingresses, added nodes) from the
    /// binaries in `dir`; a running node moves with
    /// [`Node::run_binaries_from`] and a restart.
    pub fn run_binaries_from(&mut self, dir: &Path) {
        dir.clone_into(&mut self.binaries);
    }

    /// Waits until node `index` answers `/readyz`, failing fast if it exits.
    ///
    /// # Panics
    /// When the node exits or is not ready within 60 s.
    pub async fn wait_ready(&mut self, index: usize) {
        self.nodes[index].wait_ready().await;
    }

    /// Starts `count` ingresses over this fleet with `extra` flags and waits
    /// until each is ready.
    ///
    /// # Panics
    /// When an ingress does not become ready within 60 s.
    pub async fn start_ingresses(&mut self, count: usize, extra: &[&str]) {
        self.start_ingresses_with_env(count, extra, &[]).await;
    }

    /// [`Fleet::start_ingresses`], with `env` in each ingress's environment.
    ///
    /// # Panics
    /// When an ingress does not become ready within 60 s.
    pub async fn start_ingresses_with_env(&mut self, count: usize, extra: &[&str], env: &[(&str, &str)]) {
        self.start_ingress_processes(count, extra, env, None).await;
    }

    /// Starts one ingress (with `extra` flags) whose storage is reached
    /// through a cuttable path of its own, and returns the path.
    ///
    /// # Panics
    /// On a filesystem fleet, or when the ingress is not ready in 60 s.
    pub async fn start_ingress_behind_partition(&mut self, extra: &[&str]) -> Partition {
        let probe = self.backend.through(0).expect("a PostgreSQL or S3 fleet");
        let partition = Partition::start(probe.0).await;
        let (_, reached) = self
            .backend
            .through(partition.port)
            .expect("a PostgreSQL or S3 fleet");
        self.start_ingress_processes(1, extra, &[], Some(reached)).await;
        partition
    }

    async fn start_ingress_processes(
        &mut self,
        count: usize,
        extra: &[&str],
        env: &[(&str, &str)],
        reached: Option<Backend>,
    ) {
        for _ in 0..count {
            let (grpc, admin) = (free_port(), free_port());
            let id = format!("ingress-{}", self.ingresses.len() + 1);
            let reached = reached.clone().unwrap_or_else(|| self.backend.clone());
            let storage = reached.flag();
            let data_dir = self.dir.path().join("data");
            let certs = self.certs().map(launch::Certs);
            let shared = launch::Shared {
                storage: &storage,
                data_dir: &data_dir,
                members: self.static_members.then_some(self.members.as_slice()),
                replicas: None,
                certs: certs.as_ref(),
                dev_token_operator: self.dev_token_operator,
            };
            let mut args = launch::ingress_args(&shared, loopback(grpc), loopback(admin));
            args.extend(
                reached
                    .flags()
                    .into_iter()
                    .flat_map(|(flag, value)| [flag.to_owned(), value]),
            );
            args.extend(extra.iter().map(|flag| (*flag).to_owned()));
            let mut ingress = Node {
                binary: "corium-fleet-ingress",
                binaries: self.binaries.clone(),
                log: self.dir.path().join(format!("{id}.log")),
                id,
                zone: String::new(),
                grpc,
                admin,
                args,
                env: reached
                    .env()
                    .into_iter()
                    .chain(
                        env.iter()
                            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned())),
                    )
                    .collect(),
                child: None,
            };
            ingress.spawn();
            ingress.wait_ready().await;
            self.ingresses.push(ingress);
        }
    }

    /// Starts one more transactor node (`node-N`, in its own zone) on a
    /// registry fleet, with the first node's other flags, and waits until
    /// it is ready; placement in [`Fleet::candidates`] includes it from now.
    ///
    /// # Panics
    /// On a static-member or mTLS fleet, or when the node is not ready in 60 s.
    pub async fn add_node(&mut self) -> usize {
        assert!(
            !self.static_members && !self.mtls,
            "add_node needs a plain registry fleet"
        );
        let number = self.nodes.len() + 1;
        let (grpc, admin) = (free_port(), free_port());
        let member = Member {
            node_id: format!("node-{number}"),
            zone: format!("zone-{number}"),
            weight: 1,
            endpoint: format!("http://127.0.0.1:{grpc}"),
        };
        let mut args = self.nodes[0].args.clone();
        for (flag, value) in [
            ("--node-id", member.node_id.clone()),
            ("--zone", member.zone.clone()),
            ("--listen", format!("127.0.0.1:{grpc}")),
            ("--admin-listen", format!("127.0.0.1:{admin}")),
            ("--advertise", member.endpoint.clone()),
            ("--storage", self.backend.flag()),
        ]
        .into_iter()
        .chain(self.backend.flags())
        {
            let at = args
                .iter()
                .position(|arg| arg == flag)
                .expect("every node has this flag");
            args[at + 1] = value;
        }
        let mut node = Node {
            binary: "corium-fleet-transactor",
            binaries: self.binaries.clone(),
            id: member.node_id.clone(),
            zone: member.zone.clone(),
            grpc,
            admin,
            args,
            env: self.backend.env(),
            child: None,
            log: self.dir.path().join(format!("{}.log", member.node_id)),
        };
        node.spawn();
        self.nodes.push(node);
        self.members.push(member);
        self.partitions.push(None);
        let index = self.nodes.len() - 1;
        self.wait_ready(index).await;
        index
    }

    /// A path in the fleet's temporary directory.
    #[must_use]
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Index of node `id`.
    ///
    /// # Panics
    /// When no node has that id.
    #[must_use]
    pub fn index(&self, id: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// The endpoints of the fleet's ingresses, in start order.
    #[must_use]
    pub fn ingress_endpoints(&self) -> Vec<String> {
        self.ingresses.iter().map(Node::endpoint).collect()
    }

    /// Ranked candidate node indexes of `db` (the same function the nodes use).
    #[must_use]
    pub fn candidates(&self, db: &str) -> Vec<usize> {
        placement::candidates(db, &self.members, self.replicas)
            .iter()
            .map(|m| self.index(&m.node_id))
            .collect()
    }

    /// Index of the best-ranked candidate of `db` other than node `not`
    /// (its owner, say): where a handoff or a takeover goes.
    #[must_use]
    pub fn other_candidate(&self, db: &str, not: usize) -> Option<usize> {
        self.candidates(db)
            .into_iter()
            .find(|candidate| *candidate != not)
    }

    /// Asks node `from` to hand `db` to node `to` (the operator's planned
    /// move), returning its answer.
    ///
    /// # Errors
    /// The node's refusal.
    pub async fn handoff(
        &self,
        from: usize,
        db: &str,
        to: usize,
    ) -> Result<corium_fleet_proto::fleet::HandoffResponse, tonic::Status> {
        crate::corium::admin(&self.nodes[from].endpoint())
            .await
            .handoff(corium_fleet_proto::fleet::HandoffRequest {
                database: db.to_owned(),
                target_node_id: self.nodes[to].id.clone(),
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// Index of a node that is not a candidate of `db`.
    #[must_use]
    pub fn non_candidate(&self, db: &str) -> Option<usize> {
        let candidates = self.candidates(db);
        (0..self.nodes.len()).find(|i| !candidates.contains(i))
    }

    /// Waits (at most `within`) until node `index`'s `/metrics` has the
    /// line `sample` (`series value`).
    ///
    /// # Panics
    /// When it has not by then: the message names `what` and shows the last
    /// metrics read and every process's log.
    pub async fn await_node_metric(
        &self,
        index: usize,
        sample: &str,
        within: Duration,
        what: impl fmt::Display,
    ) {
        crate::eventually(within, what, async || {
            // A node too busy to answer in time is asked again.
            let Some((_, metrics)) = crate::http_get(self.nodes[index].admin, "/metrics").await else {
                return Err(self.with_logs(format!("{} did not answer /metrics", self.nodes[index].id)));
            };
            if metrics.lines().any(|line| line == sample) {
                Ok(())
            } else {
                Err(self.with_logs(metrics))
            }
        })
        .await;
    }

    /// Every process's log, for failure messages.
    #[must_use]
    pub fn logs(&self) -> String {
        self.with_logs("").to_string()
    }

    /// `state`, then every process's log as it is when displayed: what an
    /// [`crate::eventually()`] probe returns while it waits.
    #[must_use]
    pub fn with_logs<S: fmt::Display>(&self, state: S) -> WithLogs<'_, S> {
        WithLogs::new(
            state,
            self.nodes
                .iter()
                .chain(&self.ingresses)
                .map(|node| (node.id.as_str(), node.log.as_path()))
                .collect(),
        )
    }
}
