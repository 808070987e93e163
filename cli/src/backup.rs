//! `corium-fleet backup [DATABASE...] --dir DIR`: backs databases up through
//! the fleet's address, into one archive each (`DIR/DATABASE.backup`, stock
//! `corium backup`'s format; an archive already there gets an incremental
//! checkpoint). The fleet describes where the data lives (`GetStorageInfo`,
//! with the nodes' read-only flags on `PostgreSQL` and S3) and fixes the
//! basis; Corium's own backup code (`corium_transactor::backup`) then reads
//! the storage directly. For a scheduled job (the chart's backup `CronJob`):
//! every database the fleet lists when none is named, one failure does not
//! stop the others, and the exit status says whether all succeeded. An
//! encrypted database needs its key (`--storage-key`, as stock `corium
//! backup` takes it): the archive holds the stored ciphertext, and the key
//! is needed only to walk the index blobs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use corium_protocol::pb;
use corium_protocol::pb::catalog_client::CatalogClient;

use crate::node_args::{Authorized, NodeArgs};

/// How long discovering one database's storage may take.
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(30);

/// `corium-fleet backup` flags.
#[derive(clap::Args)]
pub(crate) struct BackupArgs {
    /// The databases to back up [default: every database the fleet lists].
    databases: Vec<String>,
    /// The directory the archives are kept in: `DATABASE.backup` each.
    #[arg(long)]
    dir: PathBuf,
    /// The longest one database's backup may take, in seconds.
    #[arg(long, default_value_t = 3_600)]
    timeout_secs: u64,
    #[command(flatten)]
    node: NodeArgs,
    #[command(flatten)]
    keys: corium_fleet_store::keys::StorageKeyFlags,
}

/// Runs `corium-fleet backup`: each database in turn, a line per archive.
///
/// # Errors
/// The fleet cannot be reached or listed, or any database's backup failed
/// (each is reported as it fails; the others still run).
pub(crate) async fn run(args: BackupArgs) -> anyhow::Result<()> {
    if args.timeout_secs == 0 {
        bail!("--timeout-secs must be positive");
    }
    // Read before anything else: a key that cannot be read fails at once.
    let keyring = args.keys.resolve()?.keyring;
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create the backup directory {}", args.dir.display()))?;
    let channel = args.node.channel(&args.node.endpoint, DISCOVERY_DEADLINE).await?;
    let mut catalog = CatalogClient::new(channel);
    let databases = if args.databases.is_empty() {
        catalog
            .list_databases(pb::ListDatabasesRequest {})
            .await
            .context("cannot list the fleet's databases")?
            .into_inner()
            .dbs
    } else {
        args.databases.clone()
    };
    let deadline = Duration::from_secs(args.timeout_secs);
    let mut failed = Vec::new();
    for db in &databases {
        let archive = args.dir.join(format!("{db}.backup"));
        match back_up(&mut catalog, db, &archive, deadline, keyring.as_ref()).await {
            Ok(report) => println!(
                "{db}: backed up to t={} (index at t={}): {} transactions and {} index blobs copied into {}",
                report.basis_t,
                report.index_basis_t,
                report.replayed_transactions,
                report.copied_blobs,
                archive.display()
            ),
            Err(error) => {
                eprintln!("corium-fleet: {db}: backup failed: {error:#}");
                failed.push(db.clone());
            }
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} backups failed: {}",
            failed.len(),
            databases.len(),
            failed.join(", ")
        );
    }
    Ok(())
}

/// One database: its storage and basis from the fleet, then Corium's backup
/// into `archive`.
async fn back_up(
    catalog: &mut CatalogClient<Authorized>,
    db: &str,
    archive: &Path,
    deadline: Duration,
    keyring: Option<&Arc<dyn corium_crypt::Keyring>>,
) -> anyhow::Result<corium_transactor::backup::BackupReport> {
    // The channel's deadline (DISCOVERY_DEADLINE) bounds the call.
    let mut request = tonic::Request::new(pb::GetStorageInfoRequest { db: db.to_owned() });
    if let Ok(route) = db.parse() {
        request
            .metadata_mut()
            .insert(corium_fleet_wire::metadata::DATABASE_ROUTE, route);
    }
    let info = catalog
        .get_storage_info(request)
        .await
        .context("the fleet did not describe its storage")?
        .into_inner();
    let source = corium_transactor::backup::BackupSource::from_info(info)?;
    tokio::time::timeout(
        deadline,
        corium_transactor::backup::backup(&source, db, archive, keyring),
    )
    .await
    .with_context(|| format!("not done within {} s (--timeout-secs)", deadline.as_secs()))?
    .map_err(anyhow::Error::from)
}
