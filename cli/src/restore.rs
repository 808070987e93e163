//! `corium-fleet restore ARCHIVE --as-db NAME`: restores a backup (stock
//! `corium backup`'s archive, or `corium-fleet backup`'s) into the fleet's
//! own storage under a new name, on every store the fleet runs on.
//!
//! Stock `corium restore` writes only a filesystem data directory. This
//! command runs that same restore (Corium's `corium_transactor::backup::
//! restore`: the archive checked, its index blobs verified, its log
//! records written) into a scratch directory, then moves the result into
//! the fleet's storage through Corium's own storage and log backends: every
//! blob (content-addressed, so each is checked against its id), the log
//! records under log version 0 (before any lease; the first owner's
//! version fences after them), then the key manifest and database root, and
//! the catalog entry last — so no node can find a partly restored database.
//! An existing database of that name, or any of its records, is never
//! overwritten. Safe while the fleet runs: nobody owns a name that does not
//! exist yet.

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
}

/// Runs `corium-fleet restore`.
///
/// # Errors
/// The archive is unreadable, invalid or encrypted; the name exists; the
/// storage cannot be opened or written.
pub(crate) async fn run(args: RestoreArgs) -> anyhow::Result<()> {
    let settings = args.storage.validate()?;
    let scratch = tempfile::tempdir().context("cannot make a scratch directory")?;
    let report = corium_transactor::backup::restore(&args.archive, scratch.path(), &args.as_db, None)
        .await
        .with_context(|| format!("cannot restore {}", args.archive.display()))?;
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
    for name in names.all() {
        if store.get_root(name).await?.is_some() {
            bail!("{db:?} exists in the fleet's storage ({name}); restore under another name");
        }
    }
    if logs.exists(db).await {
        bail!("{db:?} has log records in the fleet's storage; restore under another name");
    }
    let moved = move_into(scratch.path(), db, report.basis_t, &names, store.as_ref(), &logs).await;
    let (blobs, transactions) = match moved {
        Ok(counts) => counts,
        Err(error) => {
            // Nothing half-restored stays behind to block a retry under
            // this name: its log records and any root written go (blobs
            // are content-addressed and shared; unreferenced ones are
            // Corium's garbage collection's).
            for name in names.all() {
                let _ = store.delete_root(name).await;
            }
            let _ = logs.delete_all(db).await;
            return Err(error.context(format!("restore of {db:?} undone")));
        }
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
/// transactions), then its roots with the catalog entry last. Returns the
/// blobs and transactions moved.
async fn move_into(
    scratch: &Path,
    db: &str,
    basis_t: u64,
    names: &Roots,
    store: &dyn FullStore,
    logs: &corium_transactor::LogBackend,
) -> anyhow::Result<(usize, usize)> {
    let blobs = copy_blobs(&scratch.join("store"), store).await?;
    let restored = corium_transactor::LogBackend::Fs(scratch.join("logs"))
        .open_read_only(db, None)
        .await?;
    // Log version 0: before any lease, as Corium's own restore writes a
    // filesystem log; the first owner's version comes after it.
    let log = logs.open(db, 0, None).await?;
    let mut transactions = 0;
    let mut start = 0;
    while start <= basis_t {
        let end = start.saturating_add(LOG_BATCH);
        let records = restored.tx_range_async(start, Some(end)).await?;
        log.append_batch_async(&records).await?;
        transactions += records.len();
        start = end;
    }
    let scratch_store = FsStore::open(scratch.join("store"))?;
    // Keys, then the root, then the catalog entry: a database is found
    // only once it is whole (as Corium's own restore publishes).
    for name in names.all().into_iter().rev() {
        if let Some(bytes) = scratch_store.get_root(name).await? {
            store.cas_root(name, None, &bytes).await?;
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
