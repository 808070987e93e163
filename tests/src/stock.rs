//! A stock Corium transactor: `corium transactor` from the crates.io package
//! `corium-cli` 0.1.90 (`make test` and `make bench` install it under
//! `target/stock/`), on the filesystem store in a temporary directory, on a
//! loopback port, and a stock peer server ([`StockPeerServer`]). The
//! references the fleet is compared with.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::{bin_dir, free_port};

/// Where the stock `corium` binary is: `CORIUM_STOCK_BIN`, else
/// `target/stock/bin/corium` beside the build's own binaries.
#[must_use]
pub fn binary() -> PathBuf {
    std::env::var_os("CORIUM_STOCK_BIN").map_or_else(
        || {
            bin_dir()
                .parent()
                .map_or_else(|| PathBuf::from("target"), std::path::Path::to_path_buf)
                .join("stock/bin/corium")
        },
        PathBuf::from,
    )
}

/// One running stock `corium` process on a loopback port, with its own
/// temporary directory (and its standard error in a log there); killed when
/// dropped. [`StockTransactor::process`] and [`StockPeerServer::process`]
/// give it, for its log and process id.
pub struct StockProcess {
    child: Child,
    dir: tempfile::TempDir,
    log: &'static str,
    /// What it is (for messages), its arguments and port, so it can start
    /// again over the same directory.
    what: String,
    args: Vec<String>,
    port: u16,
    within: Duration,
}

impl Drop for StockProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StockProcess {
    /// Runs `corium` with the arguments `args` gives for (its directory, a
    /// free port), logging to `log` there, and waits (at most `within`)
    /// until it listens on that port. Returns it and its endpoint.
    ///
    /// # Errors
    /// No stock binary (`make test` installs it), or it exited or did not
    /// listen in time.
    async fn start(
        what: &str,
        log: &'static str,
        within: Duration,
        args: impl FnOnce(&std::path::Path, u16) -> Vec<String>,
    ) -> anyhow::Result<(Self, String)> {
        let binary = binary();
        anyhow::ensure!(
            binary.exists(),
            "{} missing: `make test` installs the stock Corium CLI (crates.io corium-cli 0.1.90)",
            binary.display()
        );
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let args = args(dir.path(), port);
        let child = Self::spawn(&binary, &args, &dir, log)?;
        let mut process = Self {
            child,
            dir,
            log,
            what: what.to_owned(),
            args,
            port,
            within,
        };
        process.wait_listening().await?;
        Ok((process, format!("http://127.0.0.1:{port}")))
    }

    fn spawn(
        binary: &std::path::Path,
        args: &[String],
        dir: &tempfile::TempDir,
        log: &str,
    ) -> anyhow::Result<Child> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join(log))?;
        Ok(Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?)
    }

    /// Waits (at most `within`) until it listens on its port.
    async fn wait_listening(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + self.within;
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("stock {} exited ({status}): {}", self.what, self.log());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "stock {} did not listen within {} s",
                self.what,
                self.within.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Kills it (SIGKILL) and starts it again with the same arguments, over
    /// the same directory and port; waits until it listens.
    async fn restart(&mut self) -> anyhow::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(&binary(), &self.args, &self.dir, self.log)?;
        self.wait_listening().await
    }

    /// What it wrote to standard error so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join(self.log)).unwrap_or_default()
    }

    /// Its process id (for CPU accounting in benchmarks).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A running stock transactor; killed when dropped.
pub struct StockTransactor {
    process: StockProcess,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl StockTransactor {
    /// The process: its log and id.
    #[must_use]
    pub fn process(&self) -> &StockProcess {
        &self.process
    }

    /// Starts one on the filesystem store and waits (at most 30 s) until it
    /// listens.
    ///
    /// # Errors
    /// No stock binary (`make test` installs it), or it did not listen.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(None, &[], Duration::from_secs(30)).await
    }

    /// Starts one as [`Self::start`] does, holding the storage keys `keys`
    /// (`--storage-key`, each a key ID).
    ///
    /// # Errors
    /// No stock binary, a key it cannot read, or it did not listen.
    pub async fn start_with_keys(keys: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(None, keys, Duration::from_secs(30)).await
    }

    /// Starts one over an existing data directory — a fleet's filesystem
    /// store, stopped: the same databases, opened by stock Corium — and waits
    /// (at most `within`: it opens every database as it starts) until it
    /// listens.
    ///
    /// # Errors
    /// No stock binary, or it did not listen in time.
    pub async fn start_over(data_dir: &std::path::Path, within: Duration) -> anyhow::Result<Self> {
        Self::start_with(Some(data_dir.to_path_buf()), &[], within).await
    }

    /// Starts one over `data_dir` (`None`: a `data` folder of its own
    /// temporary directory) holding `keys`, waiting at most `within` until
    /// it listens.
    async fn start_with(data_dir: Option<PathBuf>, keys: &[&str], within: Duration) -> anyhow::Result<Self> {
        let keys: Vec<String> = keys
            .iter()
            .flat_map(|key| ["--storage-key".to_owned(), (*key).to_owned()])
            .collect();
        let (process, endpoint) =
            StockProcess::start("corium transactor", "stock.log", within, move |dir, port| {
                let mut args: Vec<String> = ["transactor", "--store", "fs", "--data-dir"]
                    .map(String::from)
                    .into();
                let data = data_dir.unwrap_or_else(|| dir.join("data"));
                args.push(data.display().to_string());
                args.extend([
                    "--listen".into(),
                    format!("127.0.0.1:{port}"),
                    "--gc-interval".into(),
                    "off".into(),
                    // Its client endpoint in `Status`, as every fleet node advertises.
                    "--advertise".into(),
                    format!("http://127.0.0.1:{port}"),
                ]);
                args.extend(keys);
                args
            })
            .await?;
        Ok(Self { process, endpoint })
    }

    /// Kills it and starts it again over the same data (a cold restart:
    /// its databases open again on their first call).
    ///
    /// # Errors
    /// It did not start or listen again.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.process.restart().await
    }
}

/// A running stock peer server (`corium peer-server`) hosting one database
/// for thin clients, following a transactor (a stock one, or the fleet's
/// ingress); killed when dropped. The reference for `PeerServer` answers.
pub struct StockPeerServer {
    process: StockProcess,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl StockPeerServer {
    /// The process: its log and id.
    #[must_use]
    pub fn process(&self) -> &StockProcess {
        &self.process
    }

    /// Starts one hosting `db` from `transactor` (anonymous, as a stock
    /// client with `--token ""`) and waits (at most 60 s) until it listens:
    /// it listens once it has caught up with the database.
    ///
    /// # Errors
    /// No stock binary, or it did not listen.
    pub async fn start(transactor: &str, db: &str) -> anyhow::Result<Self> {
        let (process, endpoint) = StockProcess::start(
            "corium peer-server",
            "peer-server.log",
            Duration::from_mins(1),
            |_, port| {
                vec![
                    "peer-server".into(),
                    "--db".into(),
                    db.into(),
                    "--listen".into(),
                    format!("127.0.0.1:{port}"),
                    "--transactor".into(),
                    transactor.into(),
                    "--token".into(),
                    String::new(),
                ]
            },
        )
        .await?;
        Ok(Self { process, endpoint })
    }
}
