//! The fleet-wide operator commands over real processes: `corium-fleet
//! status` lists every node of the fleet with what it owns, asked through
//! the ingress (which sends the call to any one node); `corium-fleet where`
//! names a database's owner, lease and basis before and after a handoff; a
//! node that died is still listed, as unreachable.

use std::collections::BTreeSet;
use std::time::Duration;

use corium_fleet_tests::cli::Run;

use corium_fleet_tests::corium;
use corium_fleet_tests::{Backend, Fleet, eventually};
use serde_json::Value;

const DBS: [&str; 4] = ["alpha", "beta", "gamma", "delta"];

/// Runs `corium-fleet ARGS --endpoint ENDPOINT` (the development token, as
/// an operator of a development fleet would).
async fn cli(args: &[&str], endpoint: &str) -> Run {
    corium_fleet_tests::cli::run(args, endpoint).await
}

/// `corium-fleet ARGS --json` at `endpoint`, parsed.
async fn json(fleet: &Fleet, args: &[&str], endpoint: &str) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let run = cli(&args, endpoint).await;
    assert!(
        run.success,
        "{args:?}: {}{}\n{}",
        run.stdout,
        run.stderr,
        fleet.logs()
    );
    serde_json::from_str(&run.stdout).unwrap_or_else(|error| panic!("{args:?}: {error}: {}", run.stdout))
}

/// The node entry named `id` in a `status --json` answer.
fn node<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|node| node["node_id"] == id)
        .unwrap_or_else(|| panic!("{id} not listed: {status:#}"))
}

/// The databases a node entry reports as owned.
fn owned(node: &Value) -> BTreeSet<String> {
    node["owned_databases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|db| db.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_every_node_and_where_follows_a_handoff_through_the_ingress() {
    let (mut fleet, ingress) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    for db in DBS {
        assert!(corium::create(&ingress, db).await.unwrap(), "create {db}");
        corium::transact(&ingress, db, &format!("{db}-first"), &[])
            .await
            .unwrap_or_else(|status| panic!("{db}: {status:?}\n{}", fleet.logs()));
    }

    let status = json(&fleet, &["status"], &ingress).await;
    check_every_node(&fleet, &status).await;
    check_table(&ingress).await;

    // `where`: the owner, its lease, the basis from the owner.
    let db = "alpha";
    let before = json(&fleet, &["where", db], &ingress).await;
    let from = before["owner"].as_str().unwrap().to_owned();
    assert_eq!(before["live"], true, "{before:#}");
    assert!(owned(node(&status, &from)).contains(db), "{before:#}");
    assert_eq!(before["basis_source"], "owner", "{before:#}");
    assert!(before["basis_t"].as_u64().unwrap() > 0, "{before:#}");
    let version = before["lease_version"].as_u64().unwrap();
    let to = before["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|candidate| candidate["node_id"].as_str().unwrap().to_owned())
        .find(|candidate| *candidate != from)
        .expect("a second candidate");

    let handoff = cli(&["handoff", db, "--to", &to], &ingress).await;
    assert!(
        handoff.success,
        "{}{}\n{}",
        handoff.stdout,
        handoff.stderr,
        fleet.logs()
    );
    eprintln!("handoff: {}", handoff.stdout);
    let after = json(&fleet, &["where", db], &ingress).await;
    assert_eq!(after["owner"], to.as_str(), "{after:#}");
    assert!(after["lease_version"].as_u64().unwrap() > version, "{after:#}");
    assert_eq!(after["basis_source"], "owner", "{after:#}");
    let status = json(&fleet, &["status"], &ingress).await;
    assert!(owned(node(&status, &to)).contains(db), "{status:#}");
    assert!(!owned(node(&status, &from)).contains(db), "{status:#}");
    // Asked at a node directly, the answer is the same fleet.
    let direct = json(&fleet, &["status"], &fleet.nodes[2].endpoint()).await;
    assert_eq!(direct["answered_by"], "node-3", "{direct:#}");
    assert!(owned(node(&direct, &to)).contains(db), "{direct:#}");

    check_a_dead_node_is_listed(&mut fleet, &ingress).await;
}

/// Every node is listed, live and reachable, each with exactly the
/// databases whose lease it holds, and every database under one node.
async fn check_every_node(fleet: &Fleet, status: &Value) {
    let ingress = fleet.ingresses[0].endpoint();
    let listed: Vec<&str> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| node["node_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["node-1", "node-2", "node-3"], "{status:#}");
    let mut all_owned = BTreeSet::new();
    for member in &fleet.nodes {
        let entry = node(status, &member.id);
        assert_eq!(entry["live"], true, "{entry:#}");
        assert_eq!(entry["reachable"], true, "{entry:#}");
        assert_eq!(entry["zone"], member.zone.as_str(), "{entry:#}");
        assert!(entry["load"]["max_inflight"].as_u64().unwrap() > 0, "{entry:#}");
        for db in owned(entry) {
            let owner = corium::placement(&ingress, &db).await.owner_id;
            assert_eq!(
                owner, member.id,
                "{db} listed under {} but owned by {owner}",
                member.id
            );
            assert!(
                all_owned.insert(db),
                "a database listed under two nodes: {status:#}"
            );
        }
        assert_eq!(
            entry["owned"].as_u64().unwrap(),
            owned(entry).len() as u64,
            "{entry:#}"
        );
    }
    assert_eq!(
        all_owned,
        DBS.iter().map(|db| (*db).to_owned()).collect(),
        "{status:#}"
    );
}

/// The table names every node on a line of its own, and with
/// `--databases` every owned database.
async fn check_table(ingress: &str) {
    let table = cli(&["status", "--databases"], ingress).await;
    assert!(table.success, "{}{}", table.stdout, table.stderr);
    eprintln!("corium-fleet status --databases:\n{}", table.stdout);
    for id in ["node-1", "node-2", "node-3"] {
        assert!(
            table
                .stdout
                .lines()
                .any(|line| line.starts_with(id) && line.contains(" live ")),
            "{}",
            table.stdout
        );
    }
    for db in DBS {
        assert!(
            table.stdout.lines().any(|line| line.starts_with(db)),
            "{}",
            table.stdout
        );
    }
}

/// A node that dies is still listed (unreachable while its registry record
/// lives, expired after), and the others answer as before.
async fn check_a_dead_node_is_listed(fleet: &mut Fleet, ingress: &str) {
    fleet.nodes[0].kill();
    let status = eventually(
        Duration::from_secs(30),
        fleet.with_logs("node-1 listed as unreachable"),
        async || {
            let run = cli(&["status", "--json"], ingress).await;
            if !run.success {
                return Err(run.stderr);
            }
            let status: Value = serde_json::from_str(&run.stdout).map_err(|error| error.to_string())?;
            let dead = node(&status, "node-1");
            // Unreachable while its record lives, then expired.
            if dead["reachable"] == false && (dead["error"].is_string() || dead["live"] == false) {
                Ok(status)
            } else {
                Err(format!("{dead:#}"))
            }
        },
    )
    .await;
    assert_eq!(status["nodes"].as_array().unwrap().len(), 3, "{status:#}");
    for id in ["node-2", "node-3"] {
        assert_eq!(node(&status, id)["reachable"], true, "{status:#}");
    }
}

/// Runs `corium-fleet status --json --endpoint ENDPOINT EXTRA` with
/// `SSL_CERT_FILE` as given (the system's roots, as rustls reads them).
async fn status_over_tls(endpoint: &str, extra: &[&str], roots: &std::path::Path) -> Run {
    let output = tokio::time::timeout(
        Duration::from_mins(1),
        tokio::process::Command::new(corium_fleet_tests::bin_dir().join("corium-fleet"))
            .args(["status", "--json", "--endpoint", endpoint])
            .args(extra)
            .env_remove("CORIUM_TOKEN")
            .env_remove("CORIUM_FLEET_ENDPOINT")
            .env_remove("SSL_CERT_DIR")
            .env("SSL_CERT_FILE", roots)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("corium-fleet finishes within a minute")
    .expect("corium-fleet runs");
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The CLI reaches a TLS client port (what the chart serves by default)
/// with `--ca` alone, or with no flag at all when the port's CA is among
/// the system's roots; a certificate the roots do not vouch for is refused
/// with what to pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reaches_a_tls_client_port_with_the_ca_or_the_system_roots() {
    let mut fleet = Fleet::builder(Backend::Filesystem).nodes(1).mtls().start().await;
    let certs = fleet.certs().unwrap();
    let port = corium_fleet_tests::free_port();
    let (cert, key) = (
        certs.join("corium-fleet-ingress.pem"),
        certs.join("corium-fleet-ingress.key"),
    );
    fleet
        .start_ingresses(
            1,
            &[
                "--tls-listen",
                &format!("127.0.0.1:{port}"),
                "--tls-cert",
                cert.to_str().unwrap(),
                "--tls-key",
                key.to_str().unwrap(),
            ],
        )
        .await;
    let endpoint = format!("https://127.0.0.1:{port}");
    let ca = certs.join("ca.pem");
    let system = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");

    let with_ca = status_over_tls(&endpoint, &["--ca", ca.to_str().unwrap()], system).await;
    assert!(with_ca.success, "--ca alone: {}", with_ca.stderr);
    let by_roots = status_over_tls(&endpoint, &[], &ca).await;
    assert!(
        by_roots.success,
        "the fleet CA among the roots: {}",
        by_roots.stderr
    );
    let status: Value = serde_json::from_str(&by_roots.stdout).unwrap();
    assert_eq!(status["nodes"][0]["node_id"], "node-1", "{status:#}");
    let untrusted = status_over_tls(&endpoint, &[], system).await;
    assert!(
        !untrusted.success && untrusted.stderr.contains("--ca"),
        "{}",
        untrusted.stderr
    );
}
