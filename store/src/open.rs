//! Opening the shared store through Corium's storage-backend registry, the
//! way a Corium node opens its own (`corium_transactor::backend::
//! open_node_store`): the same backends, the filesystem's root under
//! `DATA_DIR/store`, so nodes and ingresses over one `--storage` see one
//! store. Opening retries a few times: nodes starting together race to
//! initialise a fresh `PostgreSQL` schema, and a store that is itself
//! restarting answers a moment later.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use corium_store::{FullStore, StorageConfig, StoreError, storage_backend};

use crate::postgres::PoolOptions;
use crate::prefix_read::{ListThenRead, Opened};
use crate::storage::Storage;

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The backend refused to open (bad configuration, unreachable).
    #[error("cannot open storage {storage}: {source}")]
    Store {
        /// The storage, described without credentials.
        storage: String,
        /// Corium's error.
        #[source]
        source: StoreError,
    },
    /// The backend did not answer within the timeout.
    #[error("storage {0} did not answer within the storage timeout")]
    Timeout(String),
}

/// Registers the backends the fleet can run on (once per process; a backend
/// a Corium node registered first stays).
fn register_backends() {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        let _ = corium_store_postgres::register();
        let _ = corium_store_s3::register();
    });
}

/// The backend configuration of `storage` with the filesystem's root under
/// `data_dir` (as a Corium node fills it in).
///
/// # Errors
/// A configuration Corium refuses.
pub fn backend_config(storage: &Storage, data_dir: &Path) -> Result<StorageConfig, StoreError> {
    let config = storage.config();
    if matches!(storage, Storage::Filesystem) && config.get("root").is_none() {
        return StorageConfig::from_value(serde_json::json!({ "root": data_dir.join("store") })).map_err(
            |error| StoreError::InvalidBackendConfig {
                kind: "filesystem".into(),
                detail: error.to_string(),
            },
        );
    }
    Ok(config)
}

/// Connections in a process's `PostgreSQL` pool unless `--storage-pool-size`
/// says otherwise: shared by every database the process serves.
pub const DEFAULT_POOL_SIZE: usize = 16;

async fn open_once(storage: &Storage, data_dir: &Path, pool: PoolOptions) -> Result<Opened, StoreError> {
    register_backends();
    if let Storage::Postgres { url } = storage {
        // Corium's store over a pool of the stated size, with the listing
        // index in place (`postgres.rs`).
        return crate::postgres::open(url, pool).await;
    }
    if let Storage::S3 {
        bucket,
        prefix,
        endpoint,
        region,
    } = storage
    {
        // Corium's store over a client with the fleet's retries (`s3.rs`).
        return Box::pin(crate::s3::open(bucket, prefix, endpoint.as_deref(), region)).await;
    }
    let backend = storage_backend(storage.kind())
        .ok_or_else(|| StoreError::BackendUnavailable(storage.kind().to_owned()))?;
    let store = backend.open(&backend_config(storage, data_dir)?).await?;
    Ok(Opened {
        prefix_read: Arc::new(ListThenRead(Arc::clone(&store))),
        store,
    })
}

/// Opens `storage` (bounded by `timeout` per attempt) with the default pool
/// size, retrying a bounded number of times so a supervisor sees a failure
/// that persists.
///
/// # Errors
/// The last attempt's failure.
pub async fn open(
    storage: &Storage,
    data_dir: &Path,
    timeout: Duration,
) -> Result<Arc<dyn FullStore>, OpenError> {
    open_with_pool(storage, data_dir, timeout, DEFAULT_POOL_SIZE).await
}

/// [`open`], with a `PostgreSQL` pool of `pool_size` connections.
///
/// # Errors
/// The last attempt's failure.
pub async fn open_with_pool(
    storage: &Storage,
    data_dir: &Path,
    timeout: Duration,
    pool_size: usize,
) -> Result<Arc<dyn FullStore>, OpenError> {
    open_store(storage, data_dir, timeout, PoolOptions::sized(pool_size))
        .await
        .map(|opened| opened.store)
}

/// [`open_with_pool`], with the store's bulk prefix reader and a
/// `PostgreSQL` pool made as `pool` says.
///
/// # Errors
/// The last attempt's failure.
pub async fn open_store(
    storage: &Storage,
    data_dir: &Path,
    timeout: Duration,
    pool: PoolOptions,
) -> Result<Opened, OpenError> {
    const ATTEMPTS: u32 = 8;
    let describe = storage.describe();
    let mut attempt = 1;
    loop {
        let error = match tokio::time::timeout(timeout, open_once(storage, data_dir, pool)).await {
            Ok(Ok(store)) => return Ok(store),
            Ok(Err(source)) => OpenError::Store {
                storage: describe.clone(),
                source,
            },
            Err(_) => OpenError::Timeout(describe.clone()),
        };
        if attempt == ATTEMPTS {
            return Err(error);
        }
        tracing::warn!(storage = %describe, attempt, %error, "cannot open storage; retrying");
        tokio::time::sleep(Duration::from_millis(250) * attempt).await;
        attempt += 1;
    }
}
