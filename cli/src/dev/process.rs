//! One supervised process of the local fleet: its command line (fixed for
//! its life: same ports, same node id), its child, its log, and when it is
//! started again after an exit.

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::process::{Child, Command};

/// The first delay before a process that exited is started again.
pub(super) const FIRST_DELAY: Duration = Duration::from_secs(1);
/// The longest delay: a process that keeps failing is tried this often.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(10);
/// A process that ran this long before it exited was not failing quickly:
/// its next delay starts again at [`FIRST_DELAY`].
pub(super) const STABLE_AFTER: Duration = Duration::from_secs(10);

/// The delay before each restart: [`FIRST_DELAY`], doubling to
/// [`MAX_DELAY`] while the process keeps exiting within [`STABLE_AFTER`].
#[derive(Debug)]
pub(super) struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: FIRST_DELAY }
    }
}

impl Backoff {
    /// The delay before starting again a process that ran `ran_for`.
    pub(super) fn after(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= STABLE_AFTER {
            self.next = FIRST_DELAY;
        }
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_DELAY);
        delay
    }
}

/// How a process ended.
#[derive(Debug)]
pub(super) struct Exit {
    status: ExitStatus,
    /// The last line of its log: what a binary prints when it gives up.
    last_line: Option<String>,
}

impl Exit {
    /// `signal 9`, or `status 1: <its last log line>`.
    pub(super) fn describe(&self) -> String {
        match (self.status.signal(), self.status.code()) {
            (Some(signal), _) => format!("signal {signal}"),
            (None, Some(code)) => match &self.last_line {
                Some(line) => format!("status {code}: {line}"),
                None => format!("status {code}"),
            },
            (None, None) => self.status.to_string(),
        }
    }

    /// It could not bind one of its addresses: another process took a port
    /// between the choice and the bind (the binaries exit 2 with `cannot
    /// listen on ADDR: …`).
    pub(super) fn port_taken(&self) -> bool {
        self.status.code() == Some(2)
            && self
                .last_line
                .as_deref()
                .is_some_and(|line| line.contains("cannot listen on"))
    }

    /// It refused its configuration (exit 2, anything but a port): starting
    /// it again cannot help.
    pub(super) fn refused_configuration(&self) -> bool {
        self.status.code() == Some(2) && !self.port_taken()
    }
}

enum State {
    /// Started, and `ready` once its `/readyz` answered.
    Running {
        child: Child,
        started: Instant,
        ready: bool,
    },
    /// Exited; to be started again at `at`.
    Waiting { at: Instant },
}

/// A fleet process and its supervision state.
pub(super) struct Process {
    /// `node-N` or `ingress-1`.
    pub(super) id: String,
    /// Its gRPC port (for a node, the port in every member list).
    pub(super) grpc: u16,
    /// Its admin port (`/readyz`, `/metrics`).
    pub(super) admin: u16,
    binary: PathBuf,
    command_line: Vec<String>,
    log: PathBuf,
    state: State,
    backoff: Backoff,
    /// How often it was started again.
    pub(super) restarts: u32,
}

impl Process {
    /// Starts `binary` with `command_line`, its stderr in `log` (truncated).
    ///
    /// # Errors
    /// The log cannot be created or the binary cannot be started.
    pub(super) fn start(
        id: String,
        (grpc, admin): (u16, u16),
        binary: PathBuf,
        command_line: Vec<String>,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = spawn(&binary, &command_line, &log)?;
        Ok(Self {
            id,
            grpc,
            admin,
            binary,
            command_line,
            log,
            state: State::Running {
                child,
                started: Instant::now(),
                ready: false,
            },
            backoff: Backoff::default(),
            restarts: 0,
        })
    }

    /// Its log file.
    pub(super) fn log(&self) -> &Path {
        &self.log
    }

    /// The running child's pid.
    pub(super) fn pid(&self) -> Option<u32> {
        match &self.state {
            State::Running { child, .. } => child.id(),
            State::Waiting { .. } => None,
        }
    }

    /// Whether it runs and answered `/readyz` since it was (re)started.
    pub(super) fn is_ready(&self) -> bool {
        matches!(self.state, State::Running { ready: true, .. })
    }

    /// Whether its child has exited (the exit is left for
    /// [`Process::exited`]).
    pub(super) fn has_exited(&mut self) -> bool {
        match &mut self.state {
            State::Running { child, .. } => child.try_wait().ok().flatten().is_some(),
            State::Waiting { .. } => false,
        }
    }

    /// How it ended, if it did since the last call; it then waits to be
    /// started again after its back-off ([`Process::restart_in`]).
    pub(super) fn exited(&mut self) -> Option<Exit> {
        let State::Running { child, started, .. } = &mut self.state else {
            return None;
        };
        let status = child.try_wait().ok()??;
        let ran_for = started.elapsed();
        let exit = Exit {
            status,
            last_line: last_line(&self.log),
        };
        let delay = self.backoff.after(ran_for);
        self.state = State::Waiting {
            at: Instant::now() + delay,
        };
        Some(exit)
    }

    /// How long until it is started again (zero when it is due; `None`
    /// while it runs).
    pub(super) fn restart_in(&self) -> Option<Duration> {
        match self.state {
            State::Waiting { at } => Some(at.saturating_duration_since(Instant::now())),
            State::Running { .. } => None,
        }
    }

    /// Starts it again, on the same command line (same ports, same node
    /// id), appending to its log; returns the new pid. When it cannot be
    /// started, it waits out another back-off.
    ///
    /// # Errors
    /// The binary cannot be started.
    pub(super) fn restart(&mut self) -> anyhow::Result<u32> {
        self.restarts += 1;
        if let Ok(mut log) = std::fs::OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(log, "--- corium-fleet dev: restart {} ---", self.restarts);
        }
        match spawn(&self.binary, &self.command_line, &self.log) {
            Ok(child) => {
                let pid = child.id().unwrap_or_default();
                self.state = State::Running {
                    child,
                    started: Instant::now(),
                    ready: false,
                };
                Ok(pid)
            }
            Err(error) => {
                self.state = State::Waiting {
                    at: Instant::now() + self.backoff.after(Duration::ZERO),
                };
                Err(error)
            }
        }
    }

    /// Asks its `/readyz` (at most 2 s) if it runs and has not answered
    /// yet; true when it just did.
    pub(super) async fn became_ready(&mut self) -> bool {
        if !matches!(self.state, State::Running { ready: false, .. }) {
            return false;
        }
        let now_ready =
            corium_fleet_common::launch::is_ready(std::net::SocketAddr::from(([127, 0, 0, 1], self.admin)))
                .await;
        if let State::Running { ready, .. } = &mut self.state {
            *ready = now_ready;
        }
        now_ready
    }

    /// Sends SIGTERM if it runs (a node then releases its leases).
    pub(super) fn terminate(&self) {
        if let Some(pid) = self.pid().and_then(|pid| i32::try_from(pid).ok()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
    }

    /// Waits until it has exited or `deadline` passed; true when it is gone.
    pub(super) async fn wait_until(&mut self, deadline: tokio::time::Instant) -> bool {
        match &mut self.state {
            State::Running { child, .. } => tokio::time::timeout_at(deadline, child.wait()).await.is_ok(),
            State::Waiting { .. } => true,
        }
    }

    /// SIGKILL, and reaps it.
    pub(super) async fn kill(&mut self) {
        if let State::Running { child, .. } = &mut self.state {
            let _ = child.kill().await;
        }
    }
}

/// Starts one child: stdout discarded, stderr appended to `log`, killed if
/// this process drops it.
fn spawn(binary: &Path, command_line: &[String], log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open {}", log.display()))?;
    Command::new(binary)
        .args(command_line)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {} (build it with `cargo build`)", binary.display()))
}

/// The last non-empty line of the file at `path` (its last 8 KiB read), cut
/// to 300 characters.
pub(super) fn last_line(path: &Path) -> Option<String> {
    const TAIL: u64 = 8 * 1024;
    let mut file = std::fs::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(TAIL))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().map(str::trim).find(|line| !line.is_empty())?;
    Some(line.chars().take(300).collect())
}

/// Whole seconds, rounded up: how a delay is printed.
pub(super) fn seconds(delay: Duration) -> u64 {
    u64::try_from(delay.as_millis().div_ceil(1000)).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_to_its_cap_while_a_process_fails_quickly_and_resets_after_a_stable_run() {
        let mut backoff = Backoff::default();
        let quick = Duration::from_millis(200);
        let delays: Vec<u64> = (0..6).map(|_| backoff.after(quick).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff.after(STABLE_AFTER), FIRST_DELAY);
        assert_eq!(backoff.after(quick), Duration::from_secs(2));
    }

    fn exit(raw: i32, line: Option<&str>) -> Exit {
        Exit {
            status: ExitStatus::from_raw(raw),
            last_line: line.map(str::to_owned),
        }
    }

    #[test]
    fn an_exit_says_its_signal_or_its_status_and_last_line_and_tells_a_taken_port_from_a_bad_flag() {
        // Raw wait statuses: a signal in the low bits, an exit code shifted by 8.
        let killed = exit(9, None);
        assert_eq!(killed.describe(), "signal 9");
        assert!(!killed.port_taken() && !killed.refused_configuration());
        let taken = exit(
            2 << 8,
            Some("corium-fleet-transactor: cannot listen on 127.0.0.1:4334: Address in use (os error 98)"),
        );
        assert!(taken.port_taken() && !taken.refused_configuration());
        assert_eq!(
            taken.describe(),
            "status 2: corium-fleet-transactor: cannot listen on 127.0.0.1:4334: Address in use (os error 98)"
        );
        let refused = exit(2 << 8, Some("corium-fleet-transactor: --storage: unknown scheme"));
        assert!(refused.refused_configuration() && !refused.port_taken());
        let failed = exit(1 << 8, None);
        assert_eq!(failed.describe(), "status 1");
        assert!(!failed.port_taken() && !failed.refused_configuration());
    }

    #[test]
    fn the_last_line_of_a_log_is_its_last_non_empty_line_even_in_a_long_log() {
        let dir = tempfile_dir();
        let path = dir.join("node.log");
        let mut text = "x".repeat(20_000);
        text.push_str("\nfirst\nnode: cannot listen on 127.0.0.1:1: in use\n\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(
            last_line(&path).as_deref(),
            Some("node: cannot listen on 127.0.0.1:1: in use")
        );
        assert_eq!(last_line(&dir.join("missing.log")), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("corium-fleet-dev-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_delay_prints_in_whole_seconds_rounded_up() {
        assert_eq!(seconds(Duration::from_millis(999)), 1);
        assert_eq!(seconds(Duration::from_secs(1)), 1);
        assert_eq!(seconds(Duration::from_millis(1001)), 2);
        assert_eq!(seconds(Duration::ZERO), 0);
    }
}
