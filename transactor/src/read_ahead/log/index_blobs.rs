//! [`ReadAhead::blob`]: the activation's first blob read reads the
//! database's index blobs ahead, within the budget, and serves them.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use corium_store::{BlobId, FullStore};
use tokio::sync::OwnedSemaphorePermit;

use super::super::index::{IndexRead, read_index};
use super::super::pool::keep;
use super::{Index, ReadAhead};

impl ReadAhead {
    /// Blob `id` from the activation's index read-ahead: the first blob the
    /// open asks for reads the database's index blobs (from `base`, within
    /// the budget); `None` when the read-ahead does not hold it (the view
    /// reads it from storage).
    pub async fn blob(&self, id: &BlobId, base: &dyn FullStore) -> Option<Vec<u8>> {
        let held = {
            let mut inner = self.lock();
            match &mut inner.index {
                Index::Read { blobs, current, .. } => {
                    if let Some(blob) = blobs.get(id).cloned() {
                        self.pool
                            .counts
                            .index_blobs_served
                            .fetch_add(1, Ordering::Relaxed);
                        return Some(blob);
                    }
                    if *current {
                        return None;
                    }
                    // Held from before, and lacking what the open asks for:
                    // read what the root names now, beside what is held.
                    match std::mem::replace(&mut inner.index, Index::Reading) {
                        Index::Read {
                            blobs, _held: held, ..
                        } => Some((blobs, held)),
                        _ => unreachable!("matched above"),
                    }
                }
                Index::Reading | Index::Off => return None,
                Index::Armed => {
                    inner.index = Index::Reading;
                    None
                }
            }
        };
        let (have, have_held) = held.unwrap_or_default();
        let restore = |have: HashMap<BlobId, Vec<u8>>, have_held: Option<OwnedSemaphorePermit>| {
            let mut inner = self.lock();
            inner.index = if have.is_empty() && have_held.is_none() {
                Index::Off
            } else {
                Index::Read {
                    blobs: have,
                    _held: have_held,
                    _more: None,
                    current: true,
                }
            };
        };
        let Some(reserved) = self.pool.reserve() else {
            restore(have, have_held);
            return None;
        };
        let read = match read_index(base, &self.db, reserved.num_permits() * 1024, &have).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(db = %self.db, %error, "index read-ahead failed; reading blobs one by one");
                restore(have, have_held);
                return None;
            }
        };
        self.pool.counts.index_reads.fetch_add(1, Ordering::Relaxed);
        let IndexRead { mut blobs, bytes } = read;
        let more = keep(reserved, bytes);
        blobs.extend(have);
        let blob = blobs.get(id).cloned();
        let mut inner = self.lock();
        // Every holder may have gone while it read: then nothing is kept.
        if inner.holders > 0 && matches!(inner.index, Index::Reading) {
            inner.index = Index::Read {
                blobs,
                _held: have_held,
                _more: Some(more),
                current: true,
            };
            if blob.is_some() {
                self.pool
                    .counts
                    .index_blobs_served
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        blob
    }
}
