//! Where test processes listen and where their binaries are.

use std::fs::{File, OpenOptions};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use nix::fcntl::{Flock, FlockArg};

/// A free loopback port for a server under test, drawn at random from
/// 10000–31999: below Linux's ephemeral range (32768–60999), so the outgoing
/// connections of concurrently running tests cannot take it between this
/// check and the server's bind. Test processes run concurrently (nextest runs
/// each test in its own process), so each port is also reserved across
/// processes with an advisory lock file held until this process exits: two
/// tests never hand out the same port while their servers start.
#[must_use]
pub fn free_port() -> u16 {
    static HELD: Mutex<Vec<Flock<File>>> = Mutex::new(Vec::new());
    let dir = std::env::temp_dir().join("corium-fleet-test-ports");
    let _ = std::fs::create_dir_all(&dir);
    loop {
        // The remainder is below 22 000: it always fits a u16.
        let candidate = 10_000 + u16::try_from(uuid::Uuid::new_v4().as_u128() % 22_000).unwrap_or_default();
        let Ok(file) = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(candidate.to_string()))
        else {
            continue;
        };
        let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            // Another test process holds this port.
            continue;
        };
        if TcpListener::bind(("127.0.0.1", candidate)).is_ok() {
            HELD.lock().unwrap_or_else(PoisonError::into_inner).push(lock);
            return candidate;
        }
    }
}

/// The directory holding the workspace's binaries (`target/debug`).
///
/// # Panics
/// When the running executable's path cannot be read.
#[must_use]
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the running executable's path");
    let dir = exe.parent().expect("an executable lives in a directory");
    // A test: target/debug/deps/<test> → target/debug. A binary (the
    // benchmark, target/release/corium-fleet-bench) → its own directory.
    if dir
        .file_name()
        .is_some_and(|name| name == "deps" || name == "examples")
    {
        dir.parent().expect("deps/ lives in target/debug").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}
