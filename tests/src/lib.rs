//! Harness for multi-process tests: starts real `corium-fleet-transactor`
//! processes on random loopback ports over a temporary data directory and a
//! real storage backend, and talks to them with real Corium clients.
//!
//! Layout:
//! - [`Backend`] — filesystem, or PostgreSQL (a fresh database per test on
//!   the server named by `CORIUM_FLEET_TEST_PG_URL`, which `make test`
//!   starts);
//! - [`Fleet`] / [`Node`] — process control: start, SIGKILL, SIGTERM;
//! - [`corium`] — small helpers over the stock `corium.v1` clients;
//! - [`proxy`] — a cuttable TCP path between a node and PostgreSQL;
//! - [`scripted`] — a scripted HTTP/2 hop in front of a node (what clients
//!   see when the hop to the owner misbehaves);
//! - [`checker`] — the fault suite's judge of the fleet's promises and its
//!   per-run report (both tiers);
//! - [`sim`] — the in-process simulation tier: seeded plans over hosts
//!   sharing one store through `FaultyStore`s.

pub mod checker;
pub mod corium;
pub mod load;
pub mod proxy;
pub mod scripted;
pub mod sim;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use corium_fleet_common::placement::{self, Member};

/// Storage a test fleet runs on.
#[derive(Clone, Debug)]
pub enum Backend {
    Filesystem,
    Postgres { url: String },
}

impl Backend {
    /// Every backend the suite runs against. PostgreSQL is required: `make
    /// test` starts a server and sets `CORIUM_FLEET_TEST_PG_URL`.
    ///
    /// # Panics
    /// When the PostgreSQL URL is not set (run the suite through `make test`).
    #[must_use]
    pub fn all() -> Vec<Self> {
        let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
            "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
        );
        vec![Self::Filesystem, Self::postgres(&base)]
    }

    /// A fresh, empty PostgreSQL database on the server at `base`.
    #[must_use]
    pub fn postgres(base: &str) -> Self {
        let name = format!("fleet_{}", uuid::Uuid::new_v4().simple());
        let output = Command::new("psql")
            .arg(base)
            .arg("-v")
            .arg("ON_ERROR_STOP=1")
            .arg("-qc")
            .arg(format!("CREATE DATABASE {name}"))
            .output()
            .expect("psql runs");
        assert!(
            output.status.success(),
            "create database: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let (server, _) = base.rsplit_once('/').expect("postgres URL ends in /DATABASE");
        Self::Postgres {
            url: format!("{server}/{name}"),
        }
    }

    fn flag(&self) -> String {
        match self {
            Self::Filesystem => "filesystem".to_owned(),
            Self::Postgres { url } => url.clone(),
        }
    }

    /// The PostgreSQL server address and the URL with its host:port
    /// replaced by `127.0.0.1:port`.
    fn through(&self, port: u16) -> Option<(std::net::SocketAddr, String)> {
        let Self::Postgres { url } = self else { return None };
        let (scheme_user, rest) = url.split_once('@')?;
        let (host_port, db) = rest.split_once('/')?;
        let target = host_port.parse().ok()?;
        Some((target, format!("{scheme_user}@127.0.0.1:{port}/{db}")))
    }
}

/// A free loopback port for a server under test, drawn at random from
/// 10000–31999: below Linux's ephemeral range (32768–60999), so the outgoing
/// connections of concurrently running tests cannot take it between this
/// check and the server's bind. Test processes run concurrently (nextest runs
/// each test in its own process), so each port is also reserved across
/// processes with an advisory lock file held until this process exits: two
/// tests never hand out the same port while their servers start.
pub fn free_port() -> u16 {
    static HELD: std::sync::Mutex<Vec<nix::fcntl::Flock<std::fs::File>>> = std::sync::Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("corium-fleet-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    loop {
        let candidate = 10_000 + u16::try_from(uuid::Uuid::new_v4().as_u128() % 22_000).unwrap();
        let Ok(file) = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(candidate.to_string()))
        else {
            continue;
        };
        let Ok(lock) = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) else {
            // Another test process holds this port.
            continue;
        };
        if std::net::TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            HELD.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(lock);
            return candidate;
        }
    }
}

/// The directory holding the workspace's binaries (`target/debug`).
#[must_use]
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    // A test: target/debug/deps/<test> → target/debug. A binary (the
    // benchmark, target/release/corium-fleet-bench) → its own directory.
    if dir
        .file_name()
        .is_some_and(|name| name == "deps" || name == "examples")
    {
        dir.parent().unwrap().to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// One transactor process.
pub struct Node {
    /// The binary this process runs.
    binary: &'static str,
    pub id: String,
    pub zone: String,
    pub grpc: u16,
    pub admin: u16,
    args: Vec<String>,
    /// Extra environment (fault injection).
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
}

impl Node {
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// The process id while it runs (for CPU and memory readings).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(std::process::Child::id)
    }

    fn spawn(&mut self) {
        let binary = bin_dir().join(self.binary);
        assert!(
            binary.exists(),
            "{} missing: build with `cargo build --bins` (make test does)",
            binary.display()
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(binary)
            .args(&self.args)
            .envs(self.env.iter().map(|(key, value)| (key.as_str(), value.as_str())))
            .env("CORIUM_FLEET_LOG", "info,corium_transactor=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().expect("node running").id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()), signal).unwrap();
    }

    /// Whether the process has exited on its own (an `abort` fault); it is
    /// reaped if so.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| child.try_wait().ok().flatten().is_some())
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and wait (bounded) for a clean exit.
    ///
    /// # Panics
    /// When the node does not exit within 20 s or exits unsuccessfully.
    pub fn terminate(&mut self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(
                    status.success(),
                    "{} exited with {status} after SIGTERM; log {}",
                    self.id,
                    self.log.display()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not stop within 20 s of SIGTERM",
                self.id
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Runs the binary again with the same identity as a second process (on
    /// its own ports) and
    /// returns its exit status and standard error (bounded by 30 s).
    ///
    /// # Panics
    /// When the duplicate does not exit within 30 s.
    pub fn run_duplicate(&self) -> (std::process::ExitStatus, String) {
        self.run_variant(&[])
    }

    /// Runs the binary with this node's flags and its own sockets, each
    /// `(flag, value)` of `changes` replacing that flag's value or appended;
    /// returns its exit status and standard error once it exits (bounded by
    /// 30 s).
    ///
    /// # Panics
    /// When the process does not exit within 30 s.
    pub fn run_variant(&self, changes: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
        // Same identity, its own sockets.
        let mut args = self.args.clone();
        for flag in ["--listen", "--admin-listen"] {
            if let Some(at) = args.iter().position(|arg| arg == flag) {
                args[at + 1] = format!("127.0.0.1:{}", free_port());
            }
        }
        for (flag, value) in changes {
            match args.iter().position(|arg| arg == flag) {
                Some(at) => args[at + 1] = (*value).to_owned(),
                None => args.extend([(*flag).to_owned(), (*value).to_owned()]),
            }
        }
        let mut child = Command::new(bin_dir().join(self.binary))
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let mut stderr = String::new();
                std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
                return (status, stderr);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("a duplicate of {} kept running", self.id);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts the process again with the same flags (a new incarnation) and
    /// waits until it is ready.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.id);
        self.spawn();
        wait_ready(self).await;
    }

    /// Sets (`Some`) or clears (`None`) an environment variable for the
    /// next start of this process (fault injection per incarnation).
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.env.push((key.to_owned(), value.to_owned()));
        }
    }

    /// The node's log so far (for failure messages).
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fleet of transactor processes sharing one store.
pub struct Fleet {
    pub nodes: Vec<Node>,
    /// Ingress processes, started with [`Fleet::start_ingresses`].
    pub ingresses: Vec<Node>,
    /// Whether the internal hop is mTLS.
    mtls: bool,
    /// Whether nodes and ingresses get the `--member` list (else: registry).
    static_members: bool,
    /// Per node, the cuttable path to PostgreSQL (PostgreSQL fleets only).
    pub partitions: Vec<Option<proxy::Partition>>,
    pub members: Vec<Member>,
    pub replicas: usize,
    pub backend: Backend,
    pub lease_ttl: Duration,
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
    node_flags: Vec<String>,
    env: Vec<(String, String)>,
    /// Node index → a loopback port in front of it that it advertises (a
    /// [`scripted::ScriptedHop`]): routing reaches the node through it.
    fronts: Vec<(usize, u16)>,
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

    /// Starts the nodes and waits until each is ready.
    ///
    /// # Panics
    /// When a node does not become ready within 60 s.
    pub async fn start(self) -> Fleet {
        Fleet::launch(self).await
    }
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
            node_flags: Vec::new(),
            env: Vec::new(),
            fronts: Vec::new(),
        }
    }

    /// Starts `count` nodes in `count` zones and waits until each is ready.
    ///
    /// # Panics
    /// When a node does not become ready within 60 s.
    pub async fn start(backend: Backend, count: usize, lease_ttl: Duration) -> Self {
        Self::builder(backend)
            .nodes(count)
            .lease_ttl(lease_ttl)
            .start()
            .await
    }

    /// Like [`Fleet::start`], with `extra` flags on every node.
    pub async fn start_with(backend: Backend, count: usize, lease_ttl: Duration, extra: &[&str]) -> Self {
        Self::builder(backend)
            .nodes(count)
            .lease_ttl(lease_ttl)
            .node_flags(extra)
            .start()
            .await
    }

    /// Like [`Fleet::start`], but the nodes get no `--member` list: they
    /// find each other through the node registry in storage (and so must
    /// ingresses started on this fleet).
    pub async fn start_registry(backend: Backend, count: usize, lease_ttl: Duration, extra: &[&str]) -> Self {
        Self::builder(backend)
            .nodes(count)
            .lease_ttl(lease_ttl)
            .registry()
            .node_flags(extra)
            .start()
            .await
    }

    /// Like [`Fleet::start`], with `env` set for every node (fault injection).
    pub async fn start_with_env(
        backend: Backend,
        count: usize,
        lease_ttl: Duration,
        env: &[(&str, &str)],
    ) -> Self {
        Self::builder(backend)
            .nodes(count)
            .lease_ttl(lease_ttl)
            .env(env)
            .start()
            .await
    }

    /// Like [`Fleet::start`], with the internal hop on mTLS.
    pub async fn start_mtls(backend: Backend, count: usize, lease_ttl: Duration) -> Self {
        Self::builder(backend)
            .nodes(count)
            .lease_ttl(lease_ttl)
            .mtls()
            .start()
            .await
    }

    /// The certificate directory of an mTLS fleet.
    #[must_use]
    pub fn certs(&self) -> Option<PathBuf> {
        self.mtls.then(|| self.dir.path().join("certs"))
    }

    async fn launch(plan: FleetBuilder) -> Self {
        let FleetBuilder {
            backend,
            nodes: count,
            lease_ttl,
            mtls,
            static_members,
            node_flags: extra,
            env,
            fronts,
        } = plan;
        let dir = tempfile::tempdir().unwrap();
        let certs = dir.path().join("certs");
        if mtls {
            let mut command = Command::new(bin_dir().join("corium-fleet"));
            command
                .arg("certs")
                .arg("--out")
                .arg(&certs)
                .arg("--ingress")
                .arg("corium-fleet-ingress");
            for i in 1..=count {
                command.arg("--node").arg(format!("node-{i}"));
            }
            let output = command.output().unwrap();
            assert!(
                output.status.success(),
                "certs: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let scheme = if mtls { "https" } else { "http" };
        let ports: Vec<(u16, u16)> = (0..count).map(|_| (free_port(), free_port())).collect();
        let members: Vec<Member> = ports
            .iter()
            .enumerate()
            .map(|(i, (grpc, _))| {
                let advertised = fronts
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
            .collect();
        let member_flags: Vec<String> = members
            .iter()
            .flat_map(|m| {
                [
                    "--member".to_owned(),
                    format!("{}={},zone={}", m.node_id, m.endpoint, m.zone),
                ]
            })
            .collect();
        let mut nodes = Vec::new();
        let mut partitions = Vec::new();
        for (member, (grpc, admin)) in members.iter().zip(&ports) {
            let partition = match backend.through(0) {
                Some((target, _)) => Some(proxy::Partition::start(target).await),
                None => None,
            };
            let storage = match &partition {
                Some(partition) => backend.through(partition.port).unwrap().1,
                None => backend.flag(),
            };
            partitions.push(partition);
            let mut args = vec![
                "--node-id".to_owned(),
                member.node_id.clone(),
                "--zone".to_owned(),
                member.zone.clone(),
                "--listen".to_owned(),
                format!("127.0.0.1:{grpc}"),
                "--admin-listen".to_owned(),
                format!("127.0.0.1:{admin}"),
                "--storage".to_owned(),
                storage,
                "--data-dir".to_owned(),
                dir.path().join("data").display().to_string(),
                "--lease-ttl-ms".to_owned(),
                lease_ttl.as_millis().to_string(),
            ];
            if static_members {
                args.extend(member_flags.iter().cloned());
            }
            args.push("--advertise".to_owned());
            args.push(member.endpoint.clone());
            args.extend(extra.iter().map(|flag| (*flag).to_owned()));
            if mtls {
                for (flag, file) in [
                    ("--tls-cert", format!("{}.pem", member.node_id)),
                    ("--tls-key", format!("{}.key", member.node_id)),
                    ("--tls-client-ca", "ca.pem".to_owned()),
                ] {
                    args.push(flag.to_owned());
                    args.push(certs.join(file).display().to_string());
                }
            }
            let mut node = Node {
                binary: "corium-fleet-transactor",
                id: member.node_id.clone(),
                zone: member.zone.clone(),
                grpc: *grpc,
                admin: *admin,
                args,
                env: env.clone(),
                child: None,
                log: dir.path().join(format!("{}.log", member.node_id)),
            };
            node.spawn();
            nodes.push(node);
        }
        let mut fleet = Self {
            nodes,
            ingresses: Vec::new(),
            mtls,
            static_members,
            partitions,
            members,
            replicas: placement::DEFAULT_REPLICAS,
            backend,
            lease_ttl,
            dir,
        };
        for index in 0..fleet.nodes.len() {
            fleet.wait_ready(index).await;
        }
        fleet
    }

    /// Waits until node `index` answers `/readyz`, failing fast if it exits.
    ///
    /// # Panics
    /// When the node exits or is not ready within 60 s.
    pub async fn wait_ready(&mut self, index: usize) {
        wait_ready(&mut self.nodes[index]).await;
    }

    /// Starts `count` ingresses over this fleet with `extra` flags and waits
    /// until each is ready.
    ///
    /// # Panics
    /// When an ingress does not become ready within 60 s.
    pub async fn start_ingresses(&mut self, count: usize, extra: &[&str]) {
        for _ in 0..count {
            let (grpc, admin) = (free_port(), free_port());
            let id = format!("ingress-{}", self.ingresses.len() + 1);
            let mut args = vec![
                "--listen".to_owned(),
                format!("127.0.0.1:{grpc}"),
                "--admin-listen".to_owned(),
                format!("127.0.0.1:{admin}"),
                "--storage".to_owned(),
                self.backend.flag(),
                "--data-dir".to_owned(),
                self.dir.path().join("data").display().to_string(),
            ];
            for member in self.members.iter().filter(|_| self.static_members) {
                args.push("--member".to_owned());
                args.push(format!(
                    "{}={},zone={}",
                    member.node_id, member.endpoint, member.zone
                ));
            }
            if let Some(certs) = self.certs() {
                for (flag, file) in [
                    ("--upstream-ca", "ca.pem"),
                    ("--upstream-cert", "corium-fleet-ingress.pem"),
                    ("--upstream-key", "corium-fleet-ingress.key"),
                ] {
                    args.push(flag.to_owned());
                    args.push(certs.join(file).display().to_string());
                }
            }
            args.extend(extra.iter().map(|flag| (*flag).to_owned()));
            let mut ingress = Node {
                binary: "corium-fleet-ingress",
                log: self.dir.path().join(format!("{id}.log")),
                id,
                zone: String::new(),
                grpc,
                admin,
                args,
                env: Vec::new(),
                child: None,
            };
            ingress.spawn();
            self.ingresses.push(ingress);
            let index = self.ingresses.len() - 1;
            wait_ready(&mut self.ingresses[index]).await;
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
        ] {
            let at = args.iter().position(|arg| arg == flag).unwrap();
            args[at + 1] = value;
        }
        let mut node = Node {
            binary: "corium-fleet-transactor",
            id: member.node_id.clone(),
            zone: member.zone.clone(),
            grpc,
            admin,
            args,
            env: Vec::new(),
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
    #[must_use]
    pub fn index(&self, id: &str) -> usize {
        self.nodes.iter().position(|node| node.id == id).unwrap()
    }

    /// Ranked candidate node indexes of `db` (the same function the nodes use).
    #[must_use]
    pub fn candidates(&self, db: &str) -> Vec<usize> {
        placement::candidates(db, &self.members, self.replicas)
            .iter()
            .map(|m| self.index(&m.node_id))
            .collect()
    }

    /// Index of a node that is not a candidate of `db`.
    #[must_use]
    pub fn non_candidate(&self, db: &str) -> Option<usize> {
        let candidates = self.candidates(db);
        (0..self.nodes.len()).find(|i| !candidates.contains(i))
    }

    /// Every node's log, for failure messages.
    #[must_use]
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .chain(&self.ingresses)
            .map(|n| format!("==== {} ====\n{}", n.id, n.log()))
            .collect()
    }
}

/// Waits until `node` answers `/readyz`, failing fast if it exits.
///
/// # Panics
/// When the process exits or is not ready within 60 s.
pub async fn wait_ready(node: &mut Node) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = node.child.as_mut().and_then(|child| child.try_wait().unwrap()) {
            panic!(
                "{} exited with {status} before it was ready; log:\n{}",
                node.id,
                node.log()
            );
        }
        if http_get(node.admin, "/readyz")
            .await
            .is_some_and(|(status, _)| status == 200)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} not ready within 60 s; log:\n{}", node.id, node.log());
}

/// One sample of a Prometheus text exposition, by its full series name
/// (`name` or `name{labels}`); `None` when the series is absent, so a check
/// on a counter fails if the counter is not exported at all.
#[must_use]
pub fn metric(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == series).then(|| value.trim().parse().ok()).flatten()
    })
}

/// A plain HTTP/1.1 GET on loopback: `(status, body)`.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.ok()?;
        let status = answer.get(9..12)?.parse().ok()?;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .ok()
        .flatten()
}
