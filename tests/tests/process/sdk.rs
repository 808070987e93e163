//! The Rust SDK (`corium-fleet-client`) against real fleets: transactions
//! ride through an owner's SIGKILL on retries with their request ids, a
//! subscription resumes across the failover with every `t` once and in
//! order, and the SDK example runs against `corium-fleet dev`.

use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corium_fleet_client::{Client, Config, ErrorKind, RetryPolicy};
use corium_fleet_tests::corium::{self, SCHEMA};
use corium_fleet_tests::{Backend, Fleet, bin_dir};

const TTL: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_transactions_and_subscriptions_ride_through_an_owner_kill() {
    for backend in Backend::all() {
        let (mut fleet, address) = Fleet::builder(backend.clone())
            .lease_ttl(TTL)
            .start_with_ingress()
            .await;
        let client = Client::connect(Config::new(&address).with_retry(RetryPolicy {
            budget: Duration::from_secs(30),
            ..RetryPolicy::default()
        }))
        .await
        .unwrap();
        let db = client.database("sdk");
        assert!(db.create(SCHEMA).await.unwrap());
        assert!(
            !db.create(SCHEMA).await.unwrap(),
            "ALREADY_EXISTS is `false` to SDK callers"
        );
        let start = db.status().await.unwrap().basis_t;
        let mut subscription = db.subscribe(start);
        let follower = tokio::spawn(async move {
            let mut seen = Vec::new();
            while seen.len() < 30 {
                let report = tokio::time::timeout(Duration::from_mins(1), subscription.next())
                    .await
                    .expect("a report within 60 s")
                    .expect("the subscription resumes");
                seen.push(report.t);
            }
            (seen, subscription.reconnects())
        });
        let owner = fleet.candidates("sdk")[0];
        let mut committed = Vec::new();
        let mut retried = 0;
        for i in 0..30 {
            if i == 10 {
                fleet.nodes[owner].kill();
            }
            let done = db
                .transact_edn(&format!(r#"[{{:db/id "x" :item/name "sdk-{i}"}}]"#))
                .await
                .unwrap_or_else(|error| {
                    panic!(
                        "{backend:?}: sdk-{i}: {error} ({:?})\n{}",
                        error.kind(),
                        fleet.logs()
                    )
                });
            if done.attempts > 1 {
                retried += 1;
            }
            committed.push(done.response.basis_t);
        }
        let (seen, reconnects) = follower.await.unwrap();
        eprintln!(
            "{backend:?}: 30 SDK transactions across a SIGKILL, {retried} retried; subscription reconnected {reconnects}×"
        );
        // Ridden out by retries: the SDK's own, or the ingress's (it holds a
        // call with a request id and sends it again, with the same id, to
        // the successor).
        let (_, metrics) = corium_fleet_tests::http_get(fleet.ingresses[0].admin, "/metrics")
            .await
            .unwrap();
        let ingress_retries = [
            "corium_fleet_ingress_not_owner_retries_total",
            "corium_fleet_ingress_ambiguous_retries_total",
        ]
        .iter()
        .filter_map(|name| corium_fleet_tests::metric(&metrics, name))
        .sum::<f64>();
        assert!(
            retried >= 1 || ingress_retries >= 1.0,
            "{backend:?}: the kill was ridden out by retries ({retried} SDK, {ingress_retries} ingress)"
        );
        assert!(reconnects >= 1, "{backend:?}: the subscription resumed");
        assert_eq!(
            seen,
            (start + 1..=start + 30).collect::<Vec<_>>(),
            "{backend:?}: every t once, in order"
        );
        assert_eq!(seen, committed);
        let log = corium::log(&address, "sdk").await.unwrap();
        for i in 0..30 {
            let name = format!("sdk-{i}");
            let count = log.iter().filter(|(_, names)| names.contains(&name)).count();
            assert_eq!(count, 1, "{backend:?}: {name} committed {count} times");
        }
        // Errors carry a kind: an unknown database is give-up, not retried.
        let error = client.database("missing").status().await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::GiveUp, "{error}");
    }
}

/// `corium-fleet dev` on a temporary directory, its stderr collected (every
/// failure message shows it); stopped with SIGTERM on drop, killed if it
/// does not stop within 20 s.
struct Dev {
    child: std::process::Child,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Dev {
    /// What it printed on stderr so far, after its exit status if it
    /// exited (waited for up to 2 s: a failure path only).
    fn report(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    // Let the reader thread take its last lines.
                    std::thread::sleep(Duration::from_millis(200));
                    break format!("corium-fleet dev exited with {status}");
                }
                _ if Instant::now() > deadline => break "corium-fleet dev is running".to_owned(),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        format!(
            "{status}; its stderr:\n{}",
            self.stderr.lock().unwrap().join("\n")
        )
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_sdk_example_runs_against_corium_fleet_dev() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(bin_dir().join("corium-fleet"))
        .args(["dev", "--port", "0", "--data-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut dev = Dev {
        child,
        stderr: Arc::default(),
    };
    let lines = Arc::clone(&dev.stderr);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            lines.lock().unwrap().push(line);
        }
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(address) = line.split("ready at ").nth(1) {
                let _ = tx.send(address.trim().to_owned());
            }
        }
    });
    let address = match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(address) => address,
        Err(error) => panic!("dev fleet not ready ({error}): {}", dev.report()),
    };
    let example = bin_dir().join("examples").join("fleet_quickstart");
    assert!(
        example.exists(),
        "{} missing: build with --all-targets (make test does)",
        example.display()
    );
    let output = Command::new(example).arg(&address).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        dev.report()
    );
    assert!(stdout.contains("created"), "{stdout}");
    assert_eq!(stdout.matches("committed t=").count(), 3, "{stdout}");
    assert_eq!(stdout.matches("report t=").count(), 3, "{stdout}");
    drop(dev);
}

/// The SDK's reads go to a read replica and never miss its own writes: each
/// read right after a write sees it (the replica waits for the write's
/// basis), across an owner kill too; a basis nobody reached is refused, not
/// answered stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_reads_see_every_write_the_client_made_even_across_an_owner_kill() {
    let mut fleet = Fleet::builder(Backend::Filesystem).lease_ttl(TTL).start().await;
    fleet.start_ingresses(1, &[]).await;
    let client = Client::connect(Config::new(fleet.ingresses[0].endpoint()))
        .await
        .unwrap();
    let db = client.database("sdk-reads");
    assert!(db.create(SCHEMA).await.unwrap());
    let count = "[:find (count ?e) . :where [?e :item/name]]";
    for i in 0..40 {
        if i == 20 {
            let owner = fleet.index(&corium::placement(client.endpoint(), "sdk-reads").await.owner_id);
            fleet.nodes[owner].kill();
        }
        let done = db
            .transact_edn(&format!(r#"[{{:db/id "x" :item/name "read-{i}"}}]"#))
            .await
            .unwrap_or_else(|error| panic!("write {i}: {error}\n{}", fleet.logs()));
        assert_eq!(db.written_basis(), done.response.basis_t);
        let seen = db
            .query_edn(count, &[])
            .await
            .unwrap_or_else(|error| panic!("read {i}: {error} ({:?})\n{}", error.kind(), fleet.logs()));
        assert_eq!(
            seen,
            corium_query::edn::Edn::Long(i + 1),
            "read {i} saw every write before it"
        );
    }
    assert_eq!(db.stats().await.unwrap().basis_t, db.written_basis());
    let short = Client::connect(
        Config::new(fleet.ingresses[0].endpoint()).with_retry(RetryPolicy {
            budget: Duration::from_secs(2),
            ..RetryPolicy::default()
        }),
    )
    .await
    .unwrap();
    let beyond = short
        .database("sdk-reads")
        .query_at_least(count, &[], db.written_basis() + 1_000)
        .await
        .expect_err("no replica reaches a basis nobody wrote");
    assert_eq!(beyond.kind(), ErrorKind::RetryLater, "{beyond}");
}
