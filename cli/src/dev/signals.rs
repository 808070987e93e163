//! The signals `corium-fleet dev` takes over, and stopping the fleet with
//! them: SIGTERM to every process, a kill at the deadline or on a second
//! signal.

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::process::Process;

/// How long stopping waits for the children after SIGTERM before killing.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// SIGTERM and SIGINT (Ctrl-C), taken over for the whole run so that a
/// signal during start-up also stops the children.
pub(super) struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    pub(super) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next signal, named.
    pub(super) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "interrupted",
        }
    }
}

/// Stops every running process: SIGTERM to all, then waits for them (one
/// deadline for all), killing those still running at the deadline, or all
/// at once on another signal.
pub(super) async fn stop(processes: &mut [Process], signals: &mut Signals) {
    for process in processes.iter() {
        process.terminate();
    }
    let deadline = tokio::time::Instant::now() + STOP_TIMEOUT;
    let mut kill_now = false;
    for process in processes.iter_mut() {
        if !kill_now {
            tokio::select! {
                biased;
                reason = signals.recv() => {
                    eprintln!("corium-fleet: {reason} again; killing every process");
                    kill_now = true;
                }
                gone = process.wait_until(deadline) => {
                    if gone {
                        continue;
                    }
                    eprintln!(
                        "corium-fleet: {} did not stop in {} s; killing it",
                        process.id,
                        STOP_TIMEOUT.as_secs()
                    );
                }
            }
        }
        process.kill().await;
    }
}
