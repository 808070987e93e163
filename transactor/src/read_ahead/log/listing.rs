//! [`ReadAhead::list`]: a listing of the database's log through the view,
//! from the bulk read while the read-ahead is armed, from the listing it
//! holds while nothing of the cell's own was written since.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use corium_store::{FullStore, StoreError};
use futures::TryStreamExt as _;

use super::super::pool::{is_record, keep, keepable, list_since, read_roots};
use super::{Purpose, ReadAhead, State, Tail, Taken};

impl ReadAhead {
    /// A listing of `prefix` through the view: the bulk read when the
    /// read-ahead is armed and `prefix` is the database's log, else `None`
    /// (the view lists from storage).
    ///
    /// # Errors
    /// Never from the bulk read (a failed read falls back); the store's
    /// error when the fallback listing fails.
    pub async fn list(&self, prefix: &str, base: &dyn FullStore) -> Option<Result<Vec<String>, StoreError>> {
        if prefix != self.prefix {
            return None;
        }
        let (taken, writes) = {
            let mut inner = self.lock();
            let writes = inner.writes;
            if let State::Read { listing, .. } = &inner.state {
                let served = listing
                    .as_ref()
                    .filter(|listing| listing.writes == writes)
                    .map(|listing| listing.names.clone());
                (Taken::Listing(served), writes)
            } else {
                match std::mem::replace(&mut inner.state, State::Reading) {
                    State::Armed(reserved, purpose) => (Taken::Armed(reserved, purpose), writes),
                    State::Held {
                        records,
                        held,
                        listed,
                    } => (Taken::Held(records, held, listed), writes),
                    other => {
                        inner.state = other;
                        return None;
                    }
                }
            }
        };
        let (reserved, purpose) = match taken {
            Taken::Armed(reserved, purpose) => (reserved, purpose),
            Taken::Held(records, held, listed) => {
                let tail = Tail {
                    records,
                    held,
                    listed,
                    writes,
                };
                return Some(self.read_tail(prefix, base, tail).await);
            }
            Taken::Listing(Some(names)) => {
                self.pool.counts.listings_served.fetch_add(1, Ordering::Relaxed);
                return Some(Ok(names));
            }
            Taken::Listing(None) => {
                // Stale or none yet: storage's, kept for the next listing.
                let listed = base.list_roots(prefix).await;
                self.lock().keep_listing(&listed, writes);
                return Some(listed);
            }
        };
        let counts = &self.pool.counts;
        let max_bytes = reserved.num_permits() * 1024;
        let read = match self.pool.reader.read_prefix(prefix, max_bytes).await {
            Ok(read) => read,
            Err(error) => {
                tracing::debug!(prefix, %error, "log read-ahead failed; reading records one by one");
                if purpose == Purpose::Activation {
                    counts.skipped.fetch_add(1, Ordering::Relaxed);
                }
                self.lock().state = State::Off;
                return None;
            }
        };
        let bytes: usize = read.rows.iter().map(|(_, bytes)| bytes.len()).sum();
        let names = if read.complete {
            Ok(read.rows.iter().map(|(name, _)| name.clone()).collect())
        } else {
            // Stopped at its bound: the listing comes from storage; what was
            // read is still served.
            base.list_roots(prefix).await
        };
        // Keep only the budget the bytes use.
        let held = Some(keep(reserved, bytes));
        let records: HashMap<String, Vec<u8>> = read
            .rows
            .into_iter()
            .filter(|(name, _)| is_record(prefix, name))
            .collect();
        match purpose {
            Purpose::Activation => {
                counts.reads.fetch_add(1, Ordering::Relaxed);
                counts.records.fetch_add(records.len() as u64, Ordering::Relaxed);
            }
            Purpose::WholeLog => {
                counts.whole_log_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
        let mut inner = self.lock();
        // Every holder may have gone while it read: then nothing is kept.
        if inner.holders > 0 && matches!(inner.state, State::Reading) {
            inner.state = State::Read {
                records,
                _held: held,
                _tail: None,
                purpose,
                listing: None,
            };
            inner.keep_listing(&names, writes);
        }
        Some(names)
    }

    /// The first listing of an activation that starts from held records:
    /// the held listing and the names after it when there is one (else the
    /// listing from storage), and the listed records not held read eight
    /// at a time, within what is free of the budget (the rest Corium reads
    /// itself).
    async fn read_tail(
        &self,
        prefix: &str,
        base: &dyn FullStore,
        tail: Tail,
    ) -> Result<Vec<String>, StoreError> {
        let Tail {
            mut records,
            held,
            listed: known,
            writes,
        } = tail;
        let since = match &known {
            Some(known) => list_since(self.pool.reader.as_ref(), &self.pool.counts, prefix, known)
                .await
                .unwrap_or_else(|error| {
                    tracing::debug!(prefix, %error, "listing after the held names failed; listing in full");
                    None
                }),
            None => None,
        };
        let listed = match since {
            Some(names) => Ok(names),
            None => base.list_roots(prefix).await,
        };
        let tail: Vec<String> = listed
            .as_ref()
            .map(|names| {
                names
                    .iter()
                    .filter(|name| keepable(prefix, name) && !records.contains_key(*name))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let mut tail_held = None;
        if !tail.is_empty()
            && let Some(reserved) = self.pool.reserve()
        {
            let max_bytes = reserved.num_permits() * 1024;
            let mut bytes = 0;
            let mut reads = std::pin::pin!(read_roots(base, tail));
            while let Ok(Some((name, record))) = reads.try_next().await {
                let Some(record) = record else { continue };
                bytes += record.len();
                if bytes > max_bytes {
                    break;
                }
                records.insert(name, record);
            }
            tail_held = Some(keep(reserved, bytes.min(max_bytes)));
        }
        let mut inner = self.lock();
        if inner.holders > 0 && matches!(inner.state, State::Reading) {
            inner.state = State::Read {
                records,
                _held: Some(held),
                _tail: tail_held,
                purpose: Purpose::Activation,
                listing: None,
            };
            inner.keep_listing(&listed, writes);
        }
        listed
    }
}
