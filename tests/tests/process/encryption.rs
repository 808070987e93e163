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

/// Two nodes with the same keys: the stock CLI creates a database under one
/// through the ingress, writes land encrypted (no stored file holds the
/// plaintext; an unencrypted database's do, the negative control), `corium
/// keys status`, `keys rotate` and `keys rewrap` (onto the second key) work
/// through the fleet, and the database moves between the nodes and is read
/// and written on each. A database
/// under a key the fleet cannot resolve is refused, naming the key, and
/// nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_database_is_created_written_rotated_and_moved_through_the_fleet() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("storage.key");
    std::fs::write(&key, "8f".repeat(32)).unwrap();
    let key_id = format!("file:{}", key.display());
    // The key the database is re-wrapped onto later (the first step of a
    // key-encryption key's rotation: every node holds both).
    let next = keys.path().join("next.key");
    std::fs::write(&next, "9d".repeat(32)).unwrap();
    let next_id = format!("file:{}", next.display());
    let both = format!("{key_id},{next_id}");
    let (fleet, address) = Fleet::builder(Backend::Filesystem)
        .nodes(2)
        .node_flags(&["--storage-key", both.as_str()])
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
    // Re-wrapped onto the next key through the fleet, then rotated (the
    // new epoch is wrapped under the new key only), written, and moved back:
    // the other node opens it under the new key.
    let rewrapped = cli(&["keys", "rewrap", "secret", "--kek", next_id.as_str()]).await;
    assert!(rewrapped.contains(":rewrapped true"), "{rewrapped}");
    cli(&["keys", "rotate", "secret"]).await;
    let status = cli(&["keys", "status", "secret"]).await;
    assert!(
        status.contains(&next_id),
        "keys status names the new key: {status}"
    );
    corium::transact(&address, "secret", "after-rewrap", &[])
        .await
        .unwrap();
    moved_back_in_place(&fleet, &address, successor, owner).await;
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
        "after-rewrap".to_owned(),
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }

    at_rest(&fleet.path("data"), &canary("plain"), &canary("secret"));

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

/// On every store (filesystem, `PostgreSQL`, S3): an encrypted database is
/// created with the stock CLI through the fleet, read through a read
/// replica, its key status read and its key rotated with the stock CLI,
/// handed off, taken over after its owner's SIGKILL, backed up by
/// `corium-fleet backup --storage-key` through the fleet address and
/// restored by `corium-fleet restore --storage-key` under a new name, which
/// the fleet then serves with every transaction of the source and writes
/// to. Without the key, the backup and the restore fail naming it, and the
/// restore leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_database_is_read_taken_over_backed_up_and_restored_on_every_store() {
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("storage.key");
    std::fs::write(&key, "5e".repeat(32)).unwrap();
    let key_id = format!("file:{}", key.display());
    let schema = keys.path().join("schema.edn");
    std::fs::write(&schema, corium::SCHEMA).unwrap();
    let schema = schema.to_str().unwrap();
    for backend in Backend::all() {
        let kind = match &backend {
            Backend::Filesystem => "filesystem",
            Backend::Postgres { .. } => "postgres",
            Backend::S3 { .. } => "s3",
        };
        let read_only = backend.read_only_flags().unwrap_or_default();
        let flags: Vec<&str> = read_only.iter().map(String::as_str).collect();
        let (mut fleet, address) = Fleet::builder(backend.clone())
            .nodes(2)
            .lease_ttl(std::time::Duration::from_secs(2))
            .env(&[("CORIUM_STORAGE_KEY", key_id.as_str())])
            .node_flags(&flags)
            .start_with_ingress()
            .await;
        let db = "vault";
        let (ok, out, err) = run_cli(
            &address,
            &[
                "db",
                "create",
                db,
                "--schema",
                schema,
                "--storage-key",
                key_id.as_str(),
            ],
            "",
        )
        .await;
        assert!(ok, "{kind}: create: {out}{err}\n{}", fleet.logs());
        let written = corium::transact(&address, db, "before", &[])
            .await
            .unwrap_or_else(|status| panic!("{kind}: {status:?}\n{}", fleet.logs()));

        // A read replica follows the owner and answers a query.
        let mut reader =
            corium_protocol::pb::peer_server_client::PeerServerClient::new(corium::channel(&address).await);
        let rows = crate::reads::query_rows(&mut reader, db, None, Some(written.basis_t))
            .await
            .unwrap_or_else(|status| panic!("{kind}: a replica read: {status:?}\n{}", fleet.logs()));
        assert!(
            rows.iter().any(|row| row.contains("\"before\"")),
            "{kind}: {rows:?}"
        );

        // Its keys managed through the fleet, and a handoff to the other
        // node, which opens it under the rotated epoch.
        keys_rotated_and_handed_off(kind, &fleet, &address, db, &key_id).await;

        // The owner killed: the other node (with the key) takes over.
        let owner = fleet.index(&corium::placement(&address, db).await.owner_id);
        fleet.nodes[owner].kill();
        corium::transact(&address, db, "after-takeover", &[])
            .await
            .unwrap_or_else(|status| panic!("{kind}: after the SIGKILL: {status:?}\n{}", fleet.logs()));
        let successor = corium::placement(&address, db).await.owner_id;
        assert_ne!(fleet.index(&successor), owner, "{kind}");

        backed_up_and_restored(kind, &fleet, &address, &backend, &key_id, keys.path()).await;
        eprintln!("{kind}: encrypted database read, taken over, backed up and restored");
    }
}

/// At rest: the plaintext of the unencrypted database (`plain`) is in a
/// stored file (the control), the encrypted one's (`secret`) in none.
fn at_rest(data: &std::path::Path, plain: &str, secret: &str) {
    assert!(
        !files_containing(data, plain.as_bytes()).is_empty(),
        "the control"
    );
    let leaked = files_containing(data, secret.as_bytes());
    assert!(
        leaked.is_empty(),
        "plaintext of an encrypted database in {leaked:?}"
    );
}

/// Backed up through the fleet with `corium-fleet backup`, with the key and
/// without it, then restored under a new name into the fleet's own storage:
/// the copy holds what the source holds and takes writes; a restore without
/// the key names it and leaves nothing. On the filesystem also by stock
/// `corium backup --storage-key` through the fleet address.
async fn backed_up_and_restored(
    kind: &str,
    fleet: &Fleet,
    address: &str,
    backend: &Backend,
    key_id: &str,
    dir: &std::path::Path,
) {
    let db = "vault";
    let env = backend.process_env();
    let address = address.to_owned();
    // Backed up through the fleet, with the key and without it.
    let backups = dir.join(format!("backups-{kind}"));
    let backups = backups.to_str().unwrap();
    let keyless = corium_fleet_tests::cli::run(&["backup", db, "--dir", backups], &address).await;
    assert!(!keyless.success, "{kind}: a backup without the key: {keyless:?}");
    let backup = corium_fleet_tests::cli::run(
        &["backup", db, "--dir", backups, "--storage-key", key_id],
        &address,
    )
    .await;
    assert!(backup.success, "{kind}: {backup:?}\n{}", fleet.logs());

    // Restored under a new name into the fleet's own storage.
    let archive = format!("{backups}/{db}.backup");
    let storage = backend.storage_args(&fleet.path("data"));
    let restore = async |name: &str, with_key: bool| {
        let mut args = vec!["restore", archive.as_str(), "--as-db", name];
        args.extend(storage.iter().map(String::as_str));
        if with_key {
            args.extend(["--storage-key", key_id]);
        }
        corium_fleet_tests::cli::run_on_storage(&args, &env).await
    };
    let refused = restore("vault-keyless", false).await;
    assert!(
        !refused.success && refused.stderr.contains(key_id),
        "{kind}: a restore without the key names it: {refused:?}"
    );
    let restored = restore("vault-copy", true).await;
    assert!(restored.success, "{kind}: {restored:?}");
    let (ok, listed, err) = run_cli(&address, &["db", "list"], "").await;
    assert!(ok && !listed.contains("vault-keyless"), "{kind}: {listed}{err}");
    let names = |log: Vec<(u64, Vec<String>)>| {
        let mut names: Vec<String> = log.into_iter().flat_map(|(_, names)| names).collect();
        names.sort();
        names
    };
    let source = names(corium::log(&address, db).await.unwrap());
    let copy = names(
        corium::log(&address, "vault-copy")
            .await
            .unwrap_or_else(|status| panic!("{kind}: the copy: {status:?}\n{}", fleet.logs())),
    );
    assert_eq!(copy, source, "{kind}");
    assert!(
        source.contains(&"after-takeover".to_owned()),
        "{kind}: {source:?}"
    );
    corium::transact(&address, "vault-copy", "written-to-the-copy", &[])
        .await
        .unwrap_or_else(|status| panic!("{kind}: {status:?}\n{}", fleet.logs()));

    // On the filesystem, stock `corium backup --storage-key` through the
    // fleet address too, its archive restored the same way.
    if kind == "filesystem" {
        let stock_archive = format!("{backups}/{db}-stock.backup");
        let (ok, out, err) = run_cli(
            &address,
            &["backup", db, stock_archive.as_str(), "--storage-key", key_id],
            "",
        )
        .await;
        assert!(ok, "stock backup: {out}{err}\n{}", fleet.logs());
        let mut args = vec!["restore", stock_archive.as_str(), "--as-db", "vault-stock"];
        args.extend(storage.iter().map(String::as_str));
        args.extend(["--storage-key", key_id]);
        let restored = corium_fleet_tests::cli::run_on_storage(&args, &env).await;
        assert!(restored.success, "{restored:?}");
        let copy = names(corium::log(&address, "vault-stock").await.unwrap());
        assert_eq!(copy, source, "a stock backup's restore");
    }
}

/// Stock `corium keys status` and `keys rotate` through the fleet, a write
/// under the new epoch, and a handoff to the other candidate, which opens
/// the database under it and takes the next write.
async fn keys_rotated_and_handed_off(kind: &str, fleet: &Fleet, address: &str, db: &str, key_id: &str) {
    let cli = async |args: &[&str]| {
        let (ok, out, err) = run_cli(address, args, "").await;
        assert!(ok, "{kind}: corium {args:?}: {out}{err}\n{}", fleet.logs());
        out
    };
    let status = cli(&["keys", "status", db]).await;
    assert!(status.contains(key_id), "{kind}: {status}");
    let rotated = cli(&["keys", "rotate", db]).await;
    assert!(rotated.contains(":rotated true"), "{kind}: {rotated}");
    corium::transact(address, db, "after-rotation", &[])
        .await
        .unwrap_or_else(|status| panic!("{kind}: {status:?}\n{}", fleet.logs()));
    let owner = fleet.index(&corium::placement(address, db).await.owner_id);
    let successor = fleet.other_candidate(db, owner).expect("two candidates");
    fleet
        .handoff(owner, db, successor)
        .await
        .unwrap_or_else(|status| panic!("{kind}: handoff: {status:?}\n{}", fleet.logs()));
    corium::transact(address, db, "after-handoff", &[])
        .await
        .unwrap_or_else(|status| panic!("{kind}: {status:?}\n{}", fleet.logs()));
    assert_eq!(
        fleet.index(&corium::placement(address, db).await.owner_id),
        successor,
        "{kind}"
    );
}

/// The first move published the database's (encrypted) index; the node that
/// let it go (`to`) follows it from there as its hot standby — reading the
/// index through the database's keys — and the move back from `from`
/// promotes that value in place.
async fn moved_back_in_place(fleet: &Fleet, address: &str, from: usize, to: usize) {
    crate::hot_standby::await_following(fleet, to, address, "secret").await;
    let before = crate::hot_standby::counts(fleet, to).await;
    fleet.handoff(from, "secret", to).await.unwrap();
    let after = crate::hot_standby::counts(fleet, to).await;
    assert_eq!(
        (after.taken, after.refused),
        (before.taken + 1, before.refused),
        "the encrypted database was promoted in place\n{}",
        fleet.logs()
    );
}
