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
    let blobs = copy_blobs(&scratch.path().join("store"), store.as_ref()).await?;
    let restored = corium_transactor::LogBackend::Fs(scratch.path().join("logs"));
    let records = restored
        .open_read_only(db, None)
        .await?
        .tx_range_async(0, None)
        .await?;
    let log = logs.open(db, 0, None).await?;
    log.append_batch_async(&records).await?;
    let scratch_store = FsStore::open(scratch.path().join("store"))?;
    // Keys, then the root, then the catalog entry: a database is found
    // only once it is whole (as Corium's own restore publishes).
    for name in names.all().into_iter().rev() {
        if let Some(bytes) = scratch_store.get_root(name).await? {
            store.cas_root(name, None, &bytes).await?;
        }
    }
    println!(
        "restored {} (from {:?}) as {db:?} at t={}: {} transactions and {blobs} blobs into {}",
        args.archive.display(),
        report.source_db,
        report.basis_t,
        records.len(),
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

/// Copies every blob of the scratch store (the archive's, one file each
/// under `blobs/`) into `target`; returns how many. Each is stored by its
/// content, so an id that does not match its bytes is refused.
async fn copy_blobs(scratch: &Path, target: &dyn FullStore) -> anyhow::Result<usize> {
    let mut copied = 0;
    let dir = scratch.join("blobs");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let bytes = std::fs::read(entry.path())?;
        let id = target.put(&bytes).await?;
        let name = entry.file_name();
        if id.as_str() != name.to_string_lossy() {
            bail!(
                "blob {} does not match its content ({id})",
                name.to_string_lossy()
            );
        }
        copied += 1;
    }
    Ok(copied)
}
