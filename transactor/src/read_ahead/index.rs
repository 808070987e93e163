//! A database's published index blobs read in one go, concurrently, for an
//! activation.
//!
//! Corium 0.1.90 opens a database from its published index: it reads the
//! `db:<name>` root, then each covering index's manifest blob and every
//! leaf chunk it names, one `get` at a time, and does so in both recovery
//! passes. On S3 each `get` is a round trip (two dozen of them at 6,000
//! transactions); here the same blobs are read with [`IN_FLIGHT`] requests
//! at a time and served from memory to both passes.
//!
//! Why serving them cannot change what the new owner sees: a blob's id is
//! the digest of its bytes (`corium_store::digest`), so a blob read ahead
//! is byte for byte the blob storage holds under that id. Which blobs the
//! open reads is still decided by the `db:` root Corium reads itself after
//! taking the lease; a blob it asks for that was not read ahead (the owner
//! published again in between) is read from storage.

use std::collections::{HashMap, HashSet};

use corium_store::{BlobId, DbRoot, FullStore, StoreError};
use futures::{StreamExt as _, TryStreamExt as _};

/// Blob reads in flight at once.
pub(super) const IN_FLIGHT: usize = 8;

/// What one read of a database's index returned.
#[derive(Default)]
pub(super) struct IndexRead {
    /// Manifests and leaf chunks, by id.
    pub(super) blobs: HashMap<BlobId, Vec<u8>>,
    /// Their bytes.
    pub(super) bytes: usize,
}

/// Reads the index blobs `db`'s published root names (current and
/// history manifests, then their chunks), at most `max_bytes` of them,
/// except those in `have` (held already: not read again, and a held
/// manifest's chunks are found from its held bytes). An encrypted database
/// (whose manifests this layer cannot parse) or one with no published
/// index reads nothing.
///
/// # Errors
/// The store's failure.
pub(super) async fn read_index(
    base: &dyn FullStore,
    db: &str,
    max_bytes: usize,
    have: &HashMap<BlobId, Vec<u8>>,
) -> Result<IndexRead, StoreError> {
    let Some(root) = base
        .get_root(&corium_store::db_root_name(db))
        .await?
        .as_deref()
        .and_then(DbRoot::decode)
    else {
        return Ok(IndexRead::default());
    };
    if root.key_manifest_version != 0 {
        return Ok(IndexRead::default());
    }
    let mut wanted: Vec<BlobId> = Vec::new();
    for id in root.roots.iter().chain(&root.history_roots).flatten() {
        if !wanted.contains(id) {
            wanted.push(id.clone());
        }
    }
    let mut read = IndexRead::default();
    let (held, missing): (Vec<BlobId>, Vec<BlobId>) =
        wanted.into_iter().partition(|id| have.contains_key(id));
    let mut manifests = fetch(base, missing, max_bytes, &mut read).await?;
    manifests.extend(held);
    let mut seen: HashSet<BlobId> = read.blobs.keys().chain(have.keys()).cloned().collect();
    let mut chunks = Vec::new();
    for id in manifests {
        let Some(bytes) = read.blobs.get(&id).or_else(|| have.get(&id)) else {
            continue;
        };
        // A flat (pre-format-3) index names no children.
        for child in corium_store::index_blob_children(bytes).unwrap_or_default() {
            if seen.insert(child.clone()) {
                chunks.push(child);
            }
        }
    }
    fetch(base, chunks, max_bytes, &mut read).await?;
    Ok(read)
}

/// Reads `ids` [`IN_FLIGHT`] at a time into `read` until `max_bytes` would
/// be passed; returns the ids read.
async fn fetch(
    base: &dyn FullStore,
    ids: Vec<BlobId>,
    max_bytes: usize,
    read: &mut IndexRead,
) -> Result<Vec<BlobId>, StoreError> {
    let mut got = Vec::new();
    let mut stream = futures::stream::iter(ids)
        .map(|id| async move { base.get(&id).await.map(|bytes| (id, bytes)) })
        .buffered(IN_FLIGHT);
    while let Some((id, bytes)) = stream.try_next().await? {
        let Some(bytes) = bytes else { continue };
        if read.bytes + bytes.len() > max_bytes {
            // At its bound: what was read is served, the rest comes from
            // storage as Corium asks for it.
            break;
        }
        read.bytes += bytes.len();
        read.blobs.insert(id.clone(), bytes);
        got.push(id);
    }
    Ok(got)
}
