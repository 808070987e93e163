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
