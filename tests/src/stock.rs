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

/// Waits (at most `within`) until the stock `what` started as `child` listens
/// on loopback `port`.
///
/// # Errors
/// It exited (with its `log`), or did not listen in time.
async fn wait_listening(
    child: &mut Child,
    port: u16,
    log: &std::path::Path,
    what: &str,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait()? {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            anyhow::bail!("stock {what} exited ({status}): {log}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "stock {what} did not listen within {} s",
            within.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// A running stock transactor; killed when dropped.
pub struct StockTransactor {
    child: Child,
    /// Its data directory (and its log, `stock.log`).
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl Drop for StockTransactor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StockTransactor {
    /// Starts one and waits (at most 30 s) until it listens.
    ///
    /// # Errors
    /// No stock binary (`make test` installs it), or it did not listen.
    pub async fn start() -> anyhow::Result<Self> {
        let binary = binary();
        anyhow::ensure!(
            binary.exists(),
            "{} missing: `make test` installs the stock Corium CLI (crates.io corium-cli 0.1.90)",
            binary.display()
        );
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("stock.log"))?;
        let mut child = Command::new(binary)
            .args(["transactor", "--store", "fs", "--data-dir"])
            .arg(dir.path().join("data"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--gc-interval", "off"])
            // Its client endpoint in `Status`, as every fleet node advertises.
            .args(["--advertise", &format!("http://127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        wait_listening(
            &mut child,
            port,
            &dir.path().join("stock.log"),
            "corium transactor",
            Duration::from_secs(30),
        )
        .await?;
        Ok(Self {
            child,
            dir,
            endpoint: format!("http://127.0.0.1:{port}"),
        })
    }

    /// What it wrote to standard error so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stock.log")).unwrap_or_default()
    }

    /// Its process id (for CPU accounting in benchmarks).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A running stock peer server (`corium peer-server`) hosting one database
/// for thin clients, following a transactor (a stock one, or the fleet's
/// ingress); killed when dropped. The reference for `PeerServer` answers.
pub struct StockPeerServer {
    child: Child,
    dir: tempfile::TempDir,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl Drop for StockPeerServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl StockPeerServer {
    /// Starts one hosting `db` from `transactor` (anonymous, as a stock
    /// client with `--token ""`) and waits (at most 60 s) until it listens:
    /// it listens once it has caught up with the database.
    ///
    /// # Errors
    /// No stock binary, or it did not listen.
    pub async fn start(transactor: &str, db: &str) -> anyhow::Result<Self> {
        let binary = binary();
        anyhow::ensure!(
            binary.exists(),
            "{} missing: `make test` installs it",
            binary.display()
        );
        let dir = tempfile::tempdir()?;
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("peer-server.log"))?;
        let mut child = Command::new(binary)
            .args([
                "peer-server",
                "--db",
                db,
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--transactor", transactor, "--token", ""])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        wait_listening(
            &mut child,
            port,
            &dir.path().join("peer-server.log"),
            "corium peer-server",
            Duration::from_mins(1),
        )
        .await?;
        Ok(Self {
            child,
            dir,
            endpoint: format!("http://127.0.0.1:{port}"),
        })
    }

    /// What it wrote to standard error so far.
    #[must_use]
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("peer-server.log")).unwrap_or_default()
    }

    /// Its process id (for CPU accounting in benchmarks).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}
