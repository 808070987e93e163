//! `corium-fleet restore ARCHIVE --as-db NAME`: restores a backup (stock
//! `corium backup`'s archive, or `corium-fleet backup`'s) into the fleet's
//! own storage under a new name, on every store the fleet runs on.
//!
//! Stock `corium restore` writes only a filesystem data directory. This
//! command runs that same restore (Corium's `corium_transactor::backup::
//! restore`: the archive checked, its index blobs verified, its log
//! records written) into a scratch directory (under `TMPDIR`: it needs
//! about the archive's size on local disk), then moves the result into
//! the fleet's storage through Corium's own storage and log backends: every
//! blob (content-addressed, so each is checked against its id), the log
//! records under log version 0 (before any lease; the first owner's
//! version fences after them), then the key manifest and database root, and
//! the catalog entry last — so no node can find a partly restored database.
//! An existing database of that name, or any of its records, is never
//! overwritten, and a restore that fails takes back what it wrote
//! ([`undo`]). Safe while the fleet runs: nobody owns a name that does not
//! exist yet. An encrypted archive needs its key (`--storage-key`, as stock
//! `corium restore` takes it): the restored database stays encrypted under
//! the same key, which the nodes that serve it must hold.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use corium_fleet_store::StorageFlags;
use corium_store::{FsStore, FullStore, RootStore as _};

/// How long opening the fleet's storage may take.
const OPEN_DEADLINE: Duration = Duration::from_secs(30);
/// Transactions read and appended at a time (bounds the memory a long log
/// takes to move).
const LOG_BATCH: u64 = 5_000;
/// Blobs written at once.
const BLOB_WRITES: usize = 8;

/// `corium-fleet restore` flags.
#[derive(clap::Args)]
pub(crate) struct RestoreArgs {
    /// The backup archive (a `corium backup` or `corium-fleet backup` file).
    archive: PathBuf,
    /// The name to restore it under; no database of that name may exist.
    #[arg(long)]
    as_db: String,
    #[command(flatten)]
    storage: StorageFlags,
    #[command(flatten)]
    keys: corium_fleet_store::keys::StorageKeyFlags,
}

/// Runs `corium-fleet restore`.
///
/// # Errors
/// The archive is unreadable, invalid, or encrypted under a key not given;
/// a key cannot be read; the name exists; the
/// storage cannot be opened or written.
pub(crate) async fn run(args: RestoreArgs) -> anyhow::Result<()> {
    let settings = args.storage.validate()?;
    let keyring = args.keys.resolve()?.keyring;
    let store = corium_fleet_store::open_store(
        &settings.backend,
        &settings.data_dir,
        OPEN_DEADLINE,
        settings.pool,
    )
    .await
    .with_context(|| format!("cannot open the fleet's storage {}", settings.backend.describe()))?
    .store;
    let spec = corium_transactor::StoreSpec::new(
        settings.backend.kind(),
        corium_fleet_store::open::backend_config(&settings.backend, &settings.data_dir)?,
    );
    corium_transactor::register_static_storage_backends();
    let logs = corium_transactor::LogBackend::for_spec(&spec, &settings.data_dir, Arc::clone(&store));
    let db = &args.as_db;
    let names = Roots::of(db);
    // Checked before the archive is read: a taken name costs nothing.
    for name in names.all() {
        if store.get_root(name).await?.is_some() {
            bail!("{db:?} exists in the fleet's storage ({name}); restore under another name");
        }
    }
    if logs.exists(db).await {
        bail!("{db:?} has log records in the fleet's storage; restore under another name");
    }
    let scratch = tempfile::tempdir().context("cannot make a scratch directory")?;
    let report = corium_transactor::backup::restore(&args.archive, scratch.path(), db, keyring.as_ref())
        .await
        .with_context(|| format!("cannot restore {}", args.archive.display()))?;
    let mut created = Vec::new();
    let moved = move_into(
        Scratch {
            dir: scratch.path(),
            keyring: keyring.as_ref(),
        },
        db,
        report.basis_t,
        &names,
        store.as_ref(),
        &logs,
        &mut created,
    )
    .await;
    let (blobs, transactions) = match moved {
        Ok(counts) => counts,
        Err(error) => return Err(undo(db, &names, &created, store.as_ref(), &logs, error).await),
    };
    println!(
        "restored {} (from {:?}) as {db:?} at t={}: {} transactions and {blobs} blobs into {}",
        args.archive.display(),
        report.source_db,
        report.basis_t,
        transactions,
        settings.backend.describe()
    );
    Ok(())
}

/// Takes back what a failed restore wrote, so that nothing half-restored
/// blocks a retry under `db`: the roots it created, and its log records
/// unless another process has claimed the name meanwhile (a root it did
/// not create exists now) — that log is then theirs too and is left alone.
/// Blobs are content-addressed and shared; unreferenced ones are Corium's
/// garbage collection's. Returns `error` with what was done.
async fn undo(
    db: &str,
    names: &Roots,
    created: &[String],
    store: &dyn FullStore,
    logs: &corium_transactor::LogBackend,
    error: anyhow::Error,
) -> anyhow::Error {
    for name in created {
        let _ = store.delete_root(name).await;
    }
    let mut claimed = false;
    for name in names.all() {
        claimed |=
            !created.iter().any(|own| own == name) && matches!(store.get_root(name).await, Ok(Some(_)));
    }
    if claimed {
        return error.context(format!(
            "restore of {db:?} stopped: another database of that name appeared meanwhile; the restored log records were left beside it"
        ));
    }
    let _ = logs.delete_all(db).await;
    error.context(format!("restore of {db:?} undone"))
}

/// Where Corium restored the archive, and the keys its records are sealed
/// under (an encrypted archive's).
struct Scratch<'a> {
    dir: &'a Path,
    keyring: Option<&'a Arc<dyn corium_crypt::Keyring>>,
}

/// A database's roots, the catalog entry first.
struct Roots([String; 3]);

impl Roots {
    fn of(db: &str) -> Self {
        Self([
            corium_store::meta_root_name(db),
            corium_store::db_root_name(db),
            corium_store::keys_root_name(db),
        ])
    }

    fn all(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

/// Moves the database Corium restored under `scratch` into `store`: its
/// blobs, its log up to `basis_t` (in batches of [`LOG_BATCH`]
/// transactions), then its roots with the catalog entry last, each root
/// created noted in `created`. Returns the blobs and transactions moved.
async fn move_into(
    scratch: Scratch<'_>,
    db: &str,
    basis_t: u64,
    names: &Roots,
    store: &dyn FullStore,
    logs: &corium_transactor::LogBackend,
    created: &mut Vec<String>,
) -> anyhow::Result<(usize, usize)> {
    let Scratch {
        dir: scratch,
        keyring,
    } = scratch;
    let blobs = copy_blobs(&scratch.join("store"), store).await?;
    let scratch_store: Arc<dyn FullStore> = Arc::new(FsStore::open(scratch.join("store"))?);
    // An encrypted database's log records are read and written through its
    // cipher (Corium's restore sealed them for `db`'s lineage); its blobs
    // are copied as stored.
    let manifest = corium_store::load_key_manifest(scratch_store.as_ref(), db).await?;
    let cipher = corium_transactor::keys::resolve_db_crypto(db, &scratch_store, manifest.as_ref(), keyring)
        .await?
        .cipher;
    let restored = corium_transactor::LogBackend::Fs(scratch.join("logs"))
        .open_read_only(db, cipher.clone())
        .await?;
    // Log version 0: before any lease, as Corium's own restore writes a
    // filesystem log; the first owner's version comes after it.
    let log = logs.open(db, 0, cipher).await?;
    let mut transactions = 0;
    let mut start = 0;
    while start <= basis_t {
        let end = start.saturating_add(LOG_BATCH);
        let records = restored.tx_range_async(start, Some(end)).await?;
        log.append_batch_async(&records).await?;
        transactions += records.len();
        start = end;
    }
    // Keys, then the root, then the catalog entry: a database is found
    // only once it is whole (as Corium's own restore publishes).
    for name in names.all().into_iter().rev() {
        if let Some(bytes) = scratch_store.get_root(name).await? {
            store.cas_root(name, None, &bytes).await?;
            created.push(name.to_owned());
        }
    }
    Ok((blobs, transactions))
}

/// Copies every blob of the scratch store (the archive's, one file each
/// under `blobs/`) into `target`; returns how many. Each is stored by its
/// content, so an id that does not match its bytes is refused.
async fn copy_blobs(scratch: &Path, target: &dyn FullStore) -> anyhow::Result<usize> {
    use futures::{StreamExt as _, TryStreamExt as _};
    let dir = scratch.join("blobs");
    let paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<_, _>>()?;
    let copied = paths.len();
    futures::stream::iter(paths)
        .map(|path| async move {
            let bytes = tokio::fs::read(&path).await?;
            let id = target.put(&bytes).await?;
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned());
            if name.as_deref() != Some(id.as_str()) {
                bail!("blob {} does not match its content ({id})", path.display());
            }
            Ok(())
        })
        .buffer_unordered(BLOB_WRITES)
        .try_collect::<()>()
        .await?;
    Ok(copied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_restore_takes_back_only_what_it_wrote() {
        let store = corium_store::MemoryStore::default();
        let logs = corium_transactor::LogBackend::Mem(corium_log::MemLogRegistry::new());
        let names = Roots::of("copy");
        let [meta, root, _] = &names.0;
        // The restore wrote a log record and created the database root,
        // then failed.
        let fail_after_the_root = async || {
            let record = corium_log::TxRecord {
                t: 1,
                tx_instant: 0,
                datoms: Vec::new(),
            };
            let log = logs.open("copy", 0, None).await.unwrap();
            log.append_batch_async(&[record]).await.unwrap();
            store.cas_root(root, None, b"restored").await.unwrap();
            let error = undo(
                "copy",
                &names,
                std::slice::from_ref(root),
                &store,
                &logs,
                anyhow::anyhow!("boom"),
            )
            .await;
            format!("{error:#}")
        };
        // Nobody else wrote: the root it created goes, and its log.
        let error = fail_after_the_root().await;
        assert!(error.contains("undone"), "{error}");
        assert_eq!(store.get_root(root).await.unwrap(), None);
        assert!(!logs.exists("copy").await, "the log it wrote is gone");
        // Another process created the name meanwhile: its catalog entry
        // stays, and so does the log; only the root this restore made goes.
        store.cas_root(meta, None, b"theirs").await.unwrap();
        let error = fail_after_the_root().await;
        assert!(error.contains("appeared meanwhile"), "{error}");
        assert_eq!(store.get_root(root).await.unwrap(), None);
        assert_eq!(
            store.get_root(meta).await.unwrap().as_deref(),
            Some(&b"theirs"[..])
        );
        assert!(logs.exists("copy").await, "the log is theirs now, and stays");
    }
}
