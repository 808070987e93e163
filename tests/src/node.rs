//! One server process under test (a transactor node or an ingress): spawn,
//! signal, kill, terminate, restart, its environment and its log.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::io::AsyncReadExt as _;

use crate::eventually::eventually;
use crate::http::http_get;
use crate::ports::free_port;

/// One transactor (or ingress) process.
pub struct Node {
    /// The binary this process runs.
    pub(crate) binary: &'static str,
    /// The directory it runs the binary from: the workspace's own
    /// (`target/debug`) unless [`Node::run_binaries_from`] changed it (an
    /// upgrade test's previous release).
    pub(crate) binaries: PathBuf,
    /// Its node id (`node-N`; `ingress-N` for an ingress).
    pub id: String,
    /// Its zone (`zone-N`; empty for an ingress).
    pub zone: String,
    /// Its gRPC port on loopback.
    pub grpc: u16,
    /// Its admin (HTTP: `/readyz`, `/metrics`) port on loopback.
    pub admin: u16,
    /// Its command-line flags.
    pub(crate) args: Vec<String>,
    /// Extra environment (fault injection).
    pub(crate) env: Vec<(String, String)>,
    /// The running process, if any.
    pub(crate) child: Option<Child>,
    /// Where its standard error goes, across incarnations.
    pub(crate) log: PathBuf,
}

impl Node {
    /// Its gRPC endpoint, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc)
    }

    /// The process id while it runs (for CPU and memory readings).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the process, its standard error appended to its log.
    pub(crate) fn spawn(&mut self) {
        let binary = self.binaries.join(self.binary);
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
    ///
    /// # Panics
    /// When the process is not running.
    pub fn signal(&self, signal: Signal) {
        let pid = self.child.as_ref().expect("node running").id();
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid fits an i32"));
        nix::sys::signal::kill(pid, signal).expect("signal sent");
    }

    /// Stops the process (SIGSTOP) for `pause`, then lets it go on
    /// (SIGCONT): a process that cannot tell it was stopped.
    ///
    /// # Panics
    /// When the process is not running.
    pub async fn pause(&self, pause: Duration) {
        self.signal(Signal::SIGSTOP);
        tokio::time::sleep(pause).await;
        self.signal(Signal::SIGCONT);
    }

    /// SIGSTOPs the process outside a filesystem root compare-and-swap.
    ///
    /// Corium's filesystem store serialises a root's CAS with an exclusive
    /// `flock` on `roots/<name>.lock`; a process stopped inside one keeps
    /// the lock, and every other node's CAS of that root (a successor taking
    /// the lease) blocks until it resumes or dies. No fleet can route around
    /// that, so a test of routing around a frozen node freezes it between
    /// CASes: when the stopped process holds a root lock it is resumed and
    /// stopped again a moment later (bounded).
    ///
    /// # Panics
    /// When the process is not running, or holds a root lock at every try.
    pub async fn freeze(&self) {
        let pid = self.child.as_ref().expect("node running").id();
        for _ in 0..200 {
            self.signal(Signal::SIGSTOP);
            if !holds_root_lock(pid) {
                return;
            }
            self.signal(Signal::SIGCONT);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{}: held a storage root lock at each of 200 stops", self.id);
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
    /// When the node is not running, does not exit within a minute or exits
    /// unsuccessfully.
    pub async fn terminate(&mut self) {
        self.signal(Signal::SIGTERM);
        let child = self.child.as_mut().expect("node running");
        // A node drains before it exits, for at most its drain deadline (50 s
        // by default): a bound below that fails a drain that is within its
        // contract (seen: the moves bench on PostgreSQL).
        let status = wait_for_exit(
            Duration::from_mins(1),
            &format!("{} stops after SIGTERM", self.id),
            || child.try_wait(),
        )
        .await;
        self.child = None;
        assert!(
            status.success(),
            "{} exited with {status} after SIGTERM; log {}",
            self.id,
            self.log.display()
        );
    }

    /// Runs the binary again with the same identity as a second process (on
    /// its own ports) and returns its exit status and standard error
    /// (bounded by 30 s).
    ///
    /// # Panics
    /// When the duplicate does not exit within 30 s.
    pub async fn run_duplicate(&self) -> (ExitStatus, String) {
        self.run_variant(&[]).await
    }

    /// Runs the binary with this node's flags, environment (storage
    /// credentials) and its own sockets, each
    /// `(flag, value)` of `changes` replacing that flag's value or appended;
    /// returns its exit status and standard error once it exits (bounded by
    /// 30 s).
    ///
    /// # Panics
    /// When the process cannot start or does not exit within 30 s (it is
    /// killed then).
    pub async fn run_variant(&self, changes: &[(&str, &str)]) -> (ExitStatus, String) {
        // Same identity, its own sockets.
        let mut args = self.args.clone();
        for flag in ["--listen", "--admin-listen"] {
            if let Some(at) = args.iter().position(|arg| arg == flag) {
                args[at + 1] = format!("127.0.0.1:{}", free_port());
            }
        }
        for (flag, value) in changes {
            match args.iter().position(|arg| arg == flag) {
                Some(at) => (*value).clone_into(&mut args[at + 1]),
                None => args.extend([(*flag).to_owned(), (*value).to_owned()]),
            }
        }
        let mut child = tokio::process::Command::new(self.binaries.join(self.binary))
            .args(&args)
            .envs(self.env.iter().map(|(key, value)| (key.as_str(), value.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the binary starts");
        let status = wait_for_exit(
            Duration::from_secs(30),
            &format!("a variant of {} exits", self.id),
            || child.try_wait(),
        )
        .await;
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("standard error is piped")
            .read_to_string(&mut stderr)
            .await
            .expect("standard error is readable");
        (status, stderr)
    }

    /// Runs the binary from `dir` at the next start (an upgrade: the same
    /// identity, flags and data on another release's binary).
    pub fn run_binaries_from(&mut self, dir: &Path) {
        dir.clone_into(&mut self.binaries);
    }

    /// The directory this process's binary comes from.
    #[must_use]
    pub fn binaries(&self) -> &Path {
        &self.binaries
    }

    /// Starts the process again with the same flags (a new incarnation) and
    /// waits until it is ready.
    ///
    /// # Panics
    /// When the process is still running, exits or is not ready within 60 s.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.id);
        self.spawn();
        self.wait_ready().await;
    }

    /// Waits until the process answers `/readyz`, failing fast if it exits.
    ///
    /// # Panics
    /// When the process exits or is not ready within 60 s.
    pub async fn wait_ready(&mut self) {
        let Self {
            id,
            admin,
            child,
            log,
            ..
        } = self;
        let (id, admin, log) = (&*id, *admin, &*log);
        eventually(Duration::from_mins(1), format!("{id} ready"), async || {
            if let Some(status) = child.as_mut().and_then(|child| child.try_wait().unwrap()) {
                panic!(
                    "{id} exited with {status} before it was ready; log:\n{}",
                    read_log(log)
                );
            }
            match http_get(admin, "/readyz").await {
                Some((200, _)) => Ok(()),
                answer => Err(WithLogs::new(
                    format!("/readyz answered {answer:?}"),
                    vec![(id, log)],
                )),
            }
        })
        .await;
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
        read_log(&self.log)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `try_wait` (a child process's) until the process has exited,
/// for at most `within`; `what` names the wait in failures.
async fn wait_for_exit(
    within: Duration,
    what: &str,
    mut try_wait: impl FnMut() -> std::io::Result<Option<ExitStatus>>,
) -> ExitStatus {
    eventually(within, what, async || {
        try_wait()
            .unwrap_or_else(|error| panic!("{what}: cannot wait: {error}"))
            .ok_or("still running")
    })
    .await
}

/// A log file's content so far; empty when it cannot be read.
fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A state followed by the logs of some processes, read only when it is
/// displayed: what an [`eventually`] probe returns while it waits, so a
/// failure shows the logs as they were at the deadline.
pub struct WithLogs<'a, S> {
    state: S,
    /// `(process id, log file)`.
    logs: Vec<(&'a str, &'a Path)>,
}

impl<'a, S> WithLogs<'a, S> {
    /// `state`, then each `(process id, log file)` of `logs`.
    pub(crate) fn new(state: S, logs: Vec<(&'a str, &'a Path)>) -> Self {
        Self { state, logs }
    }
}

impl<S: fmt::Display> fmt::Display for WithLogs<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.state)?;
        for (id, log) in &self.logs {
            write!(f, "\n==== {id} ====\n{}", read_log(log))?;
        }
        Ok(())
    }
}

/// Whether process `pid` holds a `flock` on a filesystem store's root lock
/// file (`…/roots/*.lock`), read from `/proc/locks` and its descriptors.
fn holds_root_lock(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    let pid_text = pid.to_string();
    // "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF"
    let inodes: Vec<u64> = locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.get(1) == Some(&"FLOCK") && fields.get(4) == Some(&pid_text.as_str()))
                .then(|| fields.get(5)?.rsplit(':').next()?.parse().ok())
                .flatten()
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(descriptors) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    descriptors.flatten().any(|descriptor| {
        let path = descriptor.path();
        let target = std::fs::read_link(&path).unwrap_or_default();
        let is_root_lock = target.extension().is_some_and(|ext| ext == "lock")
            && target.parent().is_some_and(|dir| dir.ends_with("roots"));
        is_root_lock && std::fs::metadata(&path).is_ok_and(|meta| inodes.contains(&meta.ino()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_holding_a_root_lock_is_seen_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("roots")).unwrap();
        std::fs::create_dir(dir.path().join("other")).unwrap();
        let hold = |path: &Path| {
            Command::new("flock")
                .arg(path)
                .args(["sleep", "30"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut root = hold(&dir.path().join("roots/fleet-db.lock"));
        let mut other = hold(&dir.path().join("other/cache.lock"));
        let seen = |child: &Child| {
            // `flock` takes the lock, then starts `sleep`: wait for it.
            (0..200).any(|_| {
                std::thread::sleep(Duration::from_millis(10));
                holds_root_lock(child.id())
            })
        };
        assert!(seen(&root), "the root lock holder was not seen");
        assert!(!seen(&other), "a lock outside roots/ was taken for a root lock");
        assert!(!holds_root_lock(std::process::id()));
        for child in [&mut root, &mut other] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}
