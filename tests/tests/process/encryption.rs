//! Databases encrypted at rest (issue 50), as a stock transactor serves
//! them: nodes given stock Corium's `--storage-key`, the stock `corium` CLI
//! creating an encrypted database and managing its keys through the
//! fleet's address, and the database moving between nodes.

use corium_fleet_tests::{Backend, Fleet, corium};

use crate::stock_cli::run_cli;

/// Every file under `dir` (recursively) that contains `needle`.
fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|window| window == needle))
            {
                found.push(path);
            }
        }
    }
    found
}

/// Two nodes with the same key: the stock CLI creates a database under it
/// through the ingress, writes land encrypted (no stored file holds the
/// plaintext; an unencrypted database's do, the negative control), `corium
/// keys status` and `keys rotate` work through the fleet, and the database
/// moves to the other node and is read and written there. A database
/// under a key the fleet cannot resolve is refused, naming the key, and
/// nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_database_is_created_written_rotated_and_moved_through_the_fleet() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("storage.key");
    std::fs::write(&key, "8f".repeat(32)).unwrap();
    let key_id = format!("file:{}", key.display());
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(2)
        .node_flags(&["--storage-key", key_id.as_str()])
        .start_with_ingress()
        .await;
    let cli = async |args: &[&str]| {
        let (ok, out, err) = run_cli(&address, args, "").await;
        assert!(ok, "corium {args:?} failed:\n{out}{err}\n{}", fleet.with_logs(""));
        out
    };
    let schema = keys.path().join("schema.edn");
    std::fs::write(&schema, corium::SCHEMA).unwrap();
    let schema = schema.to_str().unwrap();
    cli(&[
        "db",
        "create",
        "secret",
        "--schema",
        schema,
        "--storage-key",
        key_id.as_str(),
    ])
    .await;
    cli(&["db", "create", "plain", "--schema", schema]).await;
    let canary = |db: &str| format!("canary-{db}-5a1f0c3e9b");
    for db in ["secret", "plain"] {
        corium::transact(&address, db, &canary(db), &[]).await.unwrap();
    }
    let status = cli(&["keys", "status", "secret"]).await;
    assert!(status.contains(&key_id), "keys status names the key: {status}");

    // Rotation through the fleet, then a move to the other candidate: the
    // new owner opens it with its own copy of the key.
    let rotated = cli(&["keys", "rotate", "secret"]).await;
    assert!(rotated.contains(":rotated true"), "{rotated}");
    corium::transact(&address, "secret", "after-rotation", &[])
        .await
        .unwrap();
    // From wherever the create put it (the ingress may have passed a busy
    // first candidate by) to the other node.
    let owner = fleet.index(&corium::placement(&address, "secret").await.owner_id);
    let successor = fleet.other_candidate("secret", owner).expect("two candidates");
    fleet.handoff(owner, "secret", successor).await.unwrap();
    corium::transact(&address, "secret", "after-move", &[])
        .await
        .unwrap();
    let names: Vec<String> = corium::log(&address, "secret")
        .await
        .unwrap()
        .into_iter()
        .flat_map(|(_, names)| names)
        .collect();
    for name in [
        canary("secret"),
        "after-rotation".to_owned(),
        "after-move".to_owned(),
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }

    // At rest: the plaintext of the unencrypted database is on disk, the
    // encrypted one's is nowhere.
    let data = fleet.path("data");
    assert!(
        !files_containing(&data, canary("plain").as_bytes()).is_empty(),
        "the control"
    );
    let leaked = files_containing(&data, canary("secret").as_bytes());
    assert!(
        leaked.is_empty(),
        "plaintext of an encrypted database in {leaked:?}"
    );

    // A key no node resolves: refused in words that name it, nothing made.
    let unknown = format!("file:{}", keys.path().join("absent.key").display());
    let (ok, out, err) = run_cli(
        &address,
        &[
            "db",
            "create",
            "orphan",
            "--schema",
            schema,
            "--storage-key",
            unknown.as_str(),
        ],
        "",
    )
    .await;
    assert!(!ok, "created under a key nobody has: {out}");
    assert!(err.contains("absent.key"), "the refusal names the key: {err}");
    let listed = cli(&["db", "list"]).await;
    assert!(!listed.contains("orphan"), "{listed}");
}

/// A fleet whose nodes hold different keys (issue 50): one of three nodes
/// lacks the key, and it is the first candidate of the database. The stock
/// CLI's create passes it by, `where` and `status` say which node lacks the
/// key, a handoff to it is refused naming the key, and when the keyed owner
/// is killed (SIGKILL) the keyless candidate never takes the lease (it is not
/// fenced: the lease version stays) nor serves — until the keyed node is
/// back and takes the database over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_key_never_serves_never_fences_and_says_why() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("storage.key");
    std::fs::write(&key, "3c".repeat(32)).unwrap();
    let key_id = format!("file:{}", key.display());
    let (mut fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(3)
        .env(&[("CORIUM_STORAGE_KEY", key_id.as_str())])
        .start_with_ingress()
        .await;
    // A database whose first candidate is node 0, which then restarts
    // without the key.
    let keyless = 0;
    let db = (0..1000)
        .map(|i| format!("secret-{i}"))
        .find(|db| fleet.candidates(db)[0] == keyless)
        .expect("some name ranks node 0 first");
    let keyed = fleet.candidates(&db)[1];
    fleet.nodes[keyless].terminate().await;
    fleet.nodes[keyless].set_env("CORIUM_STORAGE_KEY", None);
    fleet.nodes[keyless].restart().await;
    let keyless_id = fleet.nodes[keyless].id.clone();
    let keyed_id = fleet.nodes[keyed].id.clone();

    let schema = keys.path().join("schema.edn");
    std::fs::write(&schema, corium::SCHEMA).unwrap();
    let (ok, out, err) = run_cli(
        &address,
        &[
            "db",
            "create",
            &db,
            "--schema",
            schema.to_str().unwrap(),
            "--storage-key",
            key_id.as_str(),
        ],
        "",
    )
    .await;
    assert!(
        ok,
        "the create passes the keyless candidate by:\n{out}{err}\n{}",
        fleet.logs()
    );
    corium::transact(&address, &db, "first", &[])
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    let view = corium::placement(&address, &db).await;
    assert_eq!(view.owner_id, keyed_id, "{view:?}");
    assert_eq!(view.storage_key, key_id, "{view:?}");
    let lacks = |view: &corium_fleet_proto::fleet::DatabaseView, id: &str| {
        view.candidates
            .iter()
            .find(|candidate| candidate.node_id == id)
            .map(|candidate| candidate.lacks_storage_key)
    };
    assert_eq!(lacks(&view, &keyless_id), Some(true), "{view:?}");
    assert_eq!(lacks(&view, &keyed_id), Some(false), "{view:?}");

    operator_sees_the_keyless_candidate(&address, &db, &key_id, &keyless_id, &keyed_id).await;

    // A handoff to the keyless node: refused in words naming the key,
    // nothing moved.
    let refused = fleet
        .handoff(keyed, &db, keyless)
        .await
        .expect_err("a handoff to a node without the key");
    assert!(
        refused.message().contains(&key_id) && refused.message().contains(&keyless_id),
        "{refused:?}"
    );
    let after = corium::placement(&address, &db).await;
    assert_eq!(
        (after.owner_id.as_str(), after.lease_version),
        (keyed_id.as_str(), view.lease_version),
        "{after:?}"
    );

    // The keyed owner dies: its lease lapses, and the keyless candidate —
    // the only live one — neither takes it (no new lease version) nor
    // serves a write.
    fleet.nodes[keyed].kill();
    tokio::time::sleep(fleet.lease_ttl * 4).await;
    let write = corium::transact(&address, &db, "while-keyless", &[("grpc-timeout", "3S")]).await;
    assert!(write.is_err(), "a write served without the key: {write:?}");
    let lapsed = corium::placement(&address, &db).await;
    assert_eq!(
        (lapsed.owner_id.as_str(), lapsed.lease_version),
        (keyed_id.as_str(), view.lease_version),
        "the keyless node took the lease: {lapsed:?}\n{}",
        fleet.logs()
    );
    assert!(
        fleet.nodes[keyless].log().contains("lacks its key"),
        "the keyless node says why it does not take the database over:\n{}",
        fleet.nodes[keyless].log()
    );

    // The keyed node is back: it takes the database over and serves it.
    fleet.nodes[keyed].restart().await;
    corium::transact(&address, &db, "after-restart", &[])
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", fleet.logs()));
    let back = corium::placement(&address, &db).await;
    assert_eq!(back.owner_id, keyed_id, "{back:?}");
    assert!(back.lease_version > view.lease_version, "{back:?}");
}

/// What an operator reads: `where` names the key and the candidate without
/// it, `status --json` each node's key ids.
async fn operator_sees_the_keyless_candidate(
    address: &str,
    db: &str,
    key_id: &str,
    keyless_id: &str,
    keyed_id: &str,
) {
    let located = corium_fleet_tests::cli::run(&["where", db], address).await;
    assert!(located.success, "{}{}", located.stdout, located.stderr);
    assert!(
        located.stdout.contains(key_id)
            && located
                .stdout
                .contains(&format!("candidates without it (never serve it): {keyless_id}")),
        "{}",
        located.stdout
    );
    let status = corium_fleet_tests::cli::run(&["status", "--json"], address).await;
    assert!(status.success, "{}{}", status.stdout, status.stderr);
    let status: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let keys_of = |id: &str| {
        status["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|node| node["node_id"] == id)
            .map(|node| node["storage_keys"].clone())
    };
    assert_eq!(keys_of(keyless_id), Some(serde_json::json!([])), "{status:#}");
    assert_eq!(keys_of(keyed_id), Some(serde_json::json!([key_id])), "{status:#}");
}
