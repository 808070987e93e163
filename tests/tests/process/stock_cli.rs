//! The stock `corium` CLI (crates.io `corium-cli` 0.1.90, installed by
//! `make test` under `target/stock/`) pointed at the fleet's ingress, as an
//! operator points it at a transactor: create, list, a saga opened, stepped
//! and committed (a write through the saga's branch), a Datalog query in its
//! console (a peer that subscribes), stats and delete.

use std::process::{Command, Stdio};
use std::time::Duration;

use corium_fleet_tests::{Backend, Fleet, corium, stock};

/// Runs `corium <args>` against `address` (with `stdin` on its standard
/// input), within 60 s; its exit status, standard output and error.
pub(crate) async fn run_cli(address: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut all = args.to_vec();
    all.extend(["--transactor", address]);
    run_stock(&all, stdin).await
}

/// Runs `corium <args>` (with `stdin` on its standard input), within 60 s;
/// its exit status, standard output and error.
pub(crate) async fn run_stock(args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut command = Command::new(stock::binary());
    command
        .args(args)
        .env_remove("CORIUM_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.to_owned();
    let run = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = command
            .spawn()
            .expect("the stock corium CLI starts (make test installs it)");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(stdin.as_bytes())
            .expect("stdin written");
        child.wait_with_output().expect("it runs")
    });
    let output = tokio::time::timeout(Duration::from_mins(1), run)
        .await
        .unwrap_or_else(|_| panic!("corium {args:?} did not finish within 60 s"))
        .expect("the CLI task");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stock_corium_cli_creates_writes_through_a_saga_queries_and_deletes_through_the_fleet() {
    let (fleet, address) = Fleet::builder(Backend::Filesystem).start_with_ingress().await;
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.edn");
    std::fs::write(&schema, corium::SCHEMA).unwrap();
    let cli = async |args: &[&str], stdin: &str| {
        let (ok, out, err) = run_cli(&address, args, stdin).await;
        eprintln!("corium {args:?}:\n{out}{err}");
        assert!(
            ok,
            "corium {args:?} failed:\nstdout: {out}\nstderr: {err}\n{}",
            fleet.with_logs(String::new())
        );
        out
    };

    cli(
        &["db", "create", "clidb", "--schema", schema.to_str().unwrap()],
        "",
    )
    .await;
    let listed = cli(&["db", "list"], "").await;
    assert!(listed.contains("clidb"), "db list: {listed}");

    // A write the way the CLI makes one: a saga, one step, committed.
    let saga = "00112233445566778899aabbccddeeff";
    cli(&["saga", "open", "clidb", "--id", saga, "--ttl", "1h"], "").await;
    cli(
        &["saga", "step", "clidb", saga, "-"],
        r#"[{:db/id "x" :item/name "written by the stock cli"}]"#,
    )
    .await;
    cli(&["saga", "commit", "clidb", saga], "").await;

    // The console is a peer: it subscribes through the fleet and queries its
    // own copy.
    let answer = cli(
        &["console", "clidb"],
        "[:find ?n :where [_ :item/name ?n]]\n:quit\n",
    )
    .await;
    assert!(
        answer.contains("written by the stock cli"),
        "the committed saga's write, queried in the console: {answer}"
    );
    let stats = cli(&["db", "stats", "clidb"], "").await;
    assert!(!stats.trim().is_empty(), "db stats printed nothing");

    cli(&["db", "delete", "clidb"], "").await;
    let listed = cli(&["db", "list"], "").await;
    assert!(!listed.contains("clidb"), "deleted, yet listed: {listed}");
}

/// What stock `corium backup` asks a fleet on `PostgreSQL` (through its
/// address): `GetStorageInfo` is refused in Corium's own words while the
/// nodes have no read-only connection string to describe, and describes
/// the one given (`--postgres-read-only-url`, the stock transactor's flag)
/// with the basis the backup reads to. (The stock binary `make test`
/// installs has the filesystem backend only; `cargo install corium-cli
/// --features postgres` reads `PostgreSQL` with what this returns.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_discovery_of_a_postgres_fleet_describes_the_read_only_url() {
    use corium_protocol::pb;
    use corium_protocol::pb::catalog_client::CatalogClient;
    let base = std::env::var("CORIUM_FLEET_TEST_PG_URL").expect(
        "CORIUM_FLEET_TEST_PG_URL is not set: run the suite with `make test`, which starts PostgreSQL",
    );
    let backend = Backend::postgres(&base);
    let Backend::Postgres { url } = backend.clone() else {
        unreachable!("a PostgreSQL backend")
    };
    let read_only = format!("{url}?application_name=backup");
    let discover = async |address: &str| {
        CatalogClient::with_interceptor(corium::channel(address).await, corium::with_dev_token)
            .get_storage_info(pb::GetStorageInfoRequest { db: "kept".into() })
            .await
    };

    let (fleet, address) = Fleet::builder(backend.clone())
        .nodes(1)
        .start_with_ingress()
        .await;
    corium::create(&address, "kept").await.unwrap();
    corium::transact(&address, "kept", "first", &[]).await.unwrap();
    let refused = discover(&address)
        .await
        .expect_err("no read-only URL to describe");
    assert!(refused.message().contains("read-only"), "{refused:?}");
    drop(fleet);

    let (_fleet, address) = Fleet::builder(backend)
        .nodes(1)
        .node_flags(&["--postgres-read-only-url", &read_only])
        .start_with_ingress()
        .await;
    let written = corium::transact(&address, "kept", "second", &[]).await.unwrap();
    let info = discover(&address).await.unwrap().into_inner();
    assert!(info.basis_t >= written.basis_t, "{info:?}");
    match info.storage.and_then(|storage| storage.backend) {
        Some(pb::storage_connection::Backend::Postgres(postgres)) => {
            assert_eq!(postgres.connection_string, read_only);
        }
        other => panic!("not the PostgreSQL description: {other:?}"),
    }
}
