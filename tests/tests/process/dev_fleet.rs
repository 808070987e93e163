//! `corium-fleet dev` as a developer runs it, over its real processes: a
//! node killed with SIGKILL, then the ingress, are restarted on their ports
//! while a stock Corium client keeps writing through the ingress address,
//! and nothing acknowledged is lost; a port taken at start makes the fleet start again
//! on new ports; a fleet that cannot start says why and leaves no process
//! behind; SIGTERM stops every process.
//!
//! The dev command prints each process's pid and ports on stderr
//! (`corium-fleet: node-2 pid 1234 grpc … admin http://127.0.0.1:PORT/…`)
//! and every exit and restart; the tests read those lines (and show all of
//! stderr in any failure).

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_tests::stock_load::StockWriter;
use corium_fleet_tests::{bin_dir, corium, eventually, http_get};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// Lines a child wrote, shared with the thread that reads them.
type Lines = Arc<Mutex<Vec<String>>>;

fn read_lines(from: impl std::io::Read + Send + 'static, into: Lines) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            into.lock().unwrap().push(line);
        }
    });
}

/// A running `corium-fleet dev` over a temporary directory; stopped with
/// SIGTERM on drop (killed if it does not stop within 30 s).
struct Dev {
    child: Child,
    stdout: Lines,
    stderr: Lines,
    dir: tempfile::TempDir,
}

impl Dev {
    /// Starts `corium-fleet dev` with `flags` (stdout and stderr captured),
    /// on a free port unless `flags` name one (tests run side by side).
    fn spawn(flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let free = if flags.contains(&"--port") {
            &[][..]
        } else {
            &["--port", "0"][..]
        };
        let mut child = Command::new(bin_dir().join("corium-fleet"))
            .args(["dev", "--data-dir"])
            .arg(dir.path())
            .args(free)
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("corium-fleet: build it with `cargo build --workspace --bins`");
        let (stdout, stderr) = (Lines::default(), Lines::default());
        read_lines(child.stdout.take().unwrap(), Arc::clone(&stdout));
        read_lines(child.stderr.take().unwrap(), Arc::clone(&stderr));
        Self {
            child,
            stdout,
            stderr,
            dir,
        }
    }

    /// Starts it and waits (at most 90 s) for its "ready at" line: the
    /// ingress address.
    async fn start(flags: &[&str]) -> (Self, String) {
        let mut dev = Self::spawn(flags);
        let address = eventually(Duration::from_secs(90), "corium-fleet dev ready", async || {
            if let Some(address) = dev
                .stdout
                .lock()
                .unwrap()
                .iter()
                .find_map(|line| line.split("ready at ").nth(1))
            {
                return Ok(address.trim().to_owned());
            }
            if let Ok(Some(status)) = dev.child.try_wait() {
                // Let the reader threads take its last lines.
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "corium-fleet dev exited with {status} before it was ready:\n{}",
                    dev.stderr()
                );
            }
            Err(format!("not yet; stderr so far:\n{}", dev.stderr()))
        })
        .await;
        (dev, address)
    }

    /// Waits (at most 60 s) until it exits, asserts that it failed, and
    /// returns everything it printed on stderr.
    fn failed(&mut self) -> String {
        let status = wait(&mut self.child, Duration::from_mins(1))
            .unwrap_or_else(|| panic!("corium-fleet dev still runs after 60 s:\n{}", self.stderr()));
        // Let the reader threads take its last lines.
        std::thread::sleep(Duration::from_millis(200));
        let stderr = self.stderr();
        assert!(!status.success(), "{stderr}");
        stderr
    }

    /// Everything it printed on stderr so far.
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// The first stderr line containing `text`, once there is one (at most
    /// `within`).
    async fn line(&self, within: Duration, text: &str) -> String {
        eventually(within, format!("a dev fleet line with {text:?}"), async || {
            let found = self
                .stderr
                .lock()
                .unwrap()
                .iter()
                .find(|line| line.contains(text))
                .cloned();
            found.ok_or_else(|| self.stderr())
        })
        .await
    }

    /// `id`'s pid and admin port from the lines printed when the fleet was
    /// ready (`corium-fleet: ID pid N grpc … admin http://127.0.0.1:PORT/metrics`).
    fn process(&self, id: &str) -> (u32, u16) {
        let prefix = format!("corium-fleet: {id} pid ");
        let stderr = self.stderr.lock().unwrap();
        let line = stderr
            .iter()
            .find_map(|line| line.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in:\n{}", stderr.join("\n")));
        let pid = line.split_whitespace().next().unwrap().parse().unwrap();
        let admin = line
            .split("admin http://127.0.0.1:")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("no admin port in {line:?}"));
        (pid, admin)
    }

    /// SIGTERM, then its exit (at most 30 s) and all of its stderr.
    fn stop(mut self) -> (ExitStatus, String) {
        signal(self.child.id(), Signal::SIGTERM);
        let status = wait(&mut self.child, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("corium-fleet dev did not stop within 30 s:\n{}", self.stderr()));
        std::thread::sleep(Duration::from_millis(200));
        (status, self.stderr())
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), Signal::SIGTERM);
            if wait(&mut self.child, Duration::from_secs(30)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

fn signal(pid: u32, signal: Signal) {
    let _ = nix::sys::signal::kill(Pid::from_raw(i32::try_from(pid).unwrap()), signal);
}

/// Whether a process with this pid exists.
fn alive(pid: u32) -> bool {
    nix::sys::signal::kill(Pid::from_raw(i32::try_from(pid).unwrap()), None).is_ok()
}

/// The child's exit status, if it exits within `within`.
fn wait(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The new pid in a `… restarted (pid N, restart 1, same ports)` line.
fn restarted_pid(line: &str) -> u32 {
    line.split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

/// Creates `db` at `address`, asked again until the fleet has it (a
/// repeated create answering `ALREADY_EXISTS` counts) within 30 s.
async fn created_eventually(address: &str, db: &str, what: &str) {
    eventually(Duration::from_secs(30), what, async || {
        match corium::create(address, db).await {
            Ok(_) => Ok(()),
            Err(status) if status.code() == tonic::Code::AlreadyExists => Ok(()),
            Err(status) => Err(status.to_string()),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines)] // One scenario: start, write, kill a node, kill the ingress, read back, stop.
async fn a_killed_node_and_ingress_come_back_on_their_ports_while_a_stock_client_writes_and_nothing_is_lost()
{
    let (dev, address) = Dev::start(&["--lease-ttl-ms", "1500"]).await;
    let db = "failover";
    created_eventually(&address, db, "the database is created").await;
    let writer = StockWriter::start(&address, db);
    writer
        .acked_at_least(5, Duration::from_mins(1), "writes before the kill")
        .await;

    // The owner: the node to kill.
    let before = eventually(
        Duration::from_secs(30),
        format!("a live owner of {db}"),
        async || {
            let view = corium::placement(&address, db).await;
            if !view.owner_id.is_empty()
                && view.lease_expires_unix_ms > corium_fleet_common::owner::now_unix_ms()
            {
                Ok(view)
            } else {
                Err(format!("{view:?}"))
            }
        },
    )
    .await;
    let owner = before.owner_id.clone();
    let (pid, admin) = dev.process(&owner);
    let (ingress_pid, _) = dev.process("ingress-1");
    let others: Vec<u32> = ["node-1", "node-2", "node-3"]
        .into_iter()
        .filter(|id| *id != owner)
        .map(|id| dev.process(id).0)
        .collect();
    let acked_at_kill = writer.acked();
    eprintln!("SIGKILL {owner} (pid {pid}) after {acked_at_kill} acknowledged writes");
    signal(pid, Signal::SIGKILL);

    // The dev fleet sees it, says so, and starts it again on its ports.
    dev.line(
        Duration::from_secs(15),
        &format!("{owner} exited (signal 9); restarting in 1 s"),
    )
    .await;
    let restarted = dev
        .line(Duration::from_secs(30), &format!("{owner} restarted (pid "))
        .await;
    let new_pid = restarted_pid(&restarted);
    assert_ne!(new_pid, pid, "a new process");
    dev.line(Duration::from_mins(1), &format!("{owner} ready again"))
        .await;
    eventually(
        Duration::from_secs(30),
        format!("{owner}'s admin port answers /readyz"),
        async || match http_get(admin, "/readyz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
    .await;
    assert!(alive(new_pid), "{owner} runs again as pid {new_pid}");
    // The database moved (a new lease), and the client wrote on.
    eventually(Duration::from_secs(30), format!("{db} taken over"), async || {
        let view = corium::placement(&address, db).await;
        if view.lease_version > before.lease_version
            && view.lease_expires_unix_ms > corium_fleet_common::owner::now_unix_ms()
        {
            Ok(())
        } else {
            Err(format!("{view:?}"))
        }
    })
    .await;
    writer
        .acked_at_least(
            acked_at_kill + 20,
            Duration::from_mins(1),
            "writes after the kill",
        )
        .await;

    // Only the killed node was restarted; the others and the ingress ran on.
    let stderr = dev.stderr();
    assert_eq!(stderr.matches(" exited (").count(), 1, "one exit:\n{stderr}");
    assert!(
        alive(ingress_pid) && others.iter().all(|&pid| alive(pid)),
        "{stderr}"
    );

    // The ingress too: killed, started again on the client address, and
    // the stock client writes on through it.
    let acked_before = writer.acked();
    signal(ingress_pid, Signal::SIGKILL);
    dev.line(
        Duration::from_secs(15),
        "ingress-1 exited (signal 9); restarting in 1 s",
    )
    .await;
    let restarted = dev
        .line(Duration::from_secs(30), "ingress-1 restarted (pid ")
        .await;
    let ingress_pid = restarted_pid(&restarted);
    dev.line(Duration::from_mins(1), "ingress-1 ready again").await;
    writer
        .acked_at_least(
            acked_before + 10,
            Duration::from_mins(1),
            "writes after the ingress came back",
        )
        .await;
    let seen = writer.stop().await;

    // Nothing acknowledged is lost: every acknowledged item is in the log
    // at its t, and no item is there twice.
    let log = corium::log(&address, db).await.unwrap();
    seen.check(&log).unwrap_or_else(|error| panic!("{error}"));
    eprintln!(
        "{} acknowledged ({} after the kill), {} errors seen by the stock client: {:?}",
        seen.acked.len(),
        seen.acked.len() - acked_at_kill,
        seen.errors.len(),
        seen.errors
    );

    // SIGTERM stops every process.
    let (status, stderr) = dev.stop();
    assert!(
        status.success(),
        "corium-fleet dev exited with {status}:\n{stderr}"
    );
    assert!(stderr.contains("SIGTERM; stopping the fleet"), "{stderr}");
    assert!(stderr.contains("corium-fleet: stopped"), "{stderr}");
    for pid in others.into_iter().chain([new_pid, ingress_pid]) {
        assert!(!alive(pid), "pid {pid} still runs after the dev fleet stopped");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_taken_at_start_makes_the_fleet_start_again_on_new_ports() {
    // A port another process holds, given to node-1 as its gRPC port: the
    // race of a port taken between the choice and the bind, every time.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (dev, address) = Dev::start(&["--try-ports", &port.to_string()]).await;
    let stderr = dev.stderr();
    assert!(
        stderr.contains(&format!(
            "node-1 exited (status 2: corium-fleet-transactor: cannot listen on 127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("starting the fleet again on new ports (start 2 of 5)"),
        "{stderr}"
    );
    assert!(!address.ends_with(&format!(":{port}")));
    // The fleet serves.
    created_eventually(&address, "after-a-taken-port", "a database is created").await;
    let (status, stderr) = dev.stop();
    assert!(
        status.success(),
        "corium-fleet dev exited with {status}:\n{stderr}"
    );
    drop(taken);
}

/// `--port` is the fleet's address (stock Corium's 4334 unless given):
/// the ingress listens there; a port in use is refused at once, saying
/// what to do, rather than moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_listens_on_the_port_given_and_says_when_it_is_taken() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (dev, address) = Dev::start(&["--port", &port.to_string()]).await;
    assert_eq!(address, format!("http://127.0.0.1:{port}"));
    created_eventually(
        &address,
        "on-the-given-port",
        "a database is created at the given port",
    )
    .await;
    let (status, stderr) = dev.stop();
    assert!(status.success(), "{stderr}");

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut dev = Dev::spawn(&["--port", &port]);
    let stderr = dev.failed();
    assert!(
        stderr.contains(&format!("port {port} on 127.0.0.1 is in use")) && stderr.contains("--port 0"),
        "{stderr}"
    );
    drop(taken);
}

#[test]
fn a_fleet_that_cannot_start_says_why_and_leaves_no_process_behind() {
    let mut dev = Dev::spawn(&["--storage", "bogus://nowhere"]);
    let stderr = dev.failed();
    assert!(
        stderr.contains("refused its configuration") && stderr.contains("bogus://nowhere"),
        "the reason is on stderr:\n{stderr}"
    );
    assert!(
        dev.stdout
            .lock()
            .unwrap()
            .iter()
            .all(|line| !line.contains("ready at")),
        "never ready"
    );
    // Its children went with it: none of its processes holds the data dir.
    let dir = dev.dir.path().display().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(&dir) && !cmdline.contains("corium-fleet dev"))
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
}
