//! Opening the `PostgreSQL` store the fleet's way: Corium's
//! `PostgresBlobStore` (the same tables, the same compare-and-swap) over a
//! connection pool of a stated size, shared by every cell of the process,
//! plus the index that makes root listings read only the rows they list.
//!
//! Corium lists a database's roots with `name LIKE 'prefix%'`. The primary
//! key's b-tree cannot serve a `LIKE` prefix under a non-C collation (the
//! usual `en_US.UTF-8`), so without it every listing scans every database's
//! rows. A `text_pattern_ops` index can; the fleet creates it at start
//! (`CREATE INDEX IF NOT EXISTS`), and refuses to start, saying what to run,
//! when it is missing and cannot be created (a role without the right).
//!
//! The pool: Corium opens deadpool's default (four connections a core),
//! shared by all of a node's databases. `--storage-pool-size` states it.

use std::sync::Arc;

use corium_store::StoreError;
use corium_store_postgres::PostgresBlobStore;

/// The index that serves `LIKE 'prefix%'` listings of `corium_roots`.
pub const LISTING_INDEX: &str = "corium_roots_name_prefix";

/// The statement that creates [`LISTING_INDEX`] (what an operator runs
/// when the fleet's role may not).
pub const CREATE_LISTING_INDEX: &str =
    "CREATE INDEX IF NOT EXISTS corium_roots_name_prefix ON corium_roots (name text_pattern_ops)";

fn backend(error: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        kind: "postgres".into(),
        detail: error.to_string(),
    }
}

/// How a process's `PostgreSQL` pool is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolOptions {
    /// Connections, shared by every database the process serves.
    pub size: usize,
    /// Connections acknowledge what they receive at once
    /// ([`pg_connect`](crate::pg_connect)); off only to measure the
    /// difference.
    pub quick_ack: bool,
}

impl PoolOptions {
    /// `size` connections with quick ACKs.
    #[must_use]
    pub fn sized(size: usize) -> Self {
        Self {
            size,
            quick_ack: true,
        }
    }
}

/// A pool to `url`, with the platform's TLS roots (as Corium's own), over
/// [`QuickAckConnect`](crate::pg_connect::QuickAckConnect) connections unless
/// `options` says otherwise.
fn pool(url: &str, options: PoolOptions) -> Result<deadpool_postgres::Pool, StoreError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (tls, _) = tokio_postgres_rustls::MakeRustlsConnect::with_native_certs()
        .map_err(|errors| backend(format!("cannot load native TLS roots: {errors:?}")))?;
    let config = deadpool_postgres::Config {
        url: Some(url.to_owned()),
        pool: Some(deadpool_postgres::PoolConfig::new(options.size.max(1))),
        ..deadpool_postgres::Config::default()
    };
    if !options.quick_ack {
        return config
            .create_pool(Some(deadpool_postgres::Runtime::Tokio1), tls)
            .map_err(backend);
    }
    let manager = deadpool_postgres::Manager::from_connect(
        config.get_pg_config().map_err(backend)?,
        crate::pg_connect::QuickAckConnect { tls },
        config.get_manager_config(),
    );
    deadpool_postgres::Pool::builder(manager)
        .config(config.get_pool_config())
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(backend)
}

/// Creates [`LISTING_INDEX`] if it is missing.
///
/// # Errors
/// When it is missing and cannot be created, naming the statement to run.
async fn ensure_listing_index(pool: &deadpool_postgres::Pool) -> Result<(), StoreError> {
    let client = pool.get().await.map_err(backend)?;
    let created = client.batch_execute(CREATE_LISTING_INDEX).await;
    // Nodes starting together may race on the catalog; what counts is that
    // the index is there now.
    let present = client
        .query_opt(
            "SELECT 1 FROM pg_indexes WHERE tablename = 'corium_roots' AND indexname = $1",
            &[&LISTING_INDEX],
        )
        .await
        .map_err(backend)?
        .is_some();
    match (present, created) {
        (true, _) => Ok(()),
        (false, Err(error)) => Err(backend(format!(
            "the listing index {LISTING_INDEX} is missing and cannot be created ({error}); \
             run as the table's owner: {CREATE_LISTING_INDEX}"
        ))),
        (false, Ok(())) => Err(backend(format!(
            "the listing index {LISTING_INDEX} is not there after creating it; run: {CREATE_LISTING_INDEX}"
        ))),
    }
}

/// Opens the store at `url` over a pool made as `options` says, with
/// its tables and the listing index in place, and its bulk prefix reader
/// over the same pool.
///
/// # Errors
/// `PostgreSQL` unreachable, the tables or the index cannot be made.
pub async fn open(url: &str, options: PoolOptions) -> Result<crate::prefix_read::Opened, StoreError> {
    let pool = pool(url, options)?;
    let store = PostgresBlobStore::from_pool(pool.clone()).await?;
    ensure_listing_index(&pool).await?;
    Ok(crate::prefix_read::Opened {
        store: Arc::new(store),
        prefix_read: Arc::new(crate::prefix_read::PostgresPrefixRead(pool)),
    })
}
