//! A follower's first value: the database as its last published index holds
//! it (complete history, in the writer's naming: the metadata root's), or,
//! before any publication, the empty database under that naming. Its
//! indexes are built here, off the runtime, once; from then on each applied
//! transaction extends them. An encrypted database's index blobs are read
//! through its data keys (Corium's `open_encrypted_storage`, with the
//! node's keyring); a node without its key does not follow it.

use std::sync::Arc;

use corium_core::{IndexOrder, KeywordInterner};
use corium_db::Db;
use corium_store::{BlobId, DbRoot, FullStore, StoreError, db_root_name, meta_root_name};
use corium_transactor::warm::WarmValue;

/// How often a load is tried again when an index publication raced it.
const PUBLICATION_RACES: usize = 3;

/// Why a follower could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// Storage failed.
    #[error("storage: {0}")]
    Store(#[from] StoreError),
    /// The database does not exist (deleted).
    #[error("no metadata root")]
    Unknown,
    /// The metadata or the published index does not decode.
    #[error("published state: {0}")]
    Published(String),
    /// Publications kept racing the load.
    #[error("the index was published again during every load")]
    Raced,
    /// The database is encrypted under a key this node lacks: it is not
    /// followed here (no takeover or open could use the value either).
    #[error("encrypted under a key this node lacks: {0}")]
    KeyMissing(StoreError),
    /// The runtime is shutting down.
    #[error("cancelled")]
    Cancelled,
}

/// A start value and the naming its stream is decoded under.
pub(crate) struct Started {
    pub(crate) value: WarmValue,
    pub(crate) interner: KeywordInterner,
}

/// The shared store as Corium's peer bootstrap reads it.
struct Published(Arc<dyn FullStore>);

#[async_trait::async_trait]
impl corium_peer::segment::PeerStorage for Published {
    async fn get_blob(&self, id: &BlobId) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.get(id).await
    }

    async fn get_peer_root(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.get_root(name).await
    }
}

async fn root(store: &dyn FullStore, db: &str) -> Result<Option<DbRoot>, StartError> {
    Ok(store
        .get_root(&db_root_name(db))
        .await?
        .as_deref()
        .and_then(DbRoot::decode))
}

/// Loads `db`'s start value from `store`, its index blobs decrypted with
/// `keyring` when the database is encrypted.
///
/// # Errors
/// [`StartError`]; [`StartError::KeyMissing`] when the database is
/// encrypted and `keyring` cannot unwrap its data keys.
pub(crate) async fn load(
    store: &Arc<dyn FullStore>,
    keyring: Option<&Arc<dyn corium_crypt::Keyring>>,
    db: &str,
) -> Result<Started, StartError> {
    let published =
        corium_peer::segment::open_encrypted_storage(Arc::new(Published(Arc::clone(store))), db, keyring)
            .await
            .map_err(|error| match error {
                StoreError::EncryptedWithoutKey { .. } | StoreError::Keyring(_) => {
                    StartError::KeyMissing(error)
                }
                other => StartError::Store(other),
            })?;
    let store = store.as_ref();
    for _ in 0..PUBLICATION_RACES {
        let before = root(store, db).await?;
        let snapshot = corium_peer::segment::load_current_snapshot(published.as_ref(), db)
            .await
            .map_err(|error| StartError::Published(error.to_string()))?;
        let value = match (snapshot, &before) {
            (Some(snapshot), Some(root))
                if snapshot.basis_t() == root.index_basis_t && snapshot.has_complete_history() =>
            {
                // The allocator and clock marks of the publication the
                // snapshot is (read with it: the basis matches).
                WarmValue::new(snapshot, root.next_entity_id, root.last_tx_instant, None)
            }
            (Some(snapshot), Some(root)) if snapshot.basis_t() != root.index_basis_t => continue,
            // No publication yet, or one from before history was published
            // (no complete history to start from): the whole stream.
            _ => {
                let meta = store
                    .get_root(&meta_root_name(db))
                    .await?
                    .ok_or(StartError::Unknown)?;
                let (schema, idents, interner) = corium_protocol::codec::decode_metadata(&meta)
                    .map_err(|error| StartError::Published(error.to_string()))?;
                let empty = Db::new(schema).with_naming(idents, interner);
                // What recovery from the whole log starts from.
                WarmValue::new(empty.clone(), empty.next_user_sequence(), i64::MIN, None)
            }
        };
        let interner = value.db().interner().clone();
        let value = built(value).await?;
        return Ok(Started { value, interner });
    }
    Err(StartError::Raced)
}

/// `value` with its indexes built (on the blocking pool: it folds every
/// datom once).
async fn built(value: WarmValue) -> Result<WarmValue, StartError> {
    let building = tokio::task::spawn_blocking(move || {
        // Asking for one datom in an index order builds all four (they share
        // one lazily built set), which every clone of the value shares.
        let _ = value.db().datoms_at(IndexOrder::Eavt).next();
        value
    });
    match building.await {
        Ok(value) => Ok(value),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => Err(StartError::Cancelled),
    }
}
